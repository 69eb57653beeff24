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

inline bool fashion_installed() { return std::filesystem::is_directory(host::kDefaultDataDir); }

/// The first `n` samples of split "train" or "test".
inline host::Dataset fashion(const std::string& split, int64_t n) {
  static std::map<std::string, host::Dataset> splits;
  auto it = splits.find(split);
  if (it == splits.end()) {
    it = splits.emplace(split, host::load_mnist_directory(host::kDefaultDataDir, split)).first;
  }
  return host::first_samples(it->second, n);
}

/// Writes the first `train` and `test` samples of the two splits as the tensor files
/// DIR/train.pt and DIR/test.pt (what CLI tests pass as --data and --test-data).
inline void write_fashion_files(const std::filesystem::path& dir, int64_t train, int64_t test) {
  host::save_tensor_file(fashion("train", train), dir / "train.pt");
  host::save_tensor_file(fashion("test", test), dir / "test.pt");
}

}  // namespace lithe::test
