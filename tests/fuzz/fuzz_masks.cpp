// Mask-file reader: deserialize_masks over torch.save bytes ({layer: {"weight", "bias"}}).
// Whatever it accepts is checked independently: every tensor within its storage, every
// storage within its allocation.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_support.h"
#include "lithe/host/io/mask_file.h"

namespace {

void body(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const lithe::host::NamedMasks masks = lithe::host::deserialize_masks(bytes, "fuzz-masks.pth");
  if (masks.empty()) {
    std::abort();  // documented: at least one layer, else sdk::Error
  }
  lithe::fuzz::verify_accepted_pickle(bytes, "mask file");
}

}  // namespace

// Mostly well-formed zips with mutated records, so that inputs get past the CRC checks.
LITHE_FUZZ_TORCH_ARCHIVE_MUTATOR()

LITHE_FUZZ_HARNESS("masks", /*torch_facing=*/true, body)
