#pragma once
// Fashion-MNIST for the tests that train on real data: the first n samples of a split of
// Debian's dataset-fashion-mnist, each split read once per process. Tests skip when it is not
// installed (fashion_installed()).

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "lithe/host/train/dataset.h"

namespace lithe::test {

/// The first `n` samples of `data` (views of its tensors).
inline host::Dataset head(const host::Dataset& data, int64_t n) {
  host::Dataset out = data;
  out.images = data.images.narrow(0, 0, n);
  out.labels = data.labels.narrow(0, 0, n);
  return out;
}

inline bool fashion_installed() { return std::filesystem::is_directory(host::kDefaultDataDir); }

/// The first `n` samples of split "train" or "test".
inline host::Dataset fashion(const std::string& split, int64_t n) {
  static std::map<std::string, host::Dataset> splits;
  auto it = splits.find(split);
  if (it == splits.end()) {
    it = splits.emplace(split, host::load_mnist_directory(host::kDefaultDataDir, split)).first;
  }
  return head(it->second, n);
}

}  // namespace lithe::test
