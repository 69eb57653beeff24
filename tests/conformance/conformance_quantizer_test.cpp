// The conformance runner on NNI's quantizer golden cases, with the in-tree quantizer plugins
// linked directly: Naive, DoReFa and BNN must pass, the QAT cases must report departure 3 for
// the NNI defect each one shows, and a quantizer that is actually wrong must fail, also when it
// is wrong the way NNI is (a QAT range starting from 0 is NNI's defect, not Lithe's rule).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lithe/conformance/conformance.h"
#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk/quantizer.h"
#include "plugins/bnn/bnn.h"
#include "plugins/dorefa/dorefa.h"
#include "plugins/naive/naive.h"
#include "plugins/qat/qat.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Outcome = CaseResult::Outcome;

std::filesystem::path golden_dir() { return test::nni_data_dir() / "golden"; }

CaseResult run_case(const std::string& name, const PluginRegistry& registry) {
  const ConformanceSummary summary = run_conformance(golden_dir() / name, registry, "", {});
  EXPECT_EQ(summary.cases.size(), 1U) << name;
  return summary.cases.empty() ? CaseResult{} : summary.cases.front();
}

PluginRegistry& quantizer_registry() {
  static PluginRegistry* registry = [] {
    auto* r = new PluginRegistry();
    plugins::naive::register_algorithms(*r);
    plugins::dorefa::register_algorithms(*r);
    plugins::bnn::register_algorithms(*r);
    plugins::qat::register_algorithms(*r);
    return r;
  }();
  return *registry;
}

class ConformanceQuantizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::is_directory(golden_dir() / "qat_lenet_w8_o8")) << "in-repo test data missing: " << golden_dir();
  }
};

TEST_F(ConformanceQuantizerTest, DeterministicQuantizersMatchNniBitForBit) {
  for (const char* name :
       {"naive_lenet_w8", "dorefa_lenet_w2", "dorefa_lenet_w4", "dorefa_lenet_w8", "bnn_lenet"}) {
    const CaseResult result = run_case(name, quantizer_registry());
    EXPECT_EQ(result.outcome, Outcome::kPass) << name << ": " << result.reason;
    EXPECT_THAT(result.reason, HasSubstr("bit-identical to NNI")) << name;
  }
}

TEST_F(ConformanceQuantizerTest, QatCasesReportTheNniDefectEachShows) {
  const std::map<std::string, std::vector<std::string>> expected = {
      {"qat_lenet_w8_o8",
       {"EMA starts from 0", "shares one scale/zero point", "in place to 32 bits"}},
      {"qat_lenet_w8_o8_quant_start_step3", {"before quant_start_step", "shares one scale"}},
      {"qat_mlp_w4_o6_backward", {"EMA starts from 0", "gradients are all zero"}},
      {"qat_mlp_w8_weight_only", {"in place to 32 bits"}},
  };
  for (const auto& [name, phrases] : expected) {
    const CaseResult result = run_case(name, quantizer_registry());
    EXPECT_EQ(result.outcome, Outcome::kDeviation) << name << ": " << result.reason;
    EXPECT_THAT(result.reason, HasSubstr("departure 3: ")) << name;
    for (const std::string& phrase : phrases) {
      EXPECT_THAT(result.reason, HasSubstr(phrase)) << name;
    }
  }
  // The weight-only case has no output range: its weight params compare with NNI's buffer.
  EXPECT_THAT(run_case("qat_mlp_w8_weight_only", quantizer_registry()).reason,
              Not(HasSubstr("EMA")));
}

