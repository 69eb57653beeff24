#pragma once
/// \file
/// Labelled image datasets for fine-tuning and evaluation: MNIST-layout IDX files (gzip or
/// plain, detected from the bytes), e.g. Debian's dataset-fashion-mnist, and tensor files
/// {"images": T, "labels": T} saved by Python's torch.save or by Lithe. Every failure is an
/// sdk::Error(kIo or kInvalidModel) naming the file, what was expected and what was found.

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <string>

namespace lithe::host {

/// Debian's Fashion-MNIST location, the default for `--data`.
inline const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";

struct Dataset {
  at::Tensor images;  ///< float32 N x C x H x W
  at::Tensor labels;  ///< int64 N
  std::string source; ///< for messages
  std::string labels_source;  ///< where the labels came from, when not `source` (IDX)
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

/// x = (pixel / 255 - mean) / std. Defaults: Fashion-MNIST's statistics (recipes.md).
struct Normalization {
  double mean = 0.2860;
  double std = 0.3530;
};

/// Reads an IDX image file (magic 0x00000803: N x rows x cols uint8) and its IDX label file
/// (magic 0x00000801: N uint8); images become N x 1 x rows x cols.
Dataset load_idx(const std::filesystem::path& images, const std::filesystem::path& labels,
                 const Normalization& normalization = {});

/// `split` "train" or "test" from a directory in MNIST layout: train-images-idx3-ubyte[.gz],
/// train-labels-idx1-ubyte[.gz], t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz].
Dataset load_mnist_directory(const std::filesystem::path& dir, const std::string& split,
                             const Normalization& normalization = {});

/// A torch pickle of {"images": float N x ..., "labels": integer N} (used as is).
Dataset load_tensor_file(const std::filesystem::path& file);

/// `data` as the tools take it: a directory in MNIST layout (its `split`, "train" or "test") or
/// a tensor file (used whatever the split).
Dataset load_dataset(const std::filesystem::path& data, const std::string& split);

/// The test data of a run: `test_data` when given, else the "test" split of a `data`
/// directory, else none (an empty Dataset: a tensor file has no test split).
Dataset load_test_dataset(const std::filesystem::path& data,
                          const std::filesystem::path& test_data);

/// The first `n` samples of `data` (views of its tensors); all of it when n is negative or at
/// least its size.
Dataset first_samples(const Dataset& data, int64_t n);

/// Writes `data` as a tensor file readable by load_tensor_file and Python's torch.load. A slice
/// of a larger dataset (first_samples) writes its own samples only.
void save_tensor_file(const Dataset& data, const std::filesystem::path& file);

}  // namespace lithe::host
