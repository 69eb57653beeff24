// Tensor data-file reader: load_tensor_file over a torch.save {"images": T, "labels": T}
// written to a scratch file. Accepted files are re-checked independently (tensor extents,
// storage allocations) and the result against load_tensor_file's documented guarantees.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "fuzz_support.h"
#include "lithe/host/train/dataset.h"

namespace {

void body(const uint8_t* data, size_t size) {
  const std::filesystem::path file = lithe::fuzz::scratch_dir() / "data.pt";
  lithe::fuzz::write_bytes(file, data, size);
  const lithe::host::Dataset dataset = lithe::host::load_tensor_file(file);
  const bool ok = dataset.images.defined() && dataset.labels.defined() &&
                  dataset.images.scalar_type() == at::kFloat &&
                  dataset.labels.scalar_type() == at::kLong && dataset.labels.dim() == 1 &&
                  dataset.images.dim() >= 2 && dataset.images.size(0) == dataset.labels.size(0);
  if (!ok) {
    std::fprintf(stderr, "load_tensor_file returned a dataset that breaks its contract\n");
    std::abort();
  }
  lithe::fuzz::verify_accepted_pickle(
      std::string(reinterpret_cast<const char*>(data), size), "tensor data file");
}

}  // namespace

// Mostly well-formed zips with mutated records, so that inputs get past the CRC checks.
LITHE_FUZZ_TORCH_ARCHIVE_MUTATOR()

LITHE_FUZZ_HARNESS("tensor_file", /*torch_facing=*/true, body)