// NaiveQuantizer with rounding where NNI truncates: every other rule of naive kept.
class RoundingNaive final : public sdk::Quantizer {
 public:
  void validate_config(const sdk::Options& entry) const override {
    sdk::require_quant_types(entry, {sdk::QuantType::kWeight}, "naive");
  }
  void attach(sdk::CompressionContext& context) override {
    for (sdk::LayerView* layer : context.layers()) {
      sdk::ensure_tensor_attribute(*layer, "weight_scale", at::zeros({1}));
    }
  }
  at::Tensor quantize_weight(const at::Tensor& w, sdk::LayerView& layer, bool) override {
    const at::Tensor scale = std::get<at::Tensor>(*layer.attribute("weight_scale"));
    scale.copy_(at::maximum(scale, (w.abs().max() / 127).reshape({1})));
    return (w / scale).round() * scale;
  }
};

TEST_F(ConformanceQuantizerTest, RoundingNaiveFails) {
  PluginRegistry registry;
  registry.add_quantizer(
      {"rounding_naive", "rounds instead of truncating"},
      [](const sdk::Options&, const sdk::Registry&) { return std::make_unique<RoundingNaive>(); });
  registry.add_nni_counterpart({"rounding_naive", "NaiveQuantizer", "eval_forwards"});
  const CaseResult result = run_case("naive_lenet_w8", registry);
  EXPECT_EQ(result.outcome, Outcome::kFail) << result.reason;
  EXPECT_THAT(result.reason, HasSubstr("quantized weight differs from NNI's"));
}

// The real qat plugin, made to start every output range from 0 the way NNI v2.0 does: the
// runner must fail it against Lithe's rule, not excuse it as NNI's departure.
class RangeFromZeroQat final : public sdk::Quantizer {
 public:
  explicit RangeFromZeroQat(std::unique_ptr<sdk::Quantizer> real) : real_(std::move(real)) {}
  void validate_config(const sdk::Options& entry) const override { real_->validate_config(entry); }
  void attach(sdk::CompressionContext& context) override { real_->attach(context); }
  at::Tensor quantize_weight(const at::Tensor& w, sdk::LayerView& layer, bool training) override {
    return real_->quantize_weight(w, layer, training);
  }
  at::Tensor quantize_output(const at::Tensor& x, sdk::LayerView& layer, bool training) override {
    const at::Tensor min = std::get<at::Tensor>(*layer.attribute("output_tracked_min"));
    const at::Tensor max = std::get<at::Tensor>(*layer.attribute("output_tracked_max"));
    if (training && (min > max).item<bool>()) {  // no batch observed yet: NNI's zeros instead
      min.zero_();
      max.zero_();
    }
    return real_->quantize_output(x, layer, training);
  }
  const sdk::QuantGrad& quant_grad() const override { return real_->quant_grad(); }
  void step() override { real_->step(); }

 private:
  std::unique_ptr<sdk::Quantizer> real_;
};

TEST_F(ConformanceQuantizerTest, QatWithNnisRangeFromZeroFails) {
  static PluginRegistry real;
  if (real.find(AlgorithmKind::kQuantizer, "qat") == nullptr) {
    plugins::qat::register_algorithms(real);
  }
  PluginRegistry registry;
  registry.add_quantizer(
      {"qat_from_zero", "ranges from 0"}, [](const sdk::Options& options, const sdk::Registry&) {
        return std::make_unique<RangeFromZeroQat>(real.make_quantizer("qat", options));
      });
  registry.add_nni_counterpart({"qat_from_zero", "QAT_Quantizer", "training_steps"});
  const CaseResult result = run_case("qat_lenet_w8_o8", registry);
  EXPECT_EQ(result.outcome, Outcome::kFail) << result.reason;
  EXPECT_THAT(result.reason, HasSubstr("Lithe's rule"));
}

TEST_F(ConformanceQuantizerTest, QuantizerWithoutPluginIsUnsupported) {
  const CaseResult result = run_case("bnn_lenet", PluginRegistry());
  EXPECT_EQ(result.outcome, Outcome::kUnsupported);
  EXPECT_THAT(result.reason, HasSubstr("no loaded plugin declares NNI class 'BNNQuantizer'"));
}

}  // namespace
}  // namespace lithe::host
