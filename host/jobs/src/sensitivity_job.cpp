#include "lithe/host/jobs/sensitivity_job.h"

#include <nlohmann/json.hpp>

#include <map>
#include <memory>

#include "lithe/host/io/output_paths.h"
#include "lithe/host/model/model.h"
#include "lithe/host/pipeline/sensitivity_report.h"
#include "lithe/host/train/dataset.h"
#include "lithe/host/train/layer_cached_evaluation.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/log.h"
#include "job_support.h"

namespace lithe::host {
namespace {

using job_support::Clock;
using job_support::F;
using job_support::seconds_since;

std::string allocation_config(const SensitivityOptions& analysis,
                              const std::vector<LayerAllocation>& allocated) {
  nlohmann::ordered_json config;
  config["algorithm"] = analysis.algorithm;
  config["options"] = nlohmann::ordered_json::parse(analysis.algorithm_options_json);
  config["config_list"] = nlohmann::ordered_json::array();
  for (const LayerAllocation& a : allocated) {
    if (a.sparsity > 0) {
      config["config_list"].push_back({{"sparsity", a.sparsity}, {"op_names", {a.layer}}});
    }
  }
  return config.dump(2) + "\n";
}

SensitivityReport sensitivity(const SensitivityRequest& r, const PluginRegistry& registry) {
  // Every rule is checked before the model or the data is read.
  LITHE_CHECK(!r.model.empty(), sdk::Errc::kInvalidConfig, F("model"), ": no model given");
  LITHE_CHECK(!r.analysis.algorithm.empty(), sdk::Errc::kInvalidConfig, F("algorithm"),
              ": no pruner given");
  LITHE_CHECK(!r.analysis.op_types.empty(), sdk::Errc::kInvalidConfig, F("op_types"),
              ": no module type given");
  LITHE_CHECK(r.eval_samples >= 0, sdk::Errc::kInvalidConfig, F("eval_samples"),
              " must be >= 0, got ", r.eval_samples);
  LITHE_CHECK(!nlohmann::json::parse(r.analysis.algorithm_options_json, nullptr, false)
                   .is_discarded(),
              sdk::Errc::kInvalidConfig, F("algorithm_options_json"), " is not valid JSON: '",
              r.analysis.algorithm_options_json, "'");
  LITHE_CHECK(r.allocation.has_value() || !r.allocation_config.wanted(),
              sdk::Errc::kInvalidConfig, F("allocation_config"), " needs ", F("allocation"),
              " (the overall sparsity to allocate)");
  check_output_paths({{F("model"), r.model.path()},
                      {F("data_path"), r.data_path},
                      {F("test_data_path"), r.test_data_path}},
                     {{F("csv"), r.csv.file},
                      {F("report"), r.report.file},
                      {F("allocation_config"), r.allocation_config.file}});
  StagedOutput csv_out(r.csv, F("csv"));  // checks the directory before any work
  StagedOutput report_out(r.report, F("report"));
  if (r.allocation) {
    check_allocation_options(*r.allocation);
  }
  StagedOutput config_out(r.allocation_config, F("allocation_config"));

  const std::unique_ptr<Model> model = make_torchscript_model(r.model.load(F("model")));
  Dataset test = load_test_dataset(r.data_path, r.test_data_path);
  LITHE_CHECK(test.size() > 0, sdk::Errc::kInvalidConfig, F("data_path"), " '",
              r.data_path.string(), "' is a file: give the data to evaluate on as ",
              F("test_data_path"), " (or a directory with a test split)");
  check_dataset_fits_model(*model, test);
  if (r.eval_samples > 0) {
    test = first_samples(test, r.eval_samples);
  }
  // Each layer's trials reuse what the forward computes before that layer.
  LayerCachedEvaluation evaluation(*model, test);
  const auto metric = [&](const std::string& layer) {
    const double accuracy = evaluation.evaluate(layer).accuracy;
    if (!layer.empty()) {
      LITHE_LOG(kDebug, "sensitivity: '", layer, "' evaluated: ", evaluation.last_mode());
    }
    return accuracy;
  };
  SensitivityReport out;
  out.samples = test.size();
  const auto start = Clock::now();
  out.analysis = analyse_sensitivity(*model, registry, r.analysis, metric);
  out.seconds = seconds_since(start);
  out.csv = sensitivity_csv(out.analysis);
  csv_out.write(out.csv);
  if (report_out.wanted()) {
    report_out.write(sensitivity_html(out.analysis, {r.model.label(), r.analysis.algorithm,
                                                     "top-1 accuracy", out.samples,
                                                     out.seconds}));
  }
  if (r.allocation) {
    std::map<std::string, int64_t> weights;
    for (const ModuleRecord& m : model->modules()) {
      if (m.weight.has_value()) {
        weights[m.name] = m.weight->numel();
      }
    }
    out.allocation = allocate_sparsities(out.analysis, weights, *r.allocation);
    out.allocation_config_json = allocation_config(r.analysis, out.allocation);
    config_out.write(out.allocation_config_json);
  }
  // All staged before any replaces its target: a failing write leaves every one untouched.
  csv_out.commit();
  report_out.commit();
  config_out.commit();
  return out;
}

}  // namespace

SensitivityReport run_sensitivity(const SensitivityRequest& request,
                                  const PluginRegistry& registry) {
  return rethrow_with_fields([&] { return sensitivity(request, registry); });
}

}  // namespace lithe::host
