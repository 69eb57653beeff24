#include "quant_scheme.h"

#include <lithe/sdk/error.h>
#include <lithe/sdk/option_spec.h>

#include <algorithm>
#include <optional>
#include <vector>

namespace lithe::plugins::qat {
namespace {

using sdk::QuantType;

const std::vector<std::string>& scheme_names() {
  static const std::vector<std::string> names = {"per_tensor_affine", "per_tensor_symmetric",
                                                 "per_channel_affine", "per_channel_symmetric"};
  return names;
}

const std::vector<std::string>& dtype_names() {
  static const std::vector<std::string> names = {"uint", "int"};
  return names;
}

// `key` appended to the JSON Pointer `path` (RFC 6901 escapes: an object key is the user's).
std::string pointer(const std::string& path, const std::string& key) {
  std::string out = path + "/";
  for (char c : key) {
    out += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
  }
  return out;
}

// The value an SDK conversion error quotes: its messages end "<path> must be <rule>, got
// <value>" (sdk/options.h).
std::string value_seen(const sdk::Error& e) {
  const std::string what = e.what();
  const size_t at = what.find(", got ");
  return at == std::string::npos ? what : what.substr(at + 6);
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) {
    out += (out.empty() ? "\"" : ", \"") + name + "\"";
  }
  return out;
}

/// One quant type's value of a string-or-object key, and where it was written.
struct Choice {
  size_t index = 0;  ///< into the key's choices
  std::string path;  ///< the key (string form) or the key's member (object form)
};

// `key` of `entry` per quant type of the entry (nullopt: absent, the default), checked against
// `choices`. `example` is a value for the object form's example in messages.
std::array<std::optional<Choice>, 3> read_per_type(const sdk::Options& entry,
                                                   const std::string& key,
                                                   const std::vector<std::string>& choices,
                                                   const std::vector<QuantType>& types) {
  std::array<std::optional<Choice>, 3> out;
  if (!entry.has(key)) {
    return out;
  }
  const std::string path = pointer(entry.path(), key);
  const std::string one = "one of " + quoted_list(choices);
  const auto choose = [&](const std::string& value, const std::string& where,
                          const std::string& rule) {
    const auto it = std::find(choices.begin(), choices.end(), value);
    LITHE_CHECK(it != choices.end(), sdk::Errc::kInvalidConfig, where, " must be ", rule,
                ", got \"", sdk::printable(value, 80), "\"");
    return Choice{static_cast<size_t>(it - choices.begin()), where};
  };
  std::optional<std::string> text;
  try {
    text = entry.require<std::string>(key);
  } catch (const sdk::Error&) {
    // not a string: the object form, or a value of another type (reported below)
  }
  const std::string either = one + ", or an object giving one per quant type";
  if (text) {  // one value for every quant type of the entry
    const Choice choice = choose(*text, path, either);
    for (QuantType type : types) {
      out[static_cast<size_t>(type)] = choice;
    }
    return out;
  }
  sdk::Options object;
  try {
    object = entry.child(key);
  } catch (const sdk::Error& e) {
    LITHE_CHECK(false, sdk::Errc::kInvalidConfig, path, " must be ", either, ", got ",
                value_seen(e));
  }
  std::vector<std::string> type_names;
  for (QuantType type : types) {
    type_names.emplace_back(sdk::quant_type_name(type));
  }
  for (const std::string& name : object.keys()) {
    const std::string where = pointer(path, name);
    const auto it = std::find(type_names.begin(), type_names.end(), name);
    LITHE_CHECK(it != type_names.end(), sdk::Errc::kInvalidConfig, where,
                ": the keys of ", key, " must be quant types of this entry (",
                quoted_list(type_names), "), got \"", sdk::printable(name, 80), "\"");
    std::string value;
    try {
      value = object.require<std::string>(name);
    } catch (const sdk::Error& e) {
      LITHE_CHECK(false, sdk::Errc::kInvalidConfig, where, " must be ", one, ", got ",
                  value_seen(e));
    }
    out[static_cast<size_t>(types[static_cast<size_t>(it - type_names.begin())])] =
        choose(value, where, one);
  }
  return out;
}

}  // namespace

const char* quant_scheme_name(QuantScheme scheme) {
  return scheme_names()[static_cast<size_t>(scheme)].c_str();
}

const char* quant_dtype_name(QuantDtype dtype) {
  return dtype_names()[static_cast<size_t>(dtype)].c_str();
}

bool is_symmetric(QuantScheme scheme) {
  return scheme == QuantScheme::kPerTensorSymmetric || scheme == QuantScheme::kPerChannelSymmetric;
}

bool is_per_channel(QuantScheme scheme) {
  return scheme == QuantScheme::kPerChannelAffine || scheme == QuantScheme::kPerChannelSymmetric;
}

std::array<TypeScheme, 3> read_type_schemes(const sdk::Options& entry) {
  const std::vector<QuantType> types = sdk::quant_types(entry);
  const auto schemes = read_per_type(entry, kQuantSchemeKey, scheme_names(), types);
  const auto dtypes = read_per_type(entry, kQuantDtypeKey, dtype_names(), types);
  std::array<TypeScheme, 3> out;
  for (QuantType type : types) {
    const size_t t = static_cast<size_t>(type);
    if (const std::optional<Choice>& s = schemes[t]) {
      out[t].scheme = static_cast<QuantScheme>(s->index);
      LITHE_CHECK(type == QuantType::kWeight || !is_per_channel(out[t].scheme),
                  sdk::Errc::kInvalidConfig, s->path, " must be \"per_tensor_affine\" or ",
                  "\"per_tensor_symmetric\" for the ", sdk::quant_type_name(type),
                  " (per-channel grids are for the weight only, one per output channel",
                  types.size() > 1 ? "; give each quant type its own scheme, e.g. {\"weight\": "
                                     "\"per_channel_symmetric\", \"output\": "
                                     "\"per_tensor_affine\"}"
                                   : "",
                  "), got \"", quant_scheme_name(out[t].scheme), "\"");
    }
    if (const std::optional<Choice>& d = dtypes[t]) {
      out[t].dtype = static_cast<QuantDtype>(d->index);
      const int64_t bits = sdk::quant_bits(entry, type);
      LITHE_CHECK(out[t].dtype == QuantDtype::kUint || bits >= 2, sdk::Errc::kInvalidConfig,
                  d->path, " must be \"uint\" for the ", sdk::quant_type_name(type),
                  "'s 1-bit grid (", sdk::quant_bits_path(entry, type),
                  "; the signed grid [-(2^(bits-1))+1, 2^(bits-1)-1] needs at least 2 bits), "
                  "got \"int\"");
    }
  }
  return out;
}

}  // namespace lithe::plugins::qat
