// Dataset readers. IDX (LeCun's MNIST format): big-endian magic (0x0000 08 <ndims>), then one
// big-endian uint32 per dimension, then the raw uint8 values.
#include "lithe/host/train/dataset.h"

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/script.h>
#include <zlib.h>

#include <cstdio>
#include <vector>

#include "lithe/host/io/archive_check.h"
#include "lithe/host/io/file_io.h"
#include "lithe/host/io/torch_save.h"
#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

namespace fs = std::filesystem;

std::string hex(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08x", value);
  return text;
}

// An IDX file larger than this (after gunzip) is refused rather than read into memory.
constexpr size_t kMaxDataFileBytes = size_t{4} << 30;

// Whole file, transparently gunzipped (zlib's gz reader passes plain files through).
std::vector<unsigned char> read_maybe_gzip(const fs::path& path) {
  std::error_code ec;
  LITHE_CHECK(fs::is_regular_file(path, ec), sdk::Errc::kIo, "data file '", path.string(),
              "' does not exist or is not a regular file");
  gzFile file = gzopen(path.c_str(), "rb");
  LITHE_CHECK(file != nullptr, sdk::Errc::kIo, "cannot open data file '", path.string(), "'");
  std::vector<unsigned char> bytes;
  std::vector<unsigned char> chunk(64 << 10);
  while (true) {
    const int n = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int code = 0;
      const std::string message = gzerror(file, &code);
      gzclose(file);
      LITHE_CHECK(false, sdk::Errc::kIo, "data file '", path.string(),
                  "' is corrupt or truncated (gzip: ", message, ")");
    }
    if (n == 0) {
      break;
    }
    if (bytes.size() + static_cast<size_t>(n) > kMaxDataFileBytes) {
      gzclose(file);
      LITHE_CHECK(false, sdk::Errc::kInvalidModel, "data file '", path.string(),
                  "' expands to more than ", kMaxDataFileBytes >> 20,
                  " MiB (the limit for an IDX file; a gzip bomb?)");
    }
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + n);
  }
  gzclose(file);
  return bytes;
}

uint32_t big_endian(const std::vector<unsigned char>& b, size_t offset) {
  return (uint32_t{b[offset]} << 24) | (uint32_t{b[offset + 1]} << 16) |
         (uint32_t{b[offset + 2]} << 8) | uint32_t{b[offset + 3]};
}

// Parses an IDX file of `expected_dims` dimensions; returns (dims, offset of the data).
std::vector<int64_t> idx_header(const std::vector<unsigned char>& bytes, const fs::path& path,
                                int expected_dims, const char* what) {
  const uint32_t expected_magic = 0x00000800u | static_cast<uint32_t>(expected_dims);
  LITHE_CHECK(bytes.size() >= 4, sdk::Errc::kInvalidModel, "data file '", path.string(),
              "': expected an IDX ", what, " file (magic ", hex(expected_magic),
              "), found only ", bytes.size(), " bytes");
  const uint32_t magic = big_endian(bytes, 0);
  LITHE_CHECK(magic == expected_magic, sdk::Errc::kInvalidModel, "data file '", path.string(),
              "': expected IDX ", what, " magic ", hex(expected_magic), " (uint8, ",
              expected_dims, " dimensions), found ", hex(magic));
  const size_t header = 4 + 4 * static_cast<size_t>(expected_dims);
  LITHE_CHECK(bytes.size() >= header, sdk::Errc::kInvalidModel, "data file '", path.string(),
              "': truncated IDX header (", bytes.size(), " bytes, need ", header, ")");
  std::vector<int64_t> dims;
  int64_t count = 1;
  for (int d = 0; d < expected_dims; ++d) {
    dims.push_back(static_cast<int64_t>(big_endian(bytes, 4 + 4 * static_cast<size_t>(d))));
    // Three 32-bit dimensions can overflow 64 bits; such a header cannot match the file anyway.
    LITHE_CHECK(!__builtin_mul_overflow(count, dims.back(), &count), sdk::Errc::kInvalidModel,
                "data file '", path.string(), "': header declares dimensions ",
                c10::str(c10::IntArrayRef(dims)), " whose product overflows");
  }
  LITHE_CHECK(bytes.size() - header == static_cast<size_t>(count), sdk::Errc::kInvalidModel,
              "data file '", path.string(), "': header declares ", count, " values (",
              c10::str(c10::IntArrayRef(dims)), "), found ", bytes.size() - header,
              " bytes of data", bytes.size() - header < static_cast<size_t>(count) ? " (truncated)" : "");
  return dims;
}

