#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <zlib.h>

#include <fstream>

#include "lithe/host/train/dataset.h"
#include "lithe/sdk/error.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

std::string be32(uint32_t v) {
  return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string idx_images(uint32_t n, uint32_t rows, uint32_t cols) {
  std::string out = be32(0x803) + be32(n) + be32(rows) + be32(cols);
  for (uint32_t i = 0; i < n * rows * cols; ++i) {
    out += static_cast<char>(i % 256);
  }
  return out;
}

std::string idx_labels(uint32_t n) {
  std::string out = be32(0x801) + be32(n);
  for (uint32_t i = 0; i < n; ++i) {
    out += static_cast<char>(i % 10);
  }
  return out;
}

void write_plain(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

void write_gzip(const std::filesystem::path& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(file);
}

TEST(DatasetTest, ReadsPlainAndGzipIdxAlikeAndNormalises) {
  const auto dir = test::scratch_dir("dataset_idx");
  write_plain(dir / "train-images-idx3-ubyte", idx_images(3, 2, 2));
  write_gzip(dir / "train-labels-idx1-ubyte.gz", idx_labels(3));
  const Dataset data = load_mnist_directory(dir, "train", Normalization{0.0, 1.0});
  ASSERT_EQ(data.size(), 3);
  EXPECT_EQ(data.images.sizes(), at::IntArrayRef({3, 1, 2, 2}));
  EXPECT_FLOAT_EQ(data.images[1][0][0][1].item<float>(), 5.0f / 255.0f);
  EXPECT_TRUE(data.labels.equal(torch::tensor({0, 1, 2}, torch::kLong)));
}

TEST(DatasetTest, TruncatedWrongMagicAndMismatchedFilesAreNamed) {
  const auto dir = test::scratch_dir("dataset_bad");
  std::string images = idx_images(4, 2, 2);
  write_plain(dir / "short-images", images.substr(0, images.size() - 3));
  write_plain(dir / "labels", idx_labels(4));
  EXPECT_THAT([&] { load_idx(dir / "short-images", dir / "labels"); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "short-images': header declares 16 values ([4, 2, 2]), found 13 bytes of data "
                  "(truncated)")));
  EXPECT_THAT([&] { load_idx(dir / "labels", dir / "labels"); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "expected IDX image magic 0x00000803 (uint8, 3 dimensions), found 0x00000801")));
  write_plain(dir / "images", images);
  write_plain(dir / "three-labels", idx_labels(3));
  EXPECT_THAT([&] { load_idx(dir / "images", dir / "three-labels"); },
              ThrowsMessage<sdk::Error>(HasSubstr("disagree: 4 images but 3 labels")));
  EXPECT_THAT([&] { load_idx(dir / "missing", dir / "labels"); },
              ThrowsMessage<sdk::Error>(HasSubstr("missing' does not exist")));
  EXPECT_THAT([&] { load_mnist_directory(dir, "test"); },
              ThrowsMessage<sdk::Error>(HasSubstr("has neither t10k-images-idx3-ubyte.gz")));
}

TEST(DatasetTest, CorruptGzipIsReported) {
  const auto dir = test::scratch_dir("dataset_gzip");
  write_gzip(dir / "full.gz", idx_images(50, 28, 28));
  std::ifstream in(dir / "full.gz", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write_plain(dir / "cut.gz", bytes.substr(0, bytes.size() / 2));
  write_plain(dir / "labels", idx_labels(50));
  EXPECT_THAT([&] { load_idx(dir / "cut.gz", dir / "labels"); },
              ThrowsMessage<sdk::Error>(HasSubstr("cut.gz'")));
}

TEST(DatasetTest, TensorFilesRoundTripAndAreValidated) {
  const auto dir = test::scratch_dir("dataset_tensor");
  Dataset data;
  data.images = torch::randn({5, 1, 4, 4});
  data.labels = torch::tensor({1, 2, 3, 4, 0}, torch::kLong);
  save_tensor_file(data, dir / "data.pt");
  const Dataset back = load_tensor_file(dir / "data.pt");
  EXPECT_TRUE(back.images.equal(data.images));
  EXPECT_TRUE(back.labels.equal(data.labels));

  Dataset bad = data;
  bad.labels = torch::tensor({1, 2}, torch::kLong);
  save_tensor_file(bad, dir / "bad.pt");
  EXPECT_THAT([&] { load_tensor_file(dir / "bad.pt"); },
              ThrowsMessage<sdk::Error>(HasSubstr("bad.pt': 5 images but 2 labels")));
}

// A slice written to a file holds its own samples, not the storage it shares.
TEST(DatasetTest, TheFirstSamplesWriteOnlyThemselves) {
  const auto dir = test::scratch_dir("dataset_slice");
  Dataset data;
  data.images = torch::randn({1000, 1, 8, 8});
  data.labels = torch::randint(10, {1000}, torch::kLong);
  const Dataset ten = first_samples(data, 10);
  EXPECT_EQ(ten.size(), 10);
  EXPECT_EQ(first_samples(data, 5000).size(), 1000);
  EXPECT_EQ(first_samples(data, -1).size(), 1000);
  save_tensor_file(ten, dir / "ten.pt");
  save_tensor_file(data, dir / "all.pt");
  EXPECT_LT(std::filesystem::file_size(dir / "ten.pt") * 20,
            std::filesystem::file_size(dir / "all.pt"));
  const Dataset back = load_tensor_file(dir / "ten.pt");
  EXPECT_TRUE(back.images.equal(data.images.narrow(0, 0, 10)));
  EXPECT_TRUE(back.labels.equal(data.labels.narrow(0, 0, 10)));
}

TEST(DatasetTest, ReadsDebiansFashionMnist) {
  const std::filesystem::path dir = kDefaultDataDir;
  if (!std::filesystem::is_directory(dir)) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  const Dataset test_split = load_mnist_directory(dir, "test");
  ASSERT_EQ(test_split.size(), 10000);
  EXPECT_EQ(test_split.images.sizes(), at::IntArrayRef({10000, 1, 28, 28}));
  EXPECT_EQ(test_split.labels.min().item<int64_t>(), 0);
  EXPECT_EQ(test_split.labels.max().item<int64_t>(), 9);
  EXPECT_EQ(test_split.labels.bincount().eq(1000).sum().item<int64_t>(), 10);  // balanced
  // Normalised with the training set's statistics: close to zero mean, unit spread.
  EXPECT_NEAR(test_split.images.mean().item<double>(), 0.0, 0.05);
  EXPECT_NEAR(test_split.images.std().item<double>(), 1.0, 0.05);
}

}  // namespace
}  // namespace lithe::host
