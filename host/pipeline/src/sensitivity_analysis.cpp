#include "lithe/host/pipeline/sensitivity_analysis.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "lithe/host/io/number_text.h"
#include "lithe/host/pipeline/svg_chart.h"
#include "lithe/host/session/compression_config.h"
#include "lithe/host/session/pruning_session.h"
#include "lithe/host/io/field_error.h"
#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

std::vector<double> rounded_sparsities(const std::vector<double>& given) {
  std::vector<double> out;
  if (given.empty()) {
    for (int i = 1; i <= 9; ++i) {
      out.push_back(i / 10.0);  // np.arange(0.1, 1.0, 0.1) rounded to 2 decimals
    }
    return out;
  }
  for (const double s : given) {
    LITHE_CHECK(std::isfinite(s) && s > 0.0 && s < 1.0, sdk::Errc::kInvalidConfig,
                field_ref("sparsities"), ": every sparsity must be in (0, 1), got ", s);
    out.push_back(std::round(s * 100.0) / 100.0);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  for (const double s : out) {
    LITHE_CHECK(s > 0.0 && s < 1.0, sdk::Errc::kInvalidConfig, field_ref("sparsities"), ": ", s,
                " rounds to 2 decimals as 0 or 1 (NNI rounds the list to 2 decimals)");
  }
  return out;
}

bool must_stop(SensitivityStop stop, double value, double original, double current) {
  switch (stop) {
    case SensitivityStop::kNone: return false;
    case SensitivityStop::kMinimize: return current < value;
    case SensitivityStop::kMaximize: return current > value;
    case SensitivityStop::kDropped: return current < original - value;
    case SensitivityStop::kRaised: return current > original + value;
  }
  return false;
}

}  // namespace

namespace {

SensitivityResult analyse(Model& model, const PluginRegistry& registry,
                          const SensitivityOptions& options, const SensitivityMetric& metric) {
  SensitivityResult result;
  result.sparsities = rounded_sparsities(options.sparsities);
  const std::set<std::string> types(options.op_types.begin(), options.op_types.end());
  std::vector<const ModuleRecord*> targets;
  for (const ModuleRecord& m : model.modules()) {
    if ((types.count(m.op_type) != 0 || types.count(m.class_name) != 0) && m.weight.has_value()) {
      targets.push_back(&m);
    }
  }
  if (!options.layers.empty()) {
    std::vector<const ModuleRecord*> chosen;
    for (const std::string& name : options.layers) {
      const auto it = std::find_if(targets.begin(), targets.end(),
                                   [&](const ModuleRecord* m) { return m->name == name; });
      if (it == targets.end()) {
        const ModuleRecord* record = model.find_module(name);
        LITHE_CHECK(record != nullptr, sdk::Errc::kInvalidConfig, field_ref("layers"),
                    ": the model has no module '", name, "'");
        throw sdk::Error(sdk::Errc::kInvalidConfig,
                         field_ref("layers") + ": module '" + name + "' is a " +
                             record->op_type + ", not one of the analysed types (" +
                             field_ref("op_types") + ")");
      }
      chosen.push_back(*it);
    }
    targets = chosen;
  }
  LITHE_CHECK(!targets.empty(), sdk::Errc::kInvalidConfig,
              "the model has no module of the analysed types (", field_ref("op_types"), ")");

  result.original = metric("");
  ++result.evaluations;
  at::NoGradGuard no_grad;
  for (const ModuleRecord* target : targets) {
    // Every trial starts from the layer's own weights: copies put back after each one.
    const at::Tensor weight = target->weight->detach().clone();
    const std::optional<at::Tensor> bias =
        target->bias.has_value() ? std::optional<at::Tensor>(target->bias->detach().clone())
                                 : std::nullopt;
    const auto put_back = [&] {
      target->weight->detach().copy_(weight);
      if (bias) {
        target->bias->detach().copy_(*bias);
      }
    };
    SensitivityRow row;
    row.layer = target->name;
    for (const double sparsity : result.sparsities) {
      const nlohmann::json entry = {{"sparsity", sparsity}, {"op_names", {target->name}}};
      double value = 0.0;
      try {
        PruningSession session(model, registry,
                               make_compression_config(
                                   options.algorithm, nlohmann::json::array({entry}).dump(),
                                   options.algorithm_options_json, "<sensitivity analysis>"));
        session.compress();
        value = metric(target->name);
      } catch (...) {
        put_back();
        throw;
      }
      ++result.evaluations;
      put_back();
      row.metrics.emplace_back(sparsity, value);
      if (must_stop(options.stop, options.stop_value, result.original, value)) {
        break;
      }
    }
    result.rows.push_back(std::move(row));
  }
  return result;
}

}  // namespace

