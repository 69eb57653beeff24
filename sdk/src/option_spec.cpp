#include "lithe/sdk/option_spec.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <type_traits>

#include "lithe/sdk/error.h"
#include "lithe/sdk_internal/options_json.h"

namespace lithe::sdk {
namespace {

using json = nlohmann::ordered_json;

// The shortest text that reads back as `v` (0.1, not 0.10000000000000001).
std::string number_text(double v) {
  for (int digits = 1;; ++digits) {
    std::ostringstream out;
    out.precision(digits);
    out << v;
    if (digits >= 17 || std::stod(out.str()) == v) {
      return out.str();
    }
  }
}

bool numeric(OptionType type) {
  return type == OptionType::kInteger || type == OptionType::kNumber ||
         type == OptionType::kIntegerList || type == OptionType::kNumberList;
}

bool textual(OptionType type) {
  return type == OptionType::kString || type == OptionType::kStringList;
}

// The declared type each supported C++ type reads.
template <class T>
constexpr OptionType type_of() {
  if constexpr (std::is_same_v<T, bool>) {
    return OptionType::kBool;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return OptionType::kInteger;
  } else if constexpr (std::is_same_v<T, double>) {
    return OptionType::kNumber;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return OptionType::kString;
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    return OptionType::kIntegerList;
  } else if constexpr (std::is_same_v<T, std::vector<double>>) {
    return OptionType::kNumberList;
  } else {
    static_assert(std::is_same_v<T, std::vector<std::string>>);
    return OptionType::kStringList;
  }
}

// "[0, 1)", "> 0", "<= 32": the numeric part of a rule; "" when unbounded.
std::string bounds_text(const OptionSpec& spec) {
  if (spec.minimum && spec.maximum) {
    return "in " + std::string(spec.minimum_exclusive ? "(" : "[") + number_text(*spec.minimum) +
           ", " + number_text(*spec.maximum) + (spec.maximum_exclusive ? ")" : "]");
  }
  if (spec.minimum) {
    return (spec.minimum_exclusive ? "> " : ">= ") + number_text(*spec.minimum);
  }
  if (spec.maximum) {
    return (spec.maximum_exclusive ? "< " : "<= ") + number_text(*spec.maximum);
  }
  return "";
}

bool within(const OptionSpec& spec, double v) {
  if (spec.minimum && (spec.minimum_exclusive ? v <= *spec.minimum : v < *spec.minimum)) {
    return false;
  }
  return !(spec.maximum && (spec.maximum_exclusive ? v >= *spec.maximum : v > *spec.maximum));
}

bool allowed(const OptionSpec& spec, const std::string& v) {
  return spec.choices.empty() ||
         std::find(spec.choices.begin(), spec.choices.end(), v) != spec.choices.end();
}

void check_value(const OptionSpec& spec, double v, const std::string& where) {
  LITHE_CHECK(within(spec, v), Errc::kInvalidConfig, where, " must be ", spec.rule(), ", got ",
              number_text(v));
}

void check_value(const OptionSpec& spec, const std::string& v, const std::string& where) {
  LITHE_CHECK(allowed(spec, v), Errc::kInvalidConfig, where, " must be ", spec.rule(),
              ", got \"", printable(v, 80), "\"");
}

// Range/choice checks of an already converted value.
template <class T>
void check_rules(const OptionSpec& spec, const T& value, const std::string& where) {
  if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double>) {
    check_value(spec, static_cast<double>(value), where);
  } else if constexpr (std::is_same_v<T, std::string>) {
    check_value(spec, value, where);
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                       std::is_same_v<T, std::vector<double>> ||
                       std::is_same_v<T, std::vector<std::string>>) {
    // Each element is held to the rule of one element ("one of ...", "an integer >= 1").
    OptionSpec element = spec;
    element.type = std::is_same_v<T, std::vector<int64_t>>  ? OptionType::kInteger
                   : std::is_same_v<T, std::vector<double>> ? OptionType::kNumber
                                                            : OptionType::kString;
    for (size_t i = 0; i < value.size(); ++i) {
      check_rules(element, value[i], where + "/" + std::to_string(i));
    }
  }
}

// The value of `spec.key` (present, or required: a missing one throws naming a likely
// misspelling), converted as T and held to the declared range and choices. The one place both
// OptionSchema::read and OptionSchema::check convert a value.
template <class T>
T require_checked(const Options& options, const OptionSpec& spec) {
  T value = options.require<T>(spec.key);
  check_rules(spec, value, json_pointer_append(options.path(), spec.key));
  return value;
}

// Converts and checks the value of `spec.key` in `options` (present) by its declared type.
void check_present(const Options& options, const OptionSpec& spec) {
  switch (spec.type) {
    case OptionType::kBool:
      (void)require_checked<bool>(options, spec);
      break;
    case OptionType::kInteger:
      (void)require_checked<int64_t>(options, spec);
      break;
    case OptionType::kNumber:
      (void)require_checked<double>(options, spec);
      break;
    case OptionType::kString:
      (void)require_checked<std::string>(options, spec);
      break;
    case OptionType::kIntegerList:
      (void)require_checked<std::vector<int64_t>>(options, spec);
      break;
    case OptionType::kNumberList:
      (void)require_checked<std::vector<double>>(options, spec);
      break;
    case OptionType::kStringList:
      (void)require_checked<std::vector<std::string>>(options, spec);
      break;
    case OptionType::kObject:
      (void)options.child(spec.key);
      break;
    case OptionType::kIntegerOrObject: {
      const json& value = options_json(options).at(spec.key);
      LITHE_CHECK(value.is_number_integer() || value.is_object(), Errc::kInvalidConfig,
                  json_pointer_append(options.path(), spec.key), " must be ", spec.rule(),
                  ", got ", printable(value.dump(), 120));
      break;  // its reader marks it read after checking the details
    }
  }
}

// A declaration's default must itself pass the declaration.
void check_default(const OptionSpec& spec) {
  LITHE_CHECK(!(spec.required && !spec.default_json.empty()), Errc::kInternal, "option '",
              spec.key, "' is declared both required and with default ", spec.default_json);
  if (spec.default_json.empty()) {
    return;
  }
  json value;
  try {
    value = json::parse(spec.default_json);
  } catch (const std::exception& e) {
    LITHE_CHECK(false, Errc::kInternal, "option '", spec.key, "': default ", spec.default_json,
                " is not JSON (", e.what(), ")");
  }
  try {
    json holder = json::object();
    holder[spec.key] = value;
    check_present(options_from_json(holder, "(default of '" + spec.key + "')"), spec);
  } catch (const Error& e) {
    LITHE_CHECK(false, Errc::kInternal, "option '", spec.key,
                "' has a default that breaks its own declaration: ", e.what());
  }
}

}  // namespace

