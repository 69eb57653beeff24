#pragma once
/// \file
/// A typed, read-tracking view of one JSON object of a configuration (an algorithm's "options",
/// or one entry of "config_list"). Every key an algorithm reads is recorded; after validation the
/// host rejects keys nobody read, so a misspelled key is an error instead of a silent default.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lithe/sdk/export.h"

namespace lithe::sdk {

/// Copies share one underlying JSON value and one record of read keys. Reading never throws
/// anything but sdk::Error(kInvalidConfig) with the JSON path of the offending key.
/// Supported T: bool, int64_t, double, std::string, std::vector<int64_t>, std::vector<double>,
/// std::vector<std::string>. `double` accepts JSON integers; `int64_t` rejects fractions.
/// Not thread-safe for concurrent reads of the same object (reads record keys).
class LITHE_SDK_API Options {
 public:
  /// An empty JSON object at path "" (the document root).
  Options();
  ~Options();
  Options(const Options&);
  Options& operator=(const Options&);

  /// JSON Pointer of this object in the user's document, e.g. "/config_list/2".
  const std::string& path() const;
  /// Whether `key` is present (does not count as reading it).
  bool has(const std::string& key) const;
  /// The value of `key`; throws if it is missing or of the wrong type.
  template <class T>
  T require(const std::string& key) const;
  /// The value of `key`, or `fallback` when it is absent; throws if present with the wrong type.
  template <class T>
  T get_or(const std::string& key, T fallback) const;
  /// The JSON object under `key` (throws if missing or not an object). Marks `key` read.
  Options child(const std::string& key) const;
  /// Marks `key` read without converting it (for keys handled generically).
  void mark_read(const std::string& key) const;
  /// All keys, in document order.
  std::vector<std::string> keys() const;
  /// Compact JSON text of the object, e.g. for reports.
  std::string dump() const;

  struct Impl;
  /// Host use only: wraps an implementation object (see sdk/internal/).
  explicit Options(std::shared_ptr<Impl> impl);
  /// Host use only.
  const std::shared_ptr<Impl>& impl() const { return impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

#define LITHE_DETAIL_DECLARE_OPTION_TYPE(T)                                    \
  extern template LITHE_SDK_API T Options::require<T>(const std::string&) const; \
  extern template LITHE_SDK_API T Options::get_or<T>(const std::string&, T) const;
LITHE_DETAIL_DECLARE_OPTION_TYPE(bool)
LITHE_DETAIL_DECLARE_OPTION_TYPE(int64_t)
LITHE_DETAIL_DECLARE_OPTION_TYPE(double)
LITHE_DETAIL_DECLARE_OPTION_TYPE(std::string)
LITHE_DETAIL_DECLARE_OPTION_TYPE(std::vector<int64_t>)
LITHE_DETAIL_DECLARE_OPTION_TYPE(std::vector<double>)
LITHE_DETAIL_DECLARE_OPTION_TYPE(std::vector<std::string>)
#undef LITHE_DETAIL_DECLARE_OPTION_TYPE

}  // namespace lithe::sdk