fs::path find_split_file(const fs::path& dir, const std::string& stem) {
  for (const std::string& name : {stem + ".gz", stem}) {
    std::error_code ec;
    if (fs::is_regular_file(dir / name, ec)) {
      return dir / name;
    }
  }
  LITHE_CHECK(false, sdk::Errc::kIo, "data directory '", dir.string(), "' has neither ", stem,
              ".gz nor ", stem, " (MNIST layout expected)");
  return {};
}

}  // namespace

Dataset load_idx(const fs::path& images_path, const fs::path& labels_path,
                 const Normalization& normalization) {
  const std::vector<unsigned char> image_bytes = read_maybe_gzip(images_path);
  const std::vector<int64_t> image_dims = idx_header(image_bytes, images_path, 3, "image");
  const std::vector<unsigned char> label_bytes = read_maybe_gzip(labels_path);
  const std::vector<int64_t> label_dims = idx_header(label_bytes, labels_path, 1, "label");
  LITHE_CHECK(image_dims[0] == label_dims[0], sdk::Errc::kInvalidModel, "data files '",
              images_path.string(), "' and '", labels_path.string(), "' disagree: ",
              image_dims[0], " images but ", label_dims[0], " labels");
  LITHE_CHECK(normalization.std > 0, sdk::Errc::kInvalidConfig,
              "normalization std must be > 0, got ", normalization.std);
  Dataset data;
  data.source = images_path.string();
  data.labels_source = labels_path.string();
  const at::Tensor pixels =
      at::from_blob(const_cast<unsigned char*>(image_bytes.data()) + 16,
                    {image_dims[0], 1, image_dims[1], image_dims[2]}, at::kByte);
  data.images = pixels.to(at::kFloat).div_(255.0).sub_(normalization.mean).div_(normalization.std);
  data.labels = at::from_blob(const_cast<unsigned char*>(label_bytes.data()) + 8, {label_dims[0]},
                              at::kByte)
                    .to(at::kLong);
  return data;
}

Dataset load_mnist_directory(const fs::path& dir, const std::string& split,
                             const Normalization& normalization) {
  LITHE_CHECK(split == "train" || split == "test", sdk::Errc::kInvalidConfig,
              "dataset split must be 'train' or 'test', got '", split, "'");
  std::error_code ec;
  LITHE_CHECK(fs::is_directory(dir, ec), sdk::Errc::kIo, "data directory '", dir.string(),
              "' does not exist");
  const std::string prefix = split == "train" ? "train" : "t10k";
  const fs::path images = find_split_file(dir, prefix + "-images-idx3-ubyte");
  const fs::path labels = find_split_file(dir, prefix + "-labels-idx1-ubyte");
  return load_idx(images, labels, normalization);
}

