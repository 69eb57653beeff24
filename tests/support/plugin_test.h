#pragma once
// Helpers shared by the plugins' unit tests.

#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "lithe/sdk/error.h"
#include "lithe/sdk/options.h"
#include "lithe/sdk_internal/options_json.h"

namespace lithe::test {

/// A config_list entry as the host hands it to validate_config (path /config_list/<index>).
inline sdk::Options config_entry(const nlohmann::ordered_json& json, int index) {
  return sdk::options_from_json(json, "/config_list/" + std::to_string(index));
}

/// The error code thrown by `f` (fails the test when nothing is thrown).
inline sdk::Errc error_code(const std::function<void()>& f) {
  try {
    f();
  } catch (const sdk::Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "no sdk::Error thrown";
  return sdk::Errc::kInternal;
}

/// The tensors of a torch pickle dict (a golden tensors.pt or a model's _state.pt).
inline std::map<std::string, at::Tensor> load_tensor_dict(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  std::map<std::string, at::Tensor> out;
  for (const auto& item : torch::jit::pickle_load(bytes).toGenericDict()) {
    if (item.value().isTensor()) {
      out[item.key().toStringRef()] = item.value().toTensor();
    }
  }
  return out;
}

}  // namespace lithe::test
