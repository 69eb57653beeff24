#include "ptq_config.h"

#include <lithe/sdk/error.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace lithe::plugins::ptq {
namespace {

using sdk::QuantType;

constexpr const char* kAveragingConstant = "averaging_constant";
constexpr const char* kPercentile = "percentile";

const std::vector<std::string> kSchemes = {"per_tensor_affine", "per_tensor_symmetric",
                                           "per_channel_affine", "per_channel_symmetric"};
const std::vector<std::string> kDtypes = {"uint", "int"};
const std::vector<std::string> kObservers = {"min_max", "moving_average", "percentile", "mse",
                                             "kl"};

std::string quoted(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) {
    out += (out.empty() ? "\"" : ", \"") + name + "\"";
  }
  return out;
}

// The value an SDK conversion error quotes ("<path> must be <rule>, got <value>").
std::string value_seen(const sdk::Error& e) {
  const std::string what = e.what();
  const size_t at = what.find(", got ");
  return at == std::string::npos ? what : what.substr(at + 6);
}

// `path` + "/" + `key`, escaped as a JSON Pointer token (RFC 6901).
std::string pointer(const std::string& path, const std::string& key) {
  std::string out = path + "/";
  for (char c : key) {
    out += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
  }
  return out;
}

/// One quant type's choice of a string-or-object key, and the JSON path it was written at.
struct Choice {
  size_t index = 0;
  std::string path;
};

// `key` of `entry` per quant type (nullopt: not given): a string for every quant type of the
// entry, or an object whose keys are quant types of the entry, each a string among `choices`.
std::array<std::optional<Choice>, 3> read_per_type(const sdk::Options& entry,
                                                   const std::string& key,
                                                   const std::vector<std::string>& choices,
                                                   const std::vector<QuantType>& types) {
  std::array<std::optional<Choice>, 3> out;
  if (!entry.has(key)) {
    return out;
  }
  const std::string path = pointer(entry.path(), key);
  const std::string one = "one of " + quoted(choices);
  const std::string either = one + ", or an object giving one per quant type";
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
    // the object form, or a value of another JSON type (reported below)
  }
  if (text) {
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
  std::vector<std::string> names;
  for (QuantType type : types) {
    names.emplace_back(sdk::quant_type_name(type));
  }
  for (const std::string& name : object.keys()) {
    const std::string where = pointer(path, name);
    const auto it = std::find(names.begin(), names.end(), name);
    LITHE_CHECK(it != names.end(), sdk::Errc::kInvalidConfig, where, ": the keys of ", key,
                " must be quant types of this entry (", quoted(names), "), got \"",
                sdk::printable(name, 80), "\"");
    std::string value;
    try {
      value = object.require<std::string>(name);
    } catch (const sdk::Error& e) {
      LITHE_CHECK(false, sdk::Errc::kInvalidConfig, where, " must be ", one, ", got ",
                  value_seen(e));
    }
    out[static_cast<size_t>(types[static_cast<size_t>(it - names.begin())])] =
        choose(value, where, one);
  }
  return out;
}

}  // namespace

const char* observer_name(Observer observer) {
  return kObservers[static_cast<size_t>(observer)].c_str();
}

Params TypeConfig::params(float rmin, float rmax) const {
  rmin = std::min(rmin, 0.0f);
  rmax = std::max(rmax, 0.0f);
  Params p;
  if (symmetric) {
    const float abs_max = std::max(std::fabs(rmin), std::fabs(rmax));
    const auto half_width = static_cast<float>(static_cast<double>(qmax - qmin) / 2.0);
    p.scale = std::max(abs_max / half_width, kMinScale);
    p.zero_point = static_cast<float>((qmin + qmax + 1) / 2);  // 0 (int) or 2^(bits−1) (uint)
    return p;
  }
  const auto lo = static_cast<float>(qmin);
  const auto hi = static_cast<float>(qmax);
  p.scale = std::max((rmax - rmin) / static_cast<float>(qmax - qmin), kMinScale);
  const float zero_point = lo - std::nearbyint(rmin / p.scale);  // half to even
  p.zero_point = zero_point < lo ? lo : zero_point > hi ? hi : zero_point;
  return p;
}

