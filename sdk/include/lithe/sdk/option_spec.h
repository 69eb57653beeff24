#pragma once
/// \file
/// Self-describing algorithms (SDK 1.4): an algorithm declares each key it accepts once, as an
/// OptionSpec (type, default, range, help), and reads the key through that declaration. The same
/// declaration, registered with Registry::describe_options, is what `lithe plugins --describe`
/// prints and what an unknown-key error lists, so the documentation a user sees and the rule the
/// code applies cannot drift apart.
///
///   const sdk::OptionSchema& keys() {
///     static const sdk::OptionSchema schema{
///         sdk::option("statistics_batch_num", sdk::OptionType::kInteger,
///                     "batches of activations averaged before ranking")
///             .defaults_to("1").above(0)};
///     return schema;
///   }
///   int64_t batches = keys().read<int64_t>(options, "statistics_batch_num");  // 1 when absent

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "lithe/sdk/export.h"
#include "lithe/sdk/options.h"

namespace lithe::sdk {

/// The JSON type of a key. kIntegerOrObject: an integer, or an object of integers by name (e.g.
/// quant_bits: 8 or {"weight": 8}); the algorithm reads such a key itself.
enum class OptionType {
  kBool,
  kInteger,
  kNumber,
  kString,
  kIntegerList,
  kNumberList,
  kStringList,
  kObject,
  kIntegerOrObject,
};

/// "bool", "integer", "number", "string", "integer list", "number list", "string list",
/// "object", "integer or object".
LITHE_SDK_API const char* option_type_name(OptionType type);

/// Where a key lives: the algorithm's "options" object, or each "config_list" entry.
enum class OptionScope { kOptions, kConfigEntry };

/// One key an algorithm accepts. Build with option() / entry_key() and the chained setters;
/// every setter returns *this.
struct LITHE_SDK_API OptionSpec {
  std::string key;
  OptionType type = OptionType::kNumber;
  OptionScope scope = OptionScope::kOptions;
  std::string help;                   ///< one line: what the key means
  bool required = false;              ///< absent key is an error
  std::string default_json;           ///< JSON text of the default ("0", "\"relu\"", "{}"); "" = none
  std::optional<double> minimum;      ///< numbers, integers and their lists: each value
  bool minimum_exclusive = false;
  std::optional<double> maximum;
  bool maximum_exclusive = false;
  std::vector<std::string> choices;   ///< strings and string lists: allowed values ("" = any)

  OptionSpec& mandatory();                         ///< the key must be present
  OptionSpec& defaults_to(std::string json_text);  ///< the value an absent key reads as
  OptionSpec& at_least(double bound);              ///< value >= bound
  OptionSpec& above(double bound);                 ///< value > bound
  OptionSpec& at_most(double bound);               ///< value <= bound
  OptionSpec& below(double bound);                 ///< value < bound
  OptionSpec& one_of(std::vector<std::string> allowed);

  /// The rule as a user reads it: "a number in [0, 1)", "an integer > 0", "one of \"relu\",
  /// \"relu6\"", "true or false", "an integer or object" ...
  std::string rule() const;
};

/// A key of the algorithm's "options" object.
LITHE_SDK_API OptionSpec option(std::string key, OptionType type, std::string help);
/// A key of each "config_list" entry.
LITHE_SDK_API OptionSpec entry_key(std::string key, OptionType type, std::string help);

/// Every key one algorithm accepts, in declaration order. A key is declared once (in one scope).
class LITHE_SDK_API OptionSchema {
 public:
  OptionSchema() = default;
  /// Throws sdk::Error(kInternal) for a key declared twice, a default that does not satisfy its
  /// own type and rule, or a required key with a default: the declaration is a plugin's bug.
  OptionSchema(std::initializer_list<OptionSpec> specs);
  /// Appends one key (same checks); returns *this.
  OptionSchema& add(OptionSpec spec);
  /// Appends every key of `other` (e.g. the SDK's filter_pruner_keys()); returns *this.
  OptionSchema& add(const OptionSchema& other);
  /// Replaces the declaration of an already declared key, in place (e.g. to narrow the SDK's
  /// quant_bits range or quant_types choices to what an algorithm supports); same checks as
  /// add, and sdk::Error(kInternal) when the key is not declared. Returns *this.
  OptionSchema& replace(OptionSpec spec);

  const std::vector<OptionSpec>& specs() const { return specs_; }
  /// The declaration of `key`, or nullptr.
  const OptionSpec* find(const std::string& key) const;

  /// Reads `key` from `options` by its declaration: present → converted (Options::require<T>
  /// rules) and checked against the declared range/choices; absent → the declared default, or
  /// sdk::Error(kInvalidConfig) naming the path when the key is required. Errors read
  /// "<path>/<key> must be <rule>, got <value>". Throws sdk::Error(kInternal) when `key` is not
  /// declared, T does not match the declared type, or an optional key without a default is
  /// absent (test has() first). Supported T as for Options; kIntegerOrObject and kObject keys
  /// are read with Options directly.
  template <class T>
  T read(const Options& options, const std::string& key) const;

  /// Checks every declared key present in `options` whose scope is `scope` (type, range,
  /// choices) and every required key of that scope; for hosts that validate before a plugin
  /// runs. Does not mark keys read (the algorithm still reads what it uses). kIntegerOrObject
  /// keys are checked for their JSON type only. Errors end with the key's help.
  void check(const Options& options, OptionScope scope) const;

 private:
  std::vector<OptionSpec> specs_;
};

#define LITHE_DETAIL_DECLARE_SCHEMA_READ(T) \
  extern template LITHE_SDK_API T OptionSchema::read<T>(const Options&, const std::string&) const;
LITHE_DETAIL_DECLARE_SCHEMA_READ(bool)
LITHE_DETAIL_DECLARE_SCHEMA_READ(int64_t)
LITHE_DETAIL_DECLARE_SCHEMA_READ(double)
LITHE_DETAIL_DECLARE_SCHEMA_READ(std::string)
LITHE_DETAIL_DECLARE_SCHEMA_READ(std::vector<int64_t>)
LITHE_DETAIL_DECLARE_SCHEMA_READ(std::vector<double>)
LITHE_DETAIL_DECLARE_SCHEMA_READ(std::vector<std::string>)
#undef LITHE_DETAIL_DECLARE_SCHEMA_READ

/// The keys the SDK's own building blocks read, for plugins to add to their schemas:
/// "sparsity" (config_list entry, a number in [0, 1), required), read by make_one_shot_pruner
/// and make_filter_pruner.
LITHE_SDK_API const OptionSchema& sparsity_keys();
/// "dependency_aware" and "dummy_input" (options), read by make_filter_pruner.
LITHE_SDK_API const OptionSchema& filter_pruner_keys();
/// "quant_types" and "quant_bits" (config_list entry, both required), read by
/// check_quant_config / quant_types / quant_bits.
LITHE_SDK_API const OptionSchema& quantizer_keys();

}  // namespace lithe::sdk
