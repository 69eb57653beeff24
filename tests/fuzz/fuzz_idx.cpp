// IDX readers: load_mnist_directory over a scratch directory in MNIST layout. Input layout
// (see make_corpus.py): [uint32 little-endian n][uint8 flags][n bytes: images file][rest:
// labels file]; flags bit 0 names the images file *.gz, bit 1 the labels file, bit 2 picks the
// "test" split. The file names only decide which file is found; gzip or plain is read from the
// bytes themselves, as in real use.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <system_error>

#include "fuzz_support.h"
#include "lithe/host/train/dataset.h"

namespace {

namespace fs = std::filesystem;

void body(const uint8_t* data, size_t size) {
  if (size < 5) {
    return;
  }
  uint32_t split = 0;
  std::memcpy(&split, data, 4);
  const uint8_t flags = data[4];
  data += 5;
  size -= 5;
  const size_t images_size = size == 0 ? 0 : split % (size + 1);

  const fs::path dir = lithe::fuzz::scratch_dir() / "mnist";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir);
  const std::string prefix = (flags & 4) ? "t10k" : "train";
  const std::string images = prefix + "-images-idx3-ubyte" + ((flags & 1) ? ".gz" : "");
  const std::string labels = prefix + "-labels-idx1-ubyte" + ((flags & 2) ? ".gz" : "");
  lithe::fuzz::write_bytes(dir / images, data, images_size);
  lithe::fuzz::write_bytes(dir / labels, data + images_size, size - images_size);

  const lithe::host::Dataset dataset =
      lithe::host::load_mnist_directory(dir, (flags & 4) ? "test" : "train");
  const bool ok = dataset.images.defined() && dataset.labels.defined() &&
                  dataset.images.scalar_type() == at::kFloat && dataset.images.dim() == 4 &&
                  dataset.images.size(1) == 1 && dataset.labels.scalar_type() == at::kLong &&
                  dataset.labels.dim() == 1 && dataset.images.size(0) == dataset.labels.size(0);
  if (!ok) {
    std::fprintf(stderr, "load_mnist_directory returned a dataset that breaks its contract\n");
    std::abort();
  }
}

}  // namespace

LITHE_FUZZ_HARNESS("idx", /*torch_facing=*/true, body)
