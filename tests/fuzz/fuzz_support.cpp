#include "fuzz_support.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/script.h>
#include <zlib.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <unordered_set>
#include <vector>

#include "lithe/host/io/archive_check.h"
#include "lithe/sdk/error.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define LITHE_FUZZ_HAVE_ASAN 1
#endif
#endif

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace lithe::fuzz {
namespace fs = std::filesystem;

namespace {

bool strict = false;
bool verbose = false;

void rejected(const char* harness, const char* kind, const char* message) {
  if (verbose) {
    std::fprintf(stderr, "lithe-fuzz %s: rejected (%s): %s\n", harness, kind, message);
  }
}

[[noreturn]] void finding(const std::string& message) {
  std::fprintf(stderr, "\n==lithe-fuzz== FINDING: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

fs::path make_scratch_dir() {
  std::string pattern = (fs::temp_directory_path() / "lithe_fuzz.XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::perror("lithe-fuzz: mkdtemp");
    std::abort();
  }
  return pattern;
}

void remove_scratch_dir();

const fs::path& scratch_path() {
  static const fs::path path = [] {
    fs::path made = make_scratch_dir();
    std::atexit(remove_scratch_dir);
    return made;
  }();
  return path;
}

void remove_scratch_dir() {
  std::error_code ec;
  fs::remove_all(scratch_path(), ec);
}

// Whether tensor `t` stays within its storage and its storage within its allocation.
void verify_tensor(const at::Tensor& t, const std::string& what) {
  if (!t.defined() || t.layout() != at::kStrided || !t.has_storage()) {
    return;
  }
  const c10::Storage& storage = t.storage();
  const size_t nbytes = storage.nbytes();
#ifdef LITHE_FUZZ_HAVE_ASAN
  if (nbytes > 0 && storage.data() != nullptr) {
    void* data = const_cast<void*>(storage.data());
    if (void* bad = __asan_region_is_poisoned(data, nbytes)) {
      __asan_describe_address(bad);
      finding(what + ": a tensor's storage declares " + std::to_string(nbytes) +
              " bytes but its allocation ends " +
              std::to_string(static_cast<char*>(bad) - static_cast<char*>(data)) +
              " bytes in (libtorch would read and write past it)");
    }
  }
#endif
  const int64_t offset = t.storage_offset();
  if (offset < 0) {
    finding(what + ": a tensor has a negative storage offset " + std::to_string(offset));
  }
  __int128 last = offset;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t size = t.sizes()[d];
    const int64_t stride = t.strides()[d];
    if (size < 0 || stride < 0) {
      finding(what + ": a tensor has a negative size or stride: sizes " + c10::str(t.sizes()) +
              ", strides " + c10::str(t.strides()));
    }
    if (size == 0) {
      return;  // no element to reach
    }
    last += static_cast<__int128>(size - 1) * stride;
  }
  const __int128 needed = (last + 1) * static_cast<__int128>(t.dtype().itemsize());
  if (needed > static_cast<__int128>(nbytes)) {
    finding(what + ": a tensor (sizes " + c10::str(t.sizes()) + ", strides " +
            c10::str(t.strides()) + ", offset " + std::to_string(offset) + ", " +
            std::string(t.dtype().name()) + ") reaches past its storage of " +
            std::to_string(nbytes) + " bytes");
  }
}

// Every tensor reachable from `root` (iterative; shared and cyclic containers visited once).
void verify_ivalue(const c10::IValue& root, const std::string& what) {
  std::vector<c10::IValue> pending{root};
  std::unordered_set<const void*> seen;
  while (!pending.empty()) {
    const c10::IValue value = std::move(pending.back());
    pending.pop_back();
    if (value.isTensor()) {
      verify_tensor(value.toTensor(), what);
      continue;
    }
    if (!value.isPtrType() || !seen.insert(value.internalToPointer()).second) {
      continue;
    }
    if (value.isList()) {
      for (const c10::IValue& element : value.toListRef()) {
        pending.push_back(element);
      }
    } else if (value.isTuple()) {
      for (const c10::IValue& element : value.toTupleRef().elements()) {
        pending.push_back(element);
      }
    } else if (value.isGenericDict()) {
      for (const auto& item : value.toGenericDict()) {
        pending.push_back(item.key());
        pending.push_back(item.value());
      }
    } else if (value.isObject()) {
      for (const c10::IValue& slot : value.toObjectRef().slots()) {
        pending.push_back(slot);
      }
    }
  }
}

bool has_code_dir(const std::string& bytes) {
  // TorchScript archives hold <dir>/code/...; torch.save files do not. A hint only: a wrong
  // guess just picks the loader that refuses the bytes.
  return bytes.find("/code/") != std::string::npos;
}

}  // namespace

void initialize() {
  at::set_num_threads(1);
  // c10::Error symbolizes a backtrace in its constructor (milliseconds; most mutated inputs
  // make libtorch throw one). The harnesses never print it.
  c10::SetStackTraceFetcher([] { return std::string("(backtrace not collected while fuzzing)"); });
  const char* env = std::getenv("LITHE_FUZZ_STRICT");
  strict = env != nullptr && std::strcmp(env, "1") == 0;
  const char* verbose_env = std::getenv("LITHE_FUZZ_VERBOSE");
  verbose = verbose_env != nullptr && std::strcmp(verbose_env, "1") == 0;
}

void guarded(const char* harness, bool torch_facing, void (*body)(const uint8_t*, size_t),
             const uint8_t* data, size_t size) {
  try {
    body(data, size);
  } catch (const sdk::Error& e) {
    if (e.code() == sdk::Errc::kInternal) {
      finding(std::string(harness) + ": internal error (a bug in Lithe): " + e.what());
    }
    rejected(harness, "sdk::Error", e.what());
  } catch (const c10::Error& e) {
    if (!torch_facing || strict) {
      finding(std::string(harness) + ": c10::Error escaped the reader: " +
              e.what_without_backtrace());
    }
    rejected(harness, "c10::Error", e.what_without_backtrace());
  } catch (const std::exception& e) {
    if (!torch_facing || strict) {
      finding(std::string(harness) + ": std::exception escaped the reader: " + e.what());
    }
    rejected(harness, "std::exception", e.what());
  }
}

const fs::path& scratch_dir() { return scratch_path(); }

void write_bytes(const fs::path& path, const uint8_t* data, size_t size) {
  // A fresh file, not a truncated one: ext4 flushes a file truncated and rewritten on close
  // (auto_da_alloc), which would make the disk, not the code under test, set the pace.
  std::error_code ec;
  fs::remove(path, ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) {
    std::fprintf(stderr, "lithe-fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

void verify_accepted_pickle(const std::string& bytes, const char* what, bool check_extents) {
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const std::exception&) {
    return;
  }
  if (check_extents) {
    try {
      host::check_tensor_extents(value, "data file", "fuzz-input.pt");
    } catch (const sdk::Error& e) {
      if (e.code() == sdk::Errc::kInternal) {
        finding(std::string("internal error (a bug in Lithe): ") + e.what());
      }
      rejected(what, "sdk::Error from check_tensor_extents", e.what());
      return;
    }
  }
  verify_ivalue(value, std::string(what) + " (accepted by Lithe)");
}

void verify_accepted_archive(const std::string& bytes) {
  if (!has_code_dir(bytes)) {
    verify_accepted_pickle(bytes, "torch.save file accepted by check_torch_archive",
                           /*check_extents=*/true);
    return;
  }
  torch::jit::Module module;
  try {
    std::istringstream in(bytes);
    module = torch::jit::load(in);
    host::check_module_tensors(module, "model", "fuzz-input.pt");
  } catch (const sdk::Error& e) {
    if (e.code() == sdk::Errc::kInternal) {
      finding(std::string("archive: internal error (a bug in Lithe): ") + e.what());
    }
    return;
  } catch (const std::exception& e) {
    rejected("archive", "exception from torch::jit::load", e.what());
    return;
  }
  verify_ivalue(c10::IValue(module._ivalue()),
                "TorchScript archive accepted by check_torch_archive and check_module_tensors");
}

namespace {

// ---- the zip rewriting mutator -------------------------------------------------------------

struct ZipEntry {
  std::string name;
  std::string data;  // the stored bytes (compressed ones are kept as they are)
  uint16_t method = 0;
  uint32_t uncompressed_size = 0;  // as declared, for method != 0
};

uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t le32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
void put16(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>((v >> 8) & 0xff));
}
void put32(std::string& out, uint32_t v) {
  put16(out, v & 0xffff);
  put16(out, v >> 16);
}

// The entries named by the central directory; false when anything is out of range or zip64.
bool parse_zip(const uint8_t* data, size_t size, std::vector<ZipEntry>& entries) {
  if (size < 22) {
    return false;
  }
  size_t eocd = size - 22;
  const size_t lowest = size > 22 + 65535 ? size - 22 - 65535 : 0;
  while (le32(data + eocd) != 0x06054b50u) {
    if (eocd == lowest) {
      return false;
    }
    --eocd;
  }
  const uint16_t count = le16(data + eocd + 10);
  size_t at = le32(data + eocd + 16);
  if (count == 0xffff || at >= size) {
    return false;
  }
  for (uint16_t i = 0; i < count; ++i) {
    if (at + 46 > size || le32(data + at) != 0x02014b50u) {
      return false;
    }
    ZipEntry entry;
    entry.method = le16(data + at + 10);
    const uint32_t compressed = le32(data + at + 20);
    entry.uncompressed_size = le32(data + at + 24);
    const size_t name_length = le16(data + at + 28);
    const size_t skip = name_length + le16(data + at + 30) + le16(data + at + 32);
    const size_t local = le32(data + at + 42);
    if (compressed == 0xffffffffu || local == 0xffffffffu || at + 46 + name_length > size ||
        local + 30 > size || le32(data + local) != 0x04034b50u) {
      return false;
    }
    entry.name.assign(reinterpret_cast<const char*>(data + at + 46), name_length);
    const size_t start = local + 30 + le16(data + local + 26) + le16(data + local + 28);
    if (start > size || compressed > size - start) {
      return false;
    }
    entry.data.assign(reinterpret_cast<const char*>(data + start), compressed);
    entries.push_back(std::move(entry));
    at += 46 + skip;
  }
  return !entries.empty();
}

// A zip as libtorch's PyTorchStreamWriter writes it: stored records, data aligned to 64 bytes
// with a "FB" extra field, then the central directory and its end record.
std::string write_zip(const std::vector<ZipEntry>& entries) {
  std::string out;
  std::string central;
  for (const ZipEntry& entry : entries) {
    const uint32_t crc = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(entry.data.data()),
              static_cast<uInt>(entry.data.size())));
    const uint32_t size = static_cast<uint32_t>(entry.data.size());
    const uint32_t uncompressed = entry.method == 0 ? size : entry.uncompressed_size;
    const size_t offset = out.size();
    const size_t header_end = offset + 30 + entry.name.size() + 4;
    const size_t padding = (64 - header_end % 64) % 64;
    put32(out, 0x04034b50u);
    put16(out, 20);  // version needed
    put16(out, 0);   // flags
    put16(out, entry.method);
    put16(out, 0);  // time
    put16(out, 0);  // date
    put32(out, crc);
    put32(out, size);
    put32(out, uncompressed);
    put16(out, static_cast<uint32_t>(entry.name.size()));
    put16(out, static_cast<uint32_t>(4 + padding));
    out += entry.name;
    put16(out, 0x4246);  // "FB"
    put16(out, static_cast<uint32_t>(padding));
    out.append(padding, 'Z');
    out += entry.data;

    put32(central, 0x02014b50u);
    put16(central, 20);  // version made by
    put16(central, 20);  // version needed
    put16(central, 0);
    put16(central, entry.method);
    put16(central, 0);
    put16(central, 0);
    put32(central, crc);
    put32(central, size);
    put32(central, uncompressed);
    put16(central, static_cast<uint32_t>(entry.name.size()));
    put16(central, 0);  // extra
    put16(central, 0);  // comment
    put16(central, 0);  // disk
    put16(central, 0);  // internal attributes
    put32(central, 0);  // external attributes
    put32(central, static_cast<uint32_t>(offset));
    central += entry.name;
  }
  const size_t central_offset = out.size();
  out += central;
  put32(out, 0x06054b50u);
  put16(out, 0);
  put16(out, 0);
  put16(out, static_cast<uint32_t>(entries.size()));
  put16(out, static_cast<uint32_t>(entries.size()));
  put32(out, static_cast<uint32_t>(central.size()));
  put32(out, static_cast<uint32_t>(central_offset));
  put16(out, 0);
  return out;
}

// libFuzzer's own mutators over `bytes`, allowed to grow it by up to `room` bytes.
void mutate_bytes(std::string& bytes, size_t room) {
  const size_t size = bytes.size();
  bytes.resize(size + room + 1);
  const size_t mutated = LLVMFuzzerMutate(reinterpret_cast<uint8_t*>(bytes.data()), size,
                                          size + room + 1);
  bytes.resize(mutated);
}

}  // namespace

size_t mutate_torch_archive(uint8_t* data, size_t size, size_t max_size, unsigned seed) {
  std::minstd_rand rng(seed);
  std::vector<ZipEntry> entries;
  if (rng() % 4 == 0 || !parse_zip(data, size, entries)) {
    return LLVMFuzzerMutate(data, size, max_size);
  }
  const size_t overhead = write_zip(entries).size();
  const size_t room = max_size > overhead ? max_size - overhead : 0;
  ZipEntry& victim = entries[rng() % entries.size()];
  // Pickles decide what the checks look at: mutate one in two times.
  ZipEntry* target = &victim;
  if (rng() % 2 == 0) {
    for (ZipEntry& entry : entries) {
      if (entry.name.size() > 4 && entry.name.compare(entry.name.size() - 4, 4, ".pkl") == 0 &&
          rng() % 2 == 0) {
        target = &entry;
        break;
      }
    }
  }
  switch (rng() % 16) {
    case 0:
      mutate_bytes(target->name, std::min<size_t>(room, 16));
      break;
    case 1:
      if (entries.size() > 1) {
        entries.erase(entries.begin() + static_cast<std::ptrdiff_t>(rng() % entries.size()));
      }
      break;
    case 2:
      entries.push_back(*target);
      break;
    default:
      mutate_bytes(target->data, room);
      break;
  }
  const std::string rebuilt = write_zip(entries);
  if (rebuilt.size() > max_size) {
    return LLVMFuzzerMutate(data, size, max_size);
  }
  std::memcpy(data, rebuilt.data(), rebuilt.size());
  return rebuilt.size();
}

}  // namespace lithe::fuzz