const sdk::OptionSchema& option_keys() {
  static const sdk::OptionSchema schema =
      sdk::OptionSchema()
          .add(sdk::quantizer_keys())
          .add(sdk::entry_key(kAveragingConstant, sdk::OptionType::kNumber,
                              "moving_average observer: weight c of each batch in "
                              "m = m + c * (batch - m)")
                   .defaults_to("0.01")
                   .above(0)
                   .at_most(1))
          .add(sdk::entry_key(kPercentile, sdk::OptionType::kNumber,
                              "percentile observer: the range keeps the values between the "
                              "(100 - p)-th and the p-th percentile")
                   .defaults_to("99.99")
                   .at_least(50)
                   .at_most(100));
  return schema;
}

EntryConfig read_entry(const sdk::Options& entry) {
  const std::vector<QuantType> types = sdk::quant_types(entry);
  const auto schemes = read_per_type(entry, "quant_scheme", kSchemes, types);
  const auto dtypes = read_per_type(entry, "quant_dtype", kDtypes, types);
  const auto observers = read_per_type(entry, "observer", kObservers, types);
  EntryConfig out;
  out.averaging_constant =
      static_cast<float>(option_keys().read<double>(entry, kAveragingConstant));
  out.percentile = option_keys().read<double>(entry, kPercentile);
  const std::string example =
      types.size() > 1 ? "; give each quant type its own, e.g. {\"weight\": \"min_max\", "
                         "\"output\": \"kl\"}"
                       : "";
  for (QuantType type : types) {
    const size_t t = static_cast<size_t>(type);
    const std::string name = sdk::quant_type_name(type);
    TypeConfig& config = out.types[t];
    config.enabled = true;
    config.bits = sdk::quant_bits(entry, type);
    if (const auto& s = schemes[t]) {
      config.symmetric = s->index == 1 || s->index == 3;
      config.per_channel = s->index >= 2;
      LITHE_CHECK(type == QuantType::kWeight || !config.per_channel, sdk::Errc::kInvalidConfig,
                  s->path, " must be \"per_tensor_affine\" or \"per_tensor_symmetric\" for the ",
                  name, " (per-channel grids are for the weight only, one per output channel",
                  types.size() > 1 ? "; give each quant type its own scheme, e.g. {\"weight\": "
                                     "\"per_channel_symmetric\", \"output\": "
                                     "\"per_tensor_affine\"}"
                                   : "",
                  "), got \"", kSchemes[s->index], "\"");
    }
    const bool signed_grid = dtypes[t] && dtypes[t]->index == 1;
    LITHE_CHECK(!signed_grid || config.bits >= 2, sdk::Errc::kInvalidConfig, dtypes[t]->path,
                " must be \"uint\" for the ", name, "'s 1-bit grid (",
                sdk::quant_bits_path(entry, type),
                "; the signed grid [-(2^(bits-1))+1, 2^(bits-1)-1] needs at least 2 bits), "
                "got \"int\"");
    const int64_t half = int64_t{1} << (config.bits - 1);
    config.qmin = signed_grid ? -half + 1 : 0;
    config.qmax = signed_grid ? half - 1 : (int64_t{1} << config.bits) - 1;
    if (const auto& o = observers[t]) {
      config.observer = static_cast<Observer>(o->index);
      LITHE_CHECK(type != QuantType::kWeight || (config.observer != Observer::kMovingAverage &&
                                                 config.observer != Observer::kKl),
                  sdk::Errc::kInvalidConfig, o->path,
                  " must be \"min_max\", \"mse\" or \"percentile\" for the weight (its range "
                  "comes from the current weight, not from a stream of batches",
                  example, "), got \"", kObservers[o->index], "\"");
    }
  }
  // A key only an observer the entry does not use would read is a mistake, not a default.
  const auto uses = [&](Observer observer) {
    return std::any_of(out.types.begin(), out.types.end(),
                       [&](const TypeConfig& c) { return c.enabled && c.observer == observer; });
  };
  for (const auto& [key, observer] : {std::pair{kAveragingConstant, Observer::kMovingAverage},
                                      std::pair{kPercentile, Observer::kPercentile}}) {
    LITHE_CHECK(!entry.has(key) || uses(observer), sdk::Errc::kInvalidConfig,
                pointer(entry.path(), key), " is read only by the \"", observer_name(observer),
                "\" observer, which no quant type of this entry uses (set \"observer\"), got ",
                option_keys().read<double>(entry, key));
  }
  return out;
}

}  // namespace lithe::plugins::ptq
