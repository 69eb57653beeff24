#pragma once
// A CompressionContext over hand-made LayerViews, for plugin unit tests that need exact control
// of weights, activations, optimizer steps and dependency sets (a real model cannot express
// every corner case). Behaves like the host where it matters: collector and callback ids start
// at 1, unknown ids throw, collectors are fed by observe(), callbacks run by optimizer_step().

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lithe/sdk/context.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/registry.h"

namespace lithe::test {

class FakeContext final : public sdk::CompressionContext {
 public:
  FakeContext(std::vector<sdk::LayerView*> layers, const sdk::Registry& registry)
      : layers_(std::move(layers)), registry_(registry) {}

  std::vector<sdk::LayerView*> layers() override { return layers_; }
  int64_t add_activation_collector(sdk::ActivationCollector collector) override {
    collectors_[next_id_] = std::move(collector);
    return next_id_++;
  }
  void remove_activation_collector(int64_t id) override {
    LITHE_CHECK(collectors_.erase(id) == 1, sdk::Errc::kInvalidConfig, "no collector ", id);
  }
  const sdk::Registry& registry() const override { return registry_; }
  int64_t add_optimizer_step_callback(std::function<void()> callback) override {
    callbacks_[next_id_] = std::move(callback);
    return next_id_++;
  }
  void remove_optimizer_step_callback(int64_t id) override {
    LITHE_CHECK(callbacks_.erase(id) == 1, sdk::Errc::kInvalidConfig, "no callback ", id);
  }
  void update_masks_now() override { ++mask_updates_requested; }
  int64_t save_model_state() override { return ++saved_states; }
  void restore_model_state(int64_t handle) override { restored.push_back(handle); }
  std::vector<std::vector<std::string>> channel_dependency_sets() override {
    return channel_sets;
  }
  std::map<std::string, int64_t> group_dependencies() override { return groups; }
  void reduce_over_processes(std::vector<at::Tensor>& tensors, sdk::Reduction op) override {
    ++reductions;
    if (peer) {
      peer(tensors, op);
    }
  }

  /// channel_sets and groups as NNI recorded them in a golden case's `results`.
  void set_dependencies(const nlohmann::ordered_json& results) {
    channel_sets = results.at("channel_dependency").get<std::vector<std::vector<std::string>>>();
    groups = results.at("group_dependency").get<std::map<std::string, int64_t>>();
  }

  /// Feeds `output` of `layer` to every registered collector (a forward of that layer).
  void observe(const sdk::LayerView& layer, const at::Tensor& output) {
    const auto collectors = collectors_;  // a collector may remove collectors
    for (const auto& [id, collector] : collectors) {
      collector(layer, output);
    }
  }
  /// Runs the optimizer-step callbacks (the host does this after every optimizer step).
  void optimizer_step() {
    const auto callbacks = callbacks_;
    for (const auto& [id, callback] : callbacks) {
      callback();
    }
  }
  size_t collector_count() const { return collectors_.size(); }
  size_t callback_count() const { return callbacks_.size(); }

  // Set by tests; read by the algorithm under test.
  /// A simulated second rank of a data-parallel run: combines its own values into `tensors` as
  /// reduce_over_processes would (unset: a single process).
  std::function<void(std::vector<at::Tensor>&, sdk::Reduction)> peer;
  int reductions = 0;  ///< reduce_over_processes calls
  std::vector<std::vector<std::string>> channel_sets;
  std::map<std::string, int64_t> groups;
  // Recorded for tests.
  int mask_updates_requested = 0;
  int64_t saved_states = 0;
  std::vector<int64_t> restored;

 private:
  std::vector<sdk::LayerView*> layers_;
  const sdk::Registry& registry_;
  std::map<int64_t, sdk::ActivationCollector> collectors_;
  std::map<int64_t, std::function<void()>> callbacks_;
  int64_t next_id_ = 1;
};

}  // namespace lithe::test