const char* option_type_name(OptionType type) {
  switch (type) {
    case OptionType::kBool: return "bool";
    case OptionType::kInteger: return "integer";
    case OptionType::kNumber: return "number";
    case OptionType::kString: return "string";
    case OptionType::kIntegerList: return "integer list";
    case OptionType::kNumberList: return "number list";
    case OptionType::kStringList: return "string list";
    case OptionType::kObject: return "object";
    case OptionType::kIntegerOrObject: return "integer or object";
  }
  return "?";
}

OptionSpec& OptionSpec::mandatory() {
  required = true;
  return *this;
}

OptionSpec& OptionSpec::defaults_to(std::string json_text) {
  default_json = std::move(json_text);
  return *this;
}

OptionSpec& OptionSpec::at_least(double bound) {
  minimum = bound;
  minimum_exclusive = false;
  return *this;
}

OptionSpec& OptionSpec::above(double bound) {
  minimum = bound;
  minimum_exclusive = true;
  return *this;
}

OptionSpec& OptionSpec::at_most(double bound) {
  maximum = bound;
  maximum_exclusive = false;
  return *this;
}

OptionSpec& OptionSpec::below(double bound) {
  maximum = bound;
  maximum_exclusive = true;
  return *this;
}

OptionSpec& OptionSpec::one_of(std::vector<std::string> allowed_values) {
  choices = std::move(allowed_values);
  return *this;
}

std::string OptionSpec::rule() const {
  if (type == OptionType::kBool) {
    return "true or false";
  }
  std::string text;
  switch (type) {
    case OptionType::kInteger: text = "an integer"; break;
    case OptionType::kNumber: text = "a number"; break;
    case OptionType::kString: text = "a string"; break;
    case OptionType::kIntegerList: text = "a list of integers"; break;
    case OptionType::kNumberList: text = "a list of numbers"; break;
    case OptionType::kStringList: text = "a list of strings"; break;
    case OptionType::kObject: text = "an object"; break;
    case OptionType::kIntegerOrObject: text = "an integer or an object of integers"; break;
    case OptionType::kBool: break;
  }
  if (numeric(type) || type == OptionType::kIntegerOrObject) {
    const std::string bounds = bounds_text(*this);
    if (!bounds.empty()) {
      text += (type == OptionType::kIntegerList || type == OptionType::kNumberList ||
               type == OptionType::kIntegerOrObject)
                  ? ", each " + bounds
                  : " " + bounds;
    }
  }
  if (textual(type) && !choices.empty()) {
    std::string list;
    for (const std::string& c : choices) {
      list += (list.empty() ? "\"" : ", \"") + c + "\"";
    }
    text = type == OptionType::kString ? "one of " + list : "a list of " + list;
  }
  return text;
}

OptionSpec option(std::string key, OptionType type, std::string help) {
  OptionSpec spec;
  spec.key = std::move(key);
  spec.type = type;
  spec.scope = OptionScope::kOptions;
  spec.help = std::move(help);
  return spec;
}

OptionSpec entry_key(std::string key, OptionType type, std::string help) {
  OptionSpec spec = option(std::move(key), type, std::move(help));
  spec.scope = OptionScope::kConfigEntry;
  return spec;
}

OptionSchema::OptionSchema(std::initializer_list<OptionSpec> specs) {
  for (const OptionSpec& spec : specs) {
    add(spec);
  }
}

