// Model-archive validator: check_torch_archive over raw bytes (zip structure, sizes, CRCs,
// pickled storages vs records). What it accepts is then loaded the way Lithe would (TorchScript
// via torch::jit::load + check_module_tensors, torch.save files via pickle_load) and every
// tensor checked independently: an accepted archive must never give a tensor that reaches past
// its storage or a storage larger than its allocation. The validator itself reads bytes only:
// any exception from it other than sdk::Error is a finding.
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "lithe/host/io/archive_check.h"

namespace {

void body(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  lithe::host::check_torch_archive(bytes, "model file", "fuzz-input.pt");
  lithe::fuzz::verify_accepted_archive(bytes);
}

}  // namespace

// Mostly well-formed zips with mutated records, so that inputs get past the CRC checks.
LITHE_FUZZ_TORCH_ARCHIVE_MUTATOR()

LITHE_FUZZ_HARNESS("archive", /*torch_facing=*/false, body)