SensitivityResult analyse_sensitivity(Model& model, const PluginRegistry& registry,
                                      const SensitivityOptions& options,
                                      const SensitivityMetric& metric) {
  return rethrow_with_fields([&] { return analyse(model, registry, options, metric); });
}

std::string sensitivity_csv(const SensitivityResult& result) {
  std::string out = "layername";
  for (const double s : result.sparsities) {
    out += "," + shortest_decimal(s);
  }
  out += "\n";
  for (const SensitivityRow& row : result.rows) {
    out += row.layer;
    for (const auto& [sparsity, value] : row.metrics) {
      out += "," + shortest_decimal(value);
    }
    out += "\n";
  }
  return out;
}

namespace {

std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = line.find(',', start);
    out.push_back(line.substr(start, comma == std::string::npos ? std::string::npos
                                                                : comma - start));
    if (comma == std::string::npos) {
      return out;
    }
    start = comma + 1;
  }
}

}  // namespace

SensitivityResult read_sensitivity_csv(const std::string& text, const std::string& source) {
  SensitivityResult result;
  result.original = std::numeric_limits<double>::quiet_NaN();
  std::set<std::string> seen;
  size_t line_number = 0;
  bool header_read = false;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) {
      end = text.size();
    }
    std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') {
      line.pop_back();
    }
    if (line.empty()) {
      continue;
    }
    const std::string where = source + ":" + std::to_string(line_number);
    const std::vector<std::string> fields = csv_fields(line);
    const auto number = [&](size_t column, const char* what) {
      const std::string& f = fields[column];
      const std::optional<double> value = parse_finite_number(f);
      LITHE_CHECK(value.has_value(), sdk::Errc::kInvalidConfig, where, ": column ", column + 1,
                  ": ", what, " must be a finite number, got '", f.substr(0, 40), "'");
      return *value;
    };
    if (!header_read) {
      header_read = true;
      LITHE_CHECK(fields[0] == "layername" && fields.size() >= 2, sdk::Errc::kInvalidConfig,
                  where, ": the header must be layername,<sparsities> (NNI's sensitivity "
                  "layout), got '", line.substr(0, 60), "'");
      for (size_t c = 1; c < fields.size(); ++c) {
        const double s = number(c, "a sparsity");
        LITHE_CHECK(s > 0 && s < 1, sdk::Errc::kInvalidConfig, where, ": column ", c + 1,
                    ": a sparsity must be in (0, 1), got ", s);
        LITHE_CHECK(result.sparsities.empty() || s > result.sparsities.back(),
                    sdk::Errc::kInvalidConfig, where, ": column ", c + 1,
                    ": the sparsities must ascend, got ", s, " after ",
                    result.sparsities.back());
        result.sparsities.push_back(s);
      }
      continue;
    }
    SensitivityRow row;
    row.layer = fields[0];
    LITHE_CHECK(!row.layer.empty(), sdk::Errc::kInvalidConfig, where,
                ": column 1: the layer name is empty");
    LITHE_CHECK(seen.insert(row.layer).second, sdk::Errc::kInvalidConfig, where,
                ": layer '", row.layer, "' has a row already");
    LITHE_CHECK(fields.size() - 1 <= result.sparsities.size(), sdk::Errc::kInvalidConfig,
                where, ": ", fields.size() - 1, " metrics for ", result.sparsities.size(),
                " sparsities in the header");
    for (size_t c = 1; c < fields.size(); ++c) {
      row.metrics.emplace_back(result.sparsities[c - 1], number(c, "a metric"));
    }
    result.rows.push_back(std::move(row));
  }
  LITHE_CHECK(header_read, sdk::Errc::kInvalidConfig, source, ": empty (no header)");
  LITHE_CHECK(!result.rows.empty(), sdk::Errc::kInvalidConfig, source,
              ": no layer row after the header");
  return result;
}

}  // namespace lithe::host