Dataset load_tensor_file(const fs::path& file) {
  const std::string bytes = read_file(file);
  check_torch_archive(bytes, "data file", file.string());
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const std::exception& e) {
    const std::string message = e.what();
    throw sdk::Error(sdk::Errc::kInvalidModel, "data file '" + file.string() +
                                                   "' must hold {\"images\": Tensor, \"labels\": "
                                                   "Tensor} saved with torch.save; libtorch "
                                                   "cannot read this one (" +
                                                   sdk::printable(message.substr(
                                                       0, message.find('\n')), 120) + ")");
  }
  check_tensor_extents(value, "data file", file.string());
  LITHE_CHECK(value.isGenericDict(), sdk::Errc::kInvalidModel, "data file '", file.string(),
              "' must hold {\"images\": Tensor, \"labels\": Tensor}, got ", value.tagKind());
  Dataset data;
  data.source = file.string();
  for (const auto& item : value.toGenericDict()) {
    const std::string key = item.key().isString() ? item.key().toStringRef() : "?";
    LITHE_CHECK(item.value().isTensor(), sdk::Errc::kInvalidModel, "data file '", file.string(),
                "': '", key, "' must be a tensor, got ", item.value().tagKind());
    if (key == "images") {
      data.images = item.value().toTensor();
    } else if (key == "labels") {
      data.labels = item.value().toTensor();
    }
  }
  LITHE_CHECK(data.images.defined() && data.labels.defined(), sdk::Errc::kInvalidModel,
              "data file '", file.string(), "' must hold both 'images' and 'labels'");
  LITHE_CHECK(data.images.is_floating_point() && data.images.dim() >= 2, sdk::Errc::kInvalidModel,
              "data file '", file.string(), "': 'images' must be a floating tensor N x ..., got ",
              data.images.scalar_type(), " of shape ", data.images.sizes());
  LITHE_CHECK(!data.labels.is_floating_point() && data.labels.dim() == 1, sdk::Errc::kInvalidModel,
              "data file '", file.string(), "': 'labels' must be an integer vector, got ",
              data.labels.scalar_type(), " of shape ", data.labels.sizes());
  LITHE_CHECK(data.images.size(0) == data.labels.size(0), sdk::Errc::kInvalidModel, "data file '",
              file.string(), "': ", data.images.size(0), " images but ", data.labels.size(0),
              " labels");
  data.images = data.images.to(at::kFloat).contiguous();
  data.labels = data.labels.to(at::kLong).contiguous();
  // NaN/Inf samples (or values beyond float32) would train to a NaN model or calibrate NaN
  // quantization scales; name the first bad sample instead.
  const at::Tensor bad_samples =
      data.images.isfinite().logical_not().flatten(1).any(1);
  if (data.images.numel() > 0 && bad_samples.any().item<bool>()) {
    const int64_t first = bad_samples.nonzero()[0][0].item<int64_t>();
    throw sdk::Error(sdk::Errc::kInvalidModel,
                     "data file '" + file.string() + "': sample " + std::to_string(first) +
                         " of 'images' holds NaN or infinite values (" +
                         std::to_string(bad_samples.sum().item<int64_t>()) + " of " +
                         std::to_string(data.images.size(0)) + " samples are not finite)");
  }
  return data;
}

namespace {

// `t` owning exactly its elements: a view of a larger tensor (a slice) would otherwise write
// the whole storage it shares.
at::Tensor compact(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  const bool exact = c.storage_offset() == 0 &&
                     c.storage().nbytes() == static_cast<size_t>(c.numel()) * c.element_size();
  return exact ? c : c.clone();
}

}  // namespace

Dataset first_samples(const Dataset& data, int64_t n) {
  Dataset out = data;
  if (n >= 0 && n < data.size()) {
    out.images = data.images.narrow(0, 0, n);
    out.labels = data.labels.narrow(0, 0, n);
  }
  return out;
}

void save_tensor_file(const Dataset& data, const fs::path& file) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("images", compact(data.images));
  dict.insert("labels", compact(data.labels));
  write_file_atomic(file, torch_save_bytes(c10::IValue(dict)));
}

Dataset load_dataset(const fs::path& data, const std::string& split) {
  std::error_code ec;
  if (fs::is_directory(data, ec)) {
    return load_mnist_directory(data, split);
  }
  return load_tensor_file(data);
}

Dataset load_test_dataset(const fs::path& data, const fs::path& test_data) {
  if (!test_data.empty()) {
    return load_dataset(test_data, "test");
  }
  std::error_code ec;
  return fs::is_directory(data, ec) ? load_dataset(data, "test") : Dataset{};
}

}  // namespace lithe::host
