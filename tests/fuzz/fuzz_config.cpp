// Config reader: parse_compression_config (bounded-depth, duplicate-free JSON), then what
// `lithe compress` does next with the result: sdk::Options over "options" read with every
// supported type, and config_list resolved against a small fake model.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "lithe/host/session/compression_config.h"
#include "lithe/host/session/config_list.h"
#include "lithe/host/model/model.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk_internal/options_json.h"

namespace {

using lithe::host::ModuleRecord;

// Modules only: resolve_config_list reads names, op types and whether a weight exists.
class FakeModel final : public lithe::host::Model {
 public:
  FakeModel() {
    add("conv1", "Conv2d", true, true);
    add("bn", "BatchNorm2d", true, true);
    add("relu", "ReLU", false, false);
    add("layer1.0.conv", "Conv2d", true, false);
    add("fc", "Linear", true, true);
    add("fc3", "Linear", true, false);
    add("emb", "Embedding", true, false);
  }
  std::string kind() const override { return "fake"; }
  const std::vector<ModuleRecord>& modules() const override { return modules_; }
  std::vector<at::Tensor> parameters() const override { return {}; }
  std::vector<at::Tensor> state_tensors() const override { return {}; }
  at::Tensor forward(const at::Tensor& input) override { return input; }
  void train(bool on) override { training_ = on; }
  bool is_training() const override { return training_; }
  void set_taps(const std::vector<std::string>&, lithe::host::TapCallback) override {}
  void set_quantization(const std::vector<lithe::host::QuantSite>&,
                        lithe::host::QuantCallback) override {}
  std::vector<std::pair<std::string, at::Tensor>> module_buffers(
      const std::string&) const override {
    return {};
  }
  void set_module_buffer(const std::string&, const std::string&, const at::Tensor&) override {}
  std::string serialize() const override { return {}; }

 private:
  void add(const std::string& name, const std::string& type, bool weight, bool bias) {
    ModuleRecord record;
    record.name = name;
    record.op_type = type;
    // Undefined tensors suffice: only presence is looked at.
    if (weight) {
      record.weight = at::Tensor();
    }
    if (bias) {
      record.bias = at::Tensor();
    }
    modules_.push_back(std::move(record));
  }
  std::vector<ModuleRecord> modules_;
  bool training_ = false;
};

// Reads `key` as T; a type mismatch is an sdk::Error (expected), anything else escapes.
template <class T>
void read_as(const lithe::sdk::Options& options, const std::string& key) {
  try {
    (void)options.get_or<T>(key, T{});
  } catch (const lithe::sdk::Error& e) {
    if (e.code() == lithe::sdk::Errc::kInternal) {
      throw;
    }
  }
}

void read_all(const lithe::sdk::Options& options, int depth) {
  for (const std::string& key : options.keys()) {
    read_as<bool>(options, key);
    read_as<int64_t>(options, key);
    read_as<double>(options, key);
    read_as<std::string>(options, key);
    read_as<std::vector<int64_t>>(options, key);
    read_as<std::vector<double>>(options, key);
    read_as<std::vector<std::string>>(options, key);
    if (depth < 4) {
      try {
        read_all(options.child(key), depth + 1);
      } catch (const lithe::sdk::Error& e) {
        if (e.code() == lithe::sdk::Errc::kInternal) {
          throw;
        }
      }
    }
  }
  (void)options.dump();
}

void body(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const lithe::host::CompressionConfig config =
      lithe::host::parse_compression_config(text, "fuzz-config.json");
  // Whatever the reader accepted is readable in every way an algorithm reads options (an
  // exception other than sdk::Error counts as a finding).
  const lithe::sdk::Options& options = config.options;
  (void)options.get_or<double>("sparsity", 0.5);
  read_all(options, 0);
  (void)lithe::sdk::unread_option_paths(options);

  static const FakeModel model;
  const lithe::host::ResolvedConfig resolved =
      lithe::host::resolve_config_list(config.config_list, "/config_list", model);
  for (const lithe::host::ConfigEntry& entry : resolved.entries) {
    read_all(entry.options, 0);
    (void)lithe::sdk::unread_option_paths(entry.options);
  }
}

}  // namespace

LITHE_FUZZ_HARNESS("config", /*torch_facing=*/false, body)
