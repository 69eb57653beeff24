// Which algorithm replays an NNI class comes from the plugin's registration (SDK 1.4
// add_nni_counterpart), not from a table in the runner: an algorithm of any name that declares
// "LevelPruner" is replayed on the LevelPruner cases and must match NNI there, one that declares
// nothing is not replayed, and a replay procedure the runner does not know is reported as
// unsupported, never as passed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "lithe/conformance/conformance.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/sdk/pruner.h"
#include "plugins/level/level.h"
#include "support/first_weights_masker.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

using ::testing::HasSubstr;
using Outcome = CaseResult::Outcome;

CaseResult run_level_case(const PluginRegistry& registry) {
  const ConformanceSummary summary =
      run_conformance(test::nni_data_dir() / "golden" / "level_lenet_s0.5", registry, "", {});
  EXPECT_EQ(summary.cases.size(), 1U);
  return summary.cases.empty() ? CaseResult{} : summary.cases.front();
}

// Registers a plugin as an SDK 1.3 build of it would: every algorithm, no NNI counterpart.
class WithoutCounterparts final : public sdk::Registry {
 public:
  explicit WithoutCounterparts(PluginRegistry& host) : host_(host) {}
  void add_masker(sdk::AlgorithmInfo info, sdk::MaskerFactory factory) override {
    host_.add_masker(std::move(info), std::move(factory));
  }
  void add_pruner(sdk::AlgorithmInfo info, sdk::PrunerFactory factory) override {
    host_.add_pruner(std::move(info), std::move(factory));
  }
  void add_quantizer(sdk::AlgorithmInfo info, sdk::QuantizerFactory factory) override {
    host_.add_quantizer(std::move(info), std::move(factory));
  }
  std::unique_ptr<sdk::WeightMasker> make_masker(const std::string& name,
                                                 const sdk::Options& options) const override {
    return host_.make_masker(name, options);
  }
  std::unique_ptr<sdk::Pruner> make_pruner(const std::string& name,
                                           const sdk::Options& options) const override {
    return host_.make_pruner(name, options);
  }
  std::unique_ptr<sdk::Quantizer> make_quantizer(const std::string& name,
                                                 const sdk::Options& options) const override {
    return host_.make_quantizer(name, options);
  }
  void add_nni_counterpart(sdk::NniCounterpart /*counterpart*/) override {}

 private:
  PluginRegistry& host_;
};

// The level plugin without declarations, plus plugin "acme" with pruner "acme_magnitude" (the
// level masker under another name, or a wrong masker) declaring LevelPruner with `replay`.
PluginRegistry& registry_with_acme(PluginRegistry& registry, const std::string& replay,
                                   bool wrong = false) {
  registry.set_current_plugin("level", "");
  WithoutCounterparts level_as_13(registry);
  plugins::level::register_algorithms(level_as_13);
  registry.set_current_plugin("acme", "");
  registry.add_pruner({"acme_magnitude", "test pruner"},
                      [wrong](const sdk::Options& options, const sdk::Registry& r) {
                        return sdk::make_one_shot_pruner(
                            wrong ? std::make_unique<test::FirstWeightsMasker>()
                                  : r.make_masker("level", options));
                      });
  if (!replay.empty()) {
    registry.add_nni_counterpart({"acme_magnitude", "LevelPruner", replay});
  }
  return registry;
}

TEST(ConformanceCounterpartTest, AnAlgorithmOfAnyNameIsReplayedOnTheNniClassItDeclares) {
  PluginRegistry registry;
  const CaseResult result = run_level_case(registry_with_acme(registry, "one_shot"));
  EXPECT_EQ(result.outcome, Outcome::kPass) << result.reason;
  EXPECT_THAT(result.reason, HasSubstr("layers match NNI"));
}

TEST(ConformanceCounterpartTest, AWrongPrunerDeclaringTheClassFails) {
  PluginRegistry registry;
  const CaseResult result = run_level_case(registry_with_acme(registry, "one_shot", true));
  EXPECT_EQ(result.outcome, Outcome::kFail) << result.reason;
}

TEST(ConformanceCounterpartTest, WithoutADeclarationTheCaseIsUnsupportedNotGuessed) {
  PluginRegistry registry;
  // "level" is registered (as by an SDK 1.3 build) but declares no NNI class.
  const CaseResult result = run_level_case(registry_with_acme(registry, ""));
  EXPECT_EQ(result.outcome, Outcome::kUnsupported) << result.reason;
  EXPECT_THAT(result.reason, HasSubstr("no loaded plugin declares NNI class 'LevelPruner'"));
}

TEST(ConformanceCounterpartTest, AReplayTheRunnerDoesNotKnowIsUnsupportedNamingIt) {
  PluginRegistry registry;
  const CaseResult result = run_level_case(registry_with_acme(registry, "mystery_procedure"));
  EXPECT_EQ(result.outcome, Outcome::kUnsupported) << result.reason;
  EXPECT_THAT(result.reason,
              HasSubstr("pruner 'acme_magnitude' (plugin 'acme') declares replay "
                        "'mystery_procedure' for LevelPruner, which this runner does not know"));
}

}  // namespace
}  // namespace lithe::host