OptionSchema& OptionSchema::add(OptionSpec spec) {
  LITHE_CHECK(!spec.key.empty(), Errc::kInternal, "an option is declared with an empty key");
  LITHE_CHECK(find(spec.key) == nullptr, Errc::kInternal, "option '", spec.key,
              "' is declared twice");
  check_default(spec);
  specs_.push_back(std::move(spec));
  return *this;
}

OptionSchema& OptionSchema::add(const OptionSchema& other) {
  for (const OptionSpec& spec : other.specs()) {
    add(spec);
  }
  return *this;
}

OptionSchema& OptionSchema::replace(OptionSpec spec) {
  const auto it = std::find_if(specs_.begin(), specs_.end(),
                               [&spec](const OptionSpec& s) { return s.key == spec.key; });
  LITHE_CHECK(it != specs_.end(), Errc::kInternal, "option '", spec.key,
              "' is replaced but was never declared");
  check_default(spec);
  *it = std::move(spec);
  return *this;
}

const OptionSpec* OptionSchema::find(const std::string& key) const {
  for (const OptionSpec& spec : specs_) {
    if (spec.key == key) {
      return &spec;
    }
  }
  return nullptr;
}

template <class T>
T OptionSchema::read(const Options& options, const std::string& key) const {
  const OptionSpec* spec = find(key);
  LITHE_CHECK(spec != nullptr, Errc::kInternal, "option '", key,
              "' is read but not declared in the algorithm's OptionSchema");
  LITHE_CHECK(spec->type == type_of<T>(), Errc::kInternal, "option '", key, "' is declared as ",
              option_type_name(spec->type), " but read as ", option_type_name(type_of<T>()));
  if (options.has(key) || spec->required) {
    return require_checked<T>(options, *spec);
  }
  LITHE_CHECK(!spec->default_json.empty(), Errc::kInternal, "option '", key,
              "' has no default: check has() before reading it");
  json holder = json::object();
  holder[key] = json::parse(spec->default_json);
  return options_from_json(holder, options.path()).require<T>(key);
}

void OptionSchema::check(const Options& given, OptionScope scope) const {
  // A copy with its own record of read keys: checking is not reading, so a declared key that
  // the algorithm never reads is still reported as unknown by the host.
  const Options options = options_from_json(options_json(given), given.path());
  for (const OptionSpec& spec : specs_) {
    if (spec.scope != scope) {
      continue;
    }
    if (options.has(spec.key)) {
      try {
        check_present(options, spec);
      } catch (const Error& e) {  // the declaration's help says what the key is for
        throw Error(e.code(), detail::concat(e.what(), " (", spec.key, ": ", spec.help, ")"));
      }
    } else if (spec.required) {
      try {
        (void)options.require<bool>(spec.key);  // absent: throws naming a likely misspelling
      } catch (const Error& e) {
        throw Error(e.code(), detail::concat(e.what(), " (", spec.key, ": ", spec.rule(), "; ",
                                             spec.help, ")"));
      }
    }
  }
}

#define LITHE_DETAIL_DEFINE_SCHEMA_READ(T) \
  template T OptionSchema::read<T>(const Options&, const std::string&) const;
LITHE_DETAIL_DEFINE_SCHEMA_READ(bool)
LITHE_DETAIL_DEFINE_SCHEMA_READ(int64_t)
LITHE_DETAIL_DEFINE_SCHEMA_READ(double)
LITHE_DETAIL_DEFINE_SCHEMA_READ(std::string)
LITHE_DETAIL_DEFINE_SCHEMA_READ(std::vector<int64_t>)
LITHE_DETAIL_DEFINE_SCHEMA_READ(std::vector<double>)
LITHE_DETAIL_DEFINE_SCHEMA_READ(std::vector<std::string>)
#undef LITHE_DETAIL_DEFINE_SCHEMA_READ

const OptionSchema& sparsity_keys() {
  static const OptionSchema schema{
      entry_key("sparsity", OptionType::kNumber,
                "fraction of each selected layer's weights (or filters) to prune")
          .mandatory()
          .at_least(0)
          .below(1)};
  return schema;
}

const OptionSchema& filter_pruner_keys() {
  static const OptionSchema schema{
      option("dependency_aware", OptionType::kBool,
             "prune the same channels in layers whose outputs are added together (read from "
             "the model's TorchScript graph)")
          .defaults_to("false"),
      option("dummy_input", OptionType::kString,
             "accepted only as a string, for NNI compatibility, and ignored: dependency_aware "
             "reads the channel dependencies from the model's TorchScript graph, no tracing "
             "input is needed")};
  return schema;
}

const OptionSchema& quantizer_keys() {
  static const OptionSchema schema{
      entry_key("quant_types", OptionType::kStringList, "what to quantize in each layer")
          .mandatory()
          .one_of({"input", "weight", "output"}),
      entry_key("quant_bits", OptionType::kIntegerOrObject,
                "bit width: one for all quant types, or per type {\"weight\": 8, ...}")
          .mandatory()
          .at_least(1)
          .at_most(32)};
  return schema;
}

}  // namespace lithe::sdk
