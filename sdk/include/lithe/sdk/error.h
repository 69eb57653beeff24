#pragma once
/// \file
/// The one error type of Lithe. A message states where (JSON path, layer name or file), the rule
/// that was broken and the value observed, e.g.
/// "/config_list/0/sparsity must be a number in [0, 1), got 1.5".

#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "lithe/sdk/export.h"

namespace lithe::sdk {

/// What kind of failure an Error reports. Stable: new codes are appended.
enum class Errc {
  kInvalidConfig,     ///< a JSON config or option violates a rule
  kUnsupportedLayer,  ///< an algorithm cannot handle a selected layer (type, shape)
  kShapeMismatch,     ///< tensors (masks, weights, data) do not have the expected shape
  kDeviceMismatch,    ///< tensors are on an unexpected device or have an unexpected dtype
  kPluginLoad,        ///< a plugin file could not be loaded or registered
  kVersionMismatch,   ///< a plugin was built against another SDK API or ABI
  kIo,                ///< a file could not be read or written
  kInvalidModel,      ///< a model file or module structure is unusable
  kUnsupported,       ///< a feature is not available for this kind of model
  kInternal,          ///< a bug in Lithe
};

/// Short stable name of a code, e.g. "invalid_config".
LITHE_SDK_API const char* errc_name(Errc code) noexcept;

/// `text` as it may appear inside a one-line message: control characters escaped (\n, \x00)
/// and cut after `max_bytes` with the original length noted. For quoting user-supplied names and
/// values (keys, file contents) in error messages.
LITHE_SDK_API std::string printable(const std::string& text, size_t max_bytes = 120);

/// Thrown by the SDK, the host and plugins. Plugins throw only this type (or let c10::Error
/// escape from libtorch calls); the host wraps every plugin call and adds context.
class LITHE_SDK_API Error : public std::runtime_error {
 public:
  /// The message is kept on one line: control characters are escaped and a message longer than
  /// 2,000 bytes loses its middle.
  Error(Errc code, const std::string& message);
  ~Error() override;
  /// The failure category.
  Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

namespace detail {
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
template <class T>
constexpr bool is_string_literal_v =
    std::is_array_v<std::remove_reference_t<T>> &&
    std::is_same_v<std::remove_cv_t<std::remove_extent_t<std::remove_reference_t<T>>>, char>;
}  // namespace detail

}  // namespace lithe::sdk

/// Throws lithe::sdk::Error(errc, message) unless `cond` holds. At least one message part is
/// required, and a string literal as the condition (always true) does not compile.
#define LITHE_CHECK(cond, errc, first, ...)                                                    \
  do {                                                                                         \
    static_assert(!::lithe::sdk::detail::is_string_literal_v<decltype(cond)>,                  \
                  "LITHE_CHECK: the condition is a string literal");                           \
    if (!(cond)) {                                                                             \
      throw ::lithe::sdk::Error((errc), ::lithe::sdk::detail::concat((first), ##__VA_ARGS__)); \
    }                                                                                          \
  } while (false)

/// For conditions that can only fail through a bug in Lithe itself.
#define LITHE_INTERNAL_ASSERT(cond)                                                             \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      throw ::lithe::sdk::Error(::lithe::sdk::Errc::kInternal,                                  \
                                ::lithe::sdk::detail::concat(__FILE__, ":", __LINE__, ": ",     \
                                                             "internal check failed: ", #cond,  \
                                                             "; this is a bug in lithe, please " \
                                                             "report it"));                     \
    }                                                                                           \
  } while (false)
