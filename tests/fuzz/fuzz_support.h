#pragma once
// Shared by every harness: what counts as an expected rejection, a per-process scratch directory
// for the readers that take paths, and independent checks ("oracles") on what a reader accepted.
// Kept free of libtorch headers so that harness translation units stay cheap to compile.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace lithe::fuzz {

/// Calls at::set_num_threads(1) (one core per fuzzer; deterministic timing), turns off
/// c10::Error's backtraces (milliseconds each) and reads LITHE_FUZZ_STRICT and
/// LITHE_FUZZ_VERBOSE (=1: print every expected rejection, for triage). Call from
/// LLVMFuzzerInitialize.
void initialize();

/// Runs `body`. lithe::sdk::Error is an expected rejection, except kInternal ("a bug in Lithe"),
/// which aborts. When `torch_facing`, c10::Error and other std::exception are expected too
/// (unless LITHE_FUZZ_STRICT=1: then only sdk::Error is, which finds errors that escape the
/// readers' "one sdk::Error naming the file" contract). Anything else propagates: an uncaught
/// exception terminates the process, which libFuzzer reports as a crash.
void guarded(const char* harness, bool torch_facing, void (*body)(const uint8_t*, size_t),
             const uint8_t* data, size_t size);

/// A directory private to this process, created on first use under $TMPDIR and removed by
/// exit() (libFuzzer often ends with _Exit: run_harness.sh points TMPDIR at a scratch directory
/// it removes itself).
const std::filesystem::path& scratch_dir();

/// Writes `size` bytes to `path` (aborts on I/O failure: that is the harness's problem, not a
/// finding).
void write_bytes(const std::filesystem::path& path, const uint8_t* data, size_t size);

/// Oracle for torch.save files a Lithe reader accepted: loads `bytes` again with libtorch's
/// pickle_load and aborts (a finding) when a tensor in it reaches past its storage or a storage
/// past its allocation (ASan's shadow memory says where the allocation ends). Returns quietly
/// when libtorch refuses the bytes, and, with `check_extents`, when Lithe's
/// check_tensor_extents refuses the loaded value (what a reader that only ran
/// check_torch_archive must do next).
void verify_accepted_pickle(const std::string& bytes, const char* what, bool check_extents = false);

/// Oracle for archives check_torch_archive accepted: torch.save files as above; TorchScript
/// archives are loaded with torch::jit::load (from memory), run through Lithe's
/// check_module_tensors, and every tensor reachable from the module is checked as above.
/// Refusals of the load (c10::Error, sdk::Error) are fine.
void verify_accepted_archive(const std::string& bytes);

/// libFuzzer custom mutator for torch archives (zip files of stored records). Most of the time
/// it parses the zip, mutates one record (its bytes with libFuzzer's own mutators, mostly the
/// pickles, or its name), or drops or duplicates a record, then writes a well-formed zip again
/// (sizes, offsets, CRC-32, torch's 64-byte data alignment): inputs that pass the zip-level
/// checks reach the pickle-level ones and libtorch. Otherwise, or when the input is no zip it
/// can parse, it mutates raw bytes (libFuzzer's LLVMFuzzerMutate).
size_t mutate_torch_archive(uint8_t* data, size_t size, size_t max_size, unsigned seed);

}  // namespace lithe::fuzz

/// Defines LLVMFuzzerCustomMutator as mutate_torch_archive (in a harness source file).
#define LITHE_FUZZ_TORCH_ARCHIVE_MUTATOR()                                                   \
  extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,   \
                                            unsigned int seed) {                           \
    return lithe::fuzz::mutate_torch_archive(data, size, max_size, seed);                  \
  }

/// Defines libFuzzer's entry points for a harness: initialize() once, then `body` on every input
/// through guarded() (which sorts expected rejections from findings).
#define LITHE_FUZZ_HARNESS(name, torch_facing, body)                                   \
  extern "C" int LLVMFuzzerInitialize(int*, char***) {                                 \
    lithe::fuzz::initialize();                                                         \
    return 0;                                                                          \
  }                                                                                    \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {            \
    lithe::fuzz::guarded(name, torch_facing, body, data, size);                        \
    return 0;                                                                          \
  }
