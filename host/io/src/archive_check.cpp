// Validation of torch archives before libtorch reads them. libtorch 1.13 (miniz with CRC checks
// off, an Unpickler that sizes a storage from the pickle's numel and hands it the record's buffer
// whatever its length) turns a damaged file into tensors that read and write out of bounds. The
// zip and pickle parts below treat the file as hostile: every offset and length is checked
// before it is used, every loop is bounded, and nothing allocates by a size the file claims.
#include "lithe/host/io/archive_check.h"

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "lithe/sdk/error.h"

namespace lithe::host {

namespace {

// ------------------------------------------------------------------------------------------------
// Messages

/// Builds the errors of one check: every message starts with "<what> '<source>'".
class Reporter {
 public:
  Reporter(const std::string& what, const std::string& source)
      : subject_(what + " '" + source + "'") {}

  /// "<what> '<source>': <problem>".
  [[noreturn]] void fail(const std::string& problem) const {
    throw sdk::Error(sdk::Errc::kInvalidModel, subject_ + ": " + problem);
  }

  /// "<what> '<source>' <statement>", for statements about the whole file.
  [[noreturn]] void fail_file(const std::string& statement) const {
    throw sdk::Error(sdk::Errc::kInvalidModel, subject_ + " " + statement);
  }

 private:
  std::string subject_;
};

std::string hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

/// A name from the file, quoted for a message (control characters escaped, long names cut).
// libtorch finds records through miniz without MZ_ZIP_FLAG_CASE_SENSITIVE: "data.Pkl" is its
// "data.pkl". Names are compared the same way here.
std::string folded(std::string_view name) {
  std::string out(name);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

std::string quote_name(std::string_view text) {
  return "'" + sdk::printable(std::string(text), 200) + "'";
}

// ------------------------------------------------------------------------------------------------
// Zip structure

constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr uint32_t kEndOfCentralDirectorySignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint64_t kLocalHeaderBytes = 30;
constexpr uint64_t kCentralHeaderBytes = 46;
constexpr uint64_t kEndOfCentralDirectoryBytes = 22;
constexpr uint64_t kZip64EndBytes = 56;
constexpr uint64_t kZip64LocatorBytes = 20;
constexpr uint64_t kMaxCommentBytes = 65535;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint16_t kMethodStored = 0;
constexpr uint16_t kMethodDeflated = 8;
// General purpose flags: bit 0 traditional encryption, bit 6 strong encryption.
constexpr uint16_t kEncryptedFlags = 0x0001 | 0x0040;

// Sanity bounds. A TorchScript model holds a few records per parameter; a million entries or a
// terabyte of content is no model this toolkit can load, only a size field that is garbage.
constexpr uint64_t kMaxEntries = 1'000'000;
constexpr uint64_t kMaxTotalUncompressedBytes = uint64_t{1} << 40;
// torch stores its pickles; a deflated one is inflated into memory, so its size is bounded.
constexpr uint64_t kMaxInflatedPickleBytes = uint64_t{1} << 30;

/// True when [offset, offset + length) lies within [0, size), without overflow.
bool within(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

/// Little-endian reads from a range the caller has bounds-checked (a failure here is a bug in
/// this file, not a bad archive).
uint64_t read_le(std::string_view bytes, uint64_t offset, unsigned width) {
  LITHE_INTERNAL_ASSERT(within(offset, width, bytes.size()));
  uint64_t value = 0;
  for (unsigned i = 0; i < width; ++i) {
    value |= uint64_t{static_cast<unsigned char>(bytes[offset + i])} << (8 * i);
  }
  return value;
}
uint16_t u16(std::string_view bytes, uint64_t offset) {
  return static_cast<uint16_t>(read_le(bytes, offset, 2));
}
uint32_t u32(std::string_view bytes, uint64_t offset) {
  return static_cast<uint32_t>(read_le(bytes, offset, 4));
}
uint64_t u64(std::string_view bytes, uint64_t offset) { return read_le(bytes, offset, 8); }

/// One record as the central directory describes it, with the data located via its local header.
struct ZipEntry {
  std::string_view name;  ///< points into the archive bytes
  uint16_t method = 0;
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
  uint64_t local_header_offset = 0;
  uint64_t data_offset = 0;  ///< after the local header, its name and its extra field
};

/// Where the central directory is, from the (zip64) end-of-central-directory records.
struct CentralDirectory {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t entries = 0;
  uint64_t end = 0;  ///< where the first end record starts: the directory must stop before it
};

/// Scans backwards from the end (over at most a maximal comment) for the end-of-central-directory
/// record whose comment ends within the file. Returns the file size when there is none.
uint64_t find_end_of_central_directory(std::string_view file) {
  const uint64_t size = file.size();
  if (size < kEndOfCentralDirectoryBytes) {
    return size;
  }
  const uint64_t last = size - kEndOfCentralDirectoryBytes;
  const uint64_t first = last > kMaxCommentBytes ? last - kMaxCommentBytes : 0;
  for (uint64_t pos = last + 1; pos-- > first;) {
    if (u32(file, pos) == kEndOfCentralDirectorySignature &&
        u16(file, pos + 20) <= size - kEndOfCentralDirectoryBytes - pos) {
      return pos;
    }
  }
  return size;
}

CentralDirectory read_end_records(std::string_view file, const Reporter& report) {
  const uint64_t size = file.size();
  const uint64_t eocd = find_end_of_central_directory(file);
  if (eocd == size) {
    report.fail_file("is not a torch archive (no zip end-of-central-directory record)");
  }
  const uint16_t disk = u16(file, eocd + 4);
  const uint16_t directory_disk = u16(file, eocd + 6);
  const uint16_t disk_entries = u16(file, eocd + 8);
  CentralDirectory directory;
  directory.entries = u16(file, eocd + 10);
  directory.size = u32(file, eocd + 12);
  directory.offset = u32(file, eocd + 16);
  directory.end = eocd;

  // Zip64: a locator right before the end record points at the zip64 end record, whose 64-bit
  // counts and offsets replace the 16- and 32-bit ones (torch writes these for large files).
  const bool has_locator =
      eocd >= kZip64LocatorBytes && u32(file, eocd - kZip64LocatorBytes) == kZip64LocatorSignature;
  if (has_locator) {
    const uint64_t locator = eocd - kZip64LocatorBytes;
    const uint64_t zip64_end = u64(file, locator + 8);
    const uint32_t total_disks = u32(file, locator + 16);
    if (u32(file, locator + 4) != 0 || total_disks > 1) {
      report.fail(
          "the zip64 end record is on another disk (multi-disk archives are not supported)");
    }
    if (!within(zip64_end, kZip64EndBytes, locator) || u32(file, zip64_end) != kZip64EndSignature) {
      report.fail("the zip64 end-of-central-directory locator points at byte " +
                  std::to_string(zip64_end) +
                  ", where there is no zip64 end record; the archive is truncated or corrupted");
    }
    if (u32(file, zip64_end + 16) != 0 || u32(file, zip64_end + 20) != 0 ||
        u64(file, zip64_end + 24) != u64(file, zip64_end + 32)) {
      report.fail("the archive spans several disks (multi-disk archives are not supported)");
    }
    directory.entries = u64(file, zip64_end + 32);
    directory.size = u64(file, zip64_end + 40);
    directory.offset = u64(file, zip64_end + 48);
    directory.end = zip64_end;
  } else if (disk != 0 || directory_disk != 0 || disk_entries != directory.entries) {
    report.fail("the archive spans several disks (multi-disk archives are not supported)");
  }

  if (!within(directory.offset, directory.size, directory.end)) {
    report.fail("the central directory (" + std::to_string(directory.size) + " bytes at offset " +
                std::to_string(directory.offset) + ") does not fit before its end record at byte " +
                std::to_string(directory.end) + "; the archive is truncated or corrupted");
  }
  if (directory.entries > kMaxEntries) {
    report.fail("the archive claims " + std::to_string(directory.entries) +
                " entries, more than the " + std::to_string(kMaxEntries) + " allowed");
  }
  if (directory.entries > directory.size / kCentralHeaderBytes) {
    report.fail("the central directory (" + std::to_string(directory.size) +
                " bytes) is too small for the " + std::to_string(directory.entries) +
                " entries it claims; the archive is truncated or corrupted");
  }
  return directory;
}

/// Replaces the 0xFFFFFFFF placeholders of a central header by the values of its zip64 extra
/// field, which holds (in this order) those of uncompressed size, compressed size and local header
/// offset that are placeholders. Without a zip64 field a 0xFFFFFFFF stands as it is and the bounds
/// checks decide.
void apply_zip64_extra(std::string_view extra, ZipEntry& entry, const Reporter& report) {
  const bool uncompressed_in_extra = entry.uncompressed_size == 0xFFFFFFFFu;
  const bool compressed_in_extra = entry.compressed_size == 0xFFFFFFFFu;
  const bool offset_in_extra = entry.local_header_offset == 0xFFFFFFFFu;
  uint64_t pos = 0;
  while (extra.size() - pos >= 4) {
    const uint16_t id = u16(extra, pos);
    const uint16_t length = u16(extra, pos + 2);
    pos += 4;
    if (length > extra.size() - pos) {
      report.fail("the extra field of record " + quote_name(entry.name) +
                  " runs past its end; the archive is corrupted");
    }
    if (id == kZip64ExtraId) {
      const std::string_view field = extra.substr(pos, length);
      uint64_t at = 0;
      const auto take = [&](uint64_t& target) {
        if (field.size() - at < 8) {
          report.fail("the zip64 extra field of record " + quote_name(entry.name) +
                      " is too short for the sizes it must hold; the archive is corrupted");
        }
        target = u64(field, at);
        at += 8;
      };
      if (uncompressed_in_extra) {
        take(entry.uncompressed_size);
      }
      if (compressed_in_extra) {
        take(entry.compressed_size);
      }
      if (offset_in_extra) {
        take(entry.local_header_offset);
      }
      return;
    }
    pos += length;
  }
}

std::vector<ZipEntry> read_central_directory(std::string_view file,
                                             const CentralDirectory& directory,
                                             const Reporter& report) {
  std::vector<ZipEntry> entries;
  entries.reserve(directory.entries);
  std::unordered_set<std::string> names;  // case-folded, as libtorch looks them up
  names.reserve(directory.entries);
  const uint64_t directory_end = directory.offset + directory.size;
  uint64_t pos = directory.offset;
  for (uint64_t index = 0; index < directory.entries; ++index) {
    const auto where = [index] { return "central directory entry " + std::to_string(index); };
    if (!within(pos, kCentralHeaderBytes, directory_end) ||
        u32(file, pos) != kCentralHeaderSignature) {
      report.fail(where() + " (byte " + std::to_string(pos) +
                  ") is not a central file header; the archive is truncated or corrupted");
    }
    const uint16_t flags = u16(file, pos + 8);
    ZipEntry entry;
    entry.method = u16(file, pos + 10);
    entry.crc32 = u32(file, pos + 16);
    entry.compressed_size = u32(file, pos + 20);
    entry.uncompressed_size = u32(file, pos + 24);
    const uint16_t name_length = u16(file, pos + 28);
    const uint16_t extra_length = u16(file, pos + 30);
    const uint16_t comment_length = u16(file, pos + 32);
    entry.local_header_offset = u32(file, pos + 42);
    const uint64_t variable = uint64_t{name_length} + extra_length + comment_length;
    if (!within(pos + kCentralHeaderBytes, variable, directory_end)) {
      report.fail(where() +
                  " runs past the end of the central directory; the archive is "
                  "truncated or corrupted");
    }
    entry.name = file.substr(pos + kCentralHeaderBytes, name_length);
    apply_zip64_extra(file.substr(pos + kCentralHeaderBytes + name_length, extra_length), entry,
                      report);
    pos += kCentralHeaderBytes + variable;

    const std::string record = "record " + quote_name(entry.name);
    if ((flags & kEncryptedFlags) != 0) {
      report.fail(record + " is encrypted; torch archives are never encrypted");
    }
    if (entry.method != kMethodStored && entry.method != kMethodDeflated) {
      report.fail(record + " uses compression method " + std::to_string(entry.method) +
                  "; torch archives store or deflate their records");
    }
    if (entry.method == kMethodStored && entry.compressed_size != entry.uncompressed_size) {
      report.fail(record + " is stored uncompressed but its sizes differ (" +
                  std::to_string(entry.compressed_size) + " bytes stored, " +
                  std::to_string(entry.uncompressed_size) + " claimed); the archive is corrupted");
    }
    if (!names.insert(folded(entry.name)).second) {
      report.fail("the archive holds two records named " + quote_name(entry.name) +
                  " (names compare without case, as libtorch finds them); readers would disagree on "
                  "which one is meant");
    }

    // The data starts after the LOCAL header's name and extra field, which may differ in length
    // from the central header's (torch pads the local extra field to align tensor data).
    const uint64_t local = entry.local_header_offset;
    if (!within(local, kLocalHeaderBytes, directory.offset) ||
        u32(file, local) != kLocalHeaderSignature) {
      report.fail(record + ": its local header (byte " + std::to_string(local) +
                  ") is missing or lies outside the file's entries; the archive is truncated "
                  "or corrupted");
    }
    const uint16_t local_name_length = u16(file, local + 26);
    const uint16_t local_extra_length = u16(file, local + 28);
    const uint64_t local_variable = uint64_t{local_name_length} + local_extra_length;
    if (!within(local + kLocalHeaderBytes, local_variable, directory.offset) ||
        file.substr(local + kLocalHeaderBytes, local_name_length) != entry.name) {
      report.fail(record +
                  ": its local header does not carry the same name; the archive is "
                  "corrupted");
    }
    entry.data_offset = local + kLocalHeaderBytes + local_variable;
    if (!within(entry.data_offset, entry.compressed_size, directory.offset)) {
      report.fail(record + " claims " + std::to_string(entry.compressed_size) +
                  " bytes of data at offset " + std::to_string(entry.data_offset) +
                  ", past the end of the file's entries (the central directory starts at byte " +
                  std::to_string(directory.offset) + "); the archive is truncated or corrupted");
    }
    entries.push_back(entry);
  }

  // Records may not share bytes: a file whose entries overlap is corrupt or built to make readers
  // do unbounded work (and torch's writer never produces one).
  std::vector<const ZipEntry*> by_offset;
  by_offset.reserve(entries.size());
  for (const ZipEntry& entry : entries) {
    by_offset.push_back(&entry);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const ZipEntry* a, const ZipEntry* b) {
    return a->local_header_offset < b->local_header_offset;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const ZipEntry& before = *by_offset[i - 1];
    if (before.data_offset + before.compressed_size > by_offset[i]->local_header_offset) {
      report.fail("records " + quote_name(before.name) + " and " + quote_name(by_offset[i]->name) +
                  " overlap in the file; the archive is corrupted");
    }
  }
  uint64_t total = 0;
  for (const ZipEntry& entry : entries) {
    if (__builtin_add_overflow(total, entry.uncompressed_size, &total) ||
        total > kMaxTotalUncompressedBytes) {
      report.fail("the records claim more than " + std::to_string(kMaxTotalUncompressedBytes) +
                  " bytes in all; the archive is corrupted");
    }
  }
  return entries;
}

uint32_t crc32_of(uint32_t crc, std::string_view data) {
  // zlib takes 32-bit lengths.
  constexpr size_t kChunk = size_t{1} << 30;
  uLong value = crc;
  for (size_t pos = 0; pos < data.size(); pos += kChunk) {
    const size_t length = std::min(kChunk, data.size() - pos);
    value = ::crc32(value, reinterpret_cast<const Bytef*>(data.data() + pos),
                    static_cast<uInt>(length));
  }
  return static_cast<uint32_t>(value);
}

/// Inflates a raw deflate stream, handing the output to `sink` in chunks. Fails unless the stream
/// ends after exactly `expected` bytes. Memory stays fixed whatever the header claims.
void inflate_record(const ZipEntry& entry, std::string_view compressed,
                    const std::function<void(std::string_view)>& sink, const Reporter& report) {
  const std::string record = "record " + quote_name(entry.name);
  z_stream stream{};
  if (inflateInit2(&stream, -MAX_WBITS) != Z_OK) {
    throw sdk::Error(sdk::Errc::kInternal, "zlib could not start inflating " + record);
  }
  struct End {
    z_stream* stream;
    ~End() { inflateEnd(stream); }
  } end{&stream};

  constexpr size_t kInputChunk = size_t{1} << 30;
  std::vector<unsigned char> buffer(size_t{1} << 18);
  uint64_t produced = 0;
  size_t consumed = 0;
  for (;;) {
    if (stream.avail_in == 0 && consumed < compressed.size()) {
      const size_t length = std::min(kInputChunk, compressed.size() - consumed);
      stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data() + consumed));
      stream.avail_in = static_cast<uInt>(length);
      consumed += length;
    }
    stream.next_out = buffer.data();
    stream.avail_out = static_cast<uInt>(buffer.size());
    const int status = inflate(&stream, Z_NO_FLUSH);
    const size_t chunk = buffer.size() - stream.avail_out;
    if (chunk > entry.uncompressed_size - produced) {
      report.fail(record + " inflates to more than the " + std::to_string(entry.uncompressed_size) +
                  " bytes its header claims; the archive is corrupted");
    }
    produced += chunk;
    if (chunk > 0) {
      sink(std::string_view(reinterpret_cast<const char*>(buffer.data()), chunk));
    }
    if (status == Z_STREAM_END) {
      break;
    }
    if (status == Z_BUF_ERROR && chunk == 0 && stream.avail_in == 0 &&
        consumed == compressed.size()) {
      report.fail(record +
                  ": its deflate stream ends early; the archive is truncated or "
                  "corrupted");
    }
    if (status != Z_OK && status != Z_BUF_ERROR) {
      report.fail(record + ": its deflate stream is corrupt (" +
                  (stream.msg != nullptr ? std::string(stream.msg) : "zlib error") +
                  "); the archive is corrupted");
    }
  }
  if (produced != entry.uncompressed_size) {
    report.fail(record + " inflates to " + std::to_string(produced) +
                " bytes but its header claims " + std::to_string(entry.uncompressed_size) +
                "; the archive is truncated or corrupted");
  }
}

// ------------------------------------------------------------------------------------------------
// Pickles

/// A storage a pickle declares through persistent id ('storage', type, key, location, numel).
struct StorageClaim {
  std::string_view type_module;  ///< "torch" or, for Python's UntypedStorage, "torch.storage"
  std::string_view type_name;    ///< e.g. "FloatStorage"
  std::string_view key;
  int64_t numel = 0;
};

/// Element size of a torch storage class ("FloatStorage" → 4); 0 when unknown.
size_t storage_element_size(std::string_view type_module, std::string_view type_name) {
  if (type_module != "torch" && type_module.substr(0, 6) != "torch.") {
    return 0;
  }
  static const std::unordered_map<std::string_view, size_t> kSizes = {
      {"FloatStorage", 4},       {"DoubleStorage", 8},       {"HalfStorage", 2},
      {"BFloat16Storage", 2},    {"LongStorage", 8},         {"IntStorage", 4},
      {"ShortStorage", 2},       {"CharStorage", 1},         {"ByteStorage", 1},
      {"BoolStorage", 1},        {"ComplexFloatStorage", 8}, {"ComplexDoubleStorage", 16},
      {"ComplexHalfStorage", 4}, {"QInt8Storage", 1},        {"QUInt8Storage", 1},
      {"QInt32Storage", 4},      {"QUInt4x2Storage", 1},     {"QUInt2x4Storage", 1},
      {"UntypedStorage", 1},
  };
  const auto found = kSizes.find(type_name);
  return found == kSizes.end() ? 0 : found->second;
}

/// A bounded pickle machine for the opcodes torch's Pickler and Python's torch.save emit. It
/// tracks only what storage declarations need (strings, ints, tuples, globals); everything else
/// is an opaque placeholder. Strings are views into the pickle, so memory stays proportional to
/// the number of opcodes, which the pickle's length bounds.
class PickleScanner {
 public:
  PickleScanner(std::string_view pickle, std::string_view name, const Reporter& report,
                std::function<void(const StorageClaim&)> on_storage)
      : pickle_(pickle), name_(name), report_(report), on_storage_(std::move(on_storage)) {}

  void run() {
    while (pos_ < pickle_.size()) {
      if (++ops_ > kMaxOps) {
        fail("more than " + std::to_string(kMaxOps) + " opcodes");
      }
      op_start_ = pos_;
      opcode_ = static_cast<unsigned char>(pickle_[pos_++]);
      if (step()) {
        return;
      }
    }
    report_.fail("pickle " + quote_name(name_) + " ends after " + std::to_string(pickle_.size()) +
                 " bytes without a STOP opcode; the archive is truncated or corrupted");
  }

 private:
  // Bounds on the machine's state, so a hostile pickle costs at most about a gigabyte however
  // long it is. torch's own pickles stay far below them (a model with 100,000 tensors memoizes
  // about a million values).
  static constexpr uint64_t kMaxOps = uint64_t{1} << 31;
  static constexpr size_t kMaxStack = size_t{1} << 24;
  static constexpr size_t kMaxMemo = size_t{1} << 22;
  static constexpr size_t kMaxMarks = size_t{1} << 20;
  static constexpr size_t kMaxTableEntries = size_t{1} << 24;  ///< strings, globals, tuple items

  enum class Kind : uint8_t { kOpaque, kInt, kBigInt, kText, kGlobal, kTuple };
  struct Value {
    Kind kind = Kind::kOpaque;
    int64_t payload = 0;  ///< kInt: the value; kText, kGlobal, kTuple: index into their table
  };

  [[noreturn]] void fail(const std::string& problem) const {
    report_.fail("pickle " + quote_name(name_) + " is malformed at byte " +
                 std::to_string(op_start_) + " (opcode " + hex_byte(opcode_) + "): " + problem +
                 "; libtorch cannot read it safely");
  }
  static std::string hex_byte(unsigned value) {
    char text[8];
    std::snprintf(text, sizeof text, "0x%02x", value & 0xFFu);
    return text;
  }

  // --- arguments
  std::string_view take(uint64_t length) {
    if (length > pickle_.size() - pos_) {
      fail("its argument of " + std::to_string(length) + " bytes runs past the end (" +
           std::to_string(pickle_.size() - pos_) + " left)");
    }
    const std::string_view out = pickle_.substr(pos_, length);
    pos_ += length;
    return out;
  }
  uint64_t take_le(unsigned width) { return read_le(take(width), 0, width); }
  std::string_view take_line() {
    const size_t end = pickle_.find('\n', pos_);
    if (end == std::string_view::npos) {
      fail("its newline-terminated argument runs past the end");
    }
    const std::string_view line = pickle_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return line;
  }

  // --- stack; pops see only the current frame (above the last MARK), as in Python's unpickler
  size_t frame_base() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(Value value) {
    if (stack_.size() >= kMaxStack) {
      fail("more than " + std::to_string(kMaxStack) + " values on the stack");
    }
    stack_.push_back(value);
  }
  Value pop() {
    if (stack_.size() <= frame_base()) {
      fail("stack underflow");
    }
    const Value value = stack_.back();
    stack_.pop_back();
    return value;
  }
  const Value& top() const {
    if (stack_.size() <= frame_base()) {
      fail("stack underflow");
    }
    return stack_.back();
  }
  /// Removes the last MARK; the values above it are stack_[returned index, end).
  size_t pop_mark() {
    if (marks_.empty()) {
      fail("no MARK to pop to");
    }
    const size_t base = marks_.back();
    marks_.pop_back();
    return base;
  }
  void grow_tables(size_t entries) {
    if (entries > kMaxTableEntries - table_entries_) {
      fail("more than " + std::to_string(kMaxTableEntries) + " strings, globals and tuple items");
    }
    table_entries_ += entries;
  }
  Value text_value(std::string_view text) {
    grow_tables(1);
    texts_.push_back(text);
    return {Kind::kText, static_cast<int64_t>(texts_.size() - 1)};
  }
  Value int_value(int64_t value) { return {Kind::kInt, value}; }
  Value tuple_value(std::vector<Value> items) {
    grow_tables(items.size() + 1);
    tuples_.push_back(std::move(items));
    return {Kind::kTuple, static_cast<int64_t>(tuples_.size() - 1)};
  }
  Value tuple_from_top(size_t count) {
    if (stack_.size() - frame_base() < count) {
      fail("stack underflow");
    }
    std::vector<Value> items(stack_.end() - static_cast<std::ptrdiff_t>(count), stack_.end());
    stack_.resize(stack_.size() - count);
    return tuple_value(std::move(items));
  }
  void memo_put(uint64_t id) {
    // libtorch's Unpickler sizes its memo table by the largest id it sees, so one PUT of id
    // 171,079,263 in a 900-byte file makes it fill gigabytes. Picklers number their memo
    // entries from 0 without gaps (CPython's len(memo), torch's counter); refuse any other id.
    if (id > memo_.size()) {
      fail("memo id " + std::to_string(id) + " skips ahead of the " +
           std::to_string(memo_.size()) + " entries stored so far");
    }
    const Value value = top();
    const auto [it, inserted] = memo_.insert_or_assign(id, value);
    (void)it;
    if (inserted && memo_.size() > kMaxMemo) {
      fail("more than " + std::to_string(kMaxMemo) + " memo entries");
    }
  }
  void memo_get(uint64_t id) {
    const auto found = memo_.find(id);
    if (found == memo_.end()) {
      fail("memo entry " + std::to_string(id) + " was never stored");
    }
    push(found->second);
  }
  /// LONG1/LONG4: little-endian two's complement of any length.
  Value long_value(std::string_view bytes) {
    if (bytes.size() > 8) {
      return {Kind::kBigInt, 0};
    }
    if (bytes.empty()) {
      return int_value(0);
    }
    uint64_t raw = read_le(bytes, 0, static_cast<unsigned>(bytes.size()));
    const unsigned bits = static_cast<unsigned>(bytes.size()) * 8;
    if (bits < 64 && (raw >> (bits - 1)) != 0) {
      raw |= ~uint64_t{0} << bits;  // sign-extend
    }
    return int_value(static_cast<int64_t>(raw));
  }

  void persistent_id() {
    const Value id = pop();
    const auto fail_id = [&](const std::string& problem) {
      fail("a persistent id " + problem +
           " (torch expects ('storage', type, key, location, numel))");
    };
    if (id.kind != Kind::kTuple) {
      fail_id("is not a tuple");
    }
    const std::vector<Value>& items = tuples_[static_cast<size_t>(id.payload)];
    if (items.size() != 5 || items[0].kind != Kind::kText ||
        texts_[static_cast<size_t>(items[0].payload)] != "storage") {
      fail_id("is not a 5-tuple starting with 'storage'");
    }
    if (items[1].kind != Kind::kGlobal) {
      fail_id("names its storage type with something other than a global");
    }
    if (items[2].kind != Kind::kText || items[3].kind != Kind::kText) {
      fail_id("has a key or location that is not a string");
    }
    if (items[4].kind != Kind::kInt) {
      fail_id("has an element count that is not a 64-bit integer");
    }
    const auto& [type_module, type_name] = globals_[static_cast<size_t>(items[1].payload)];
    on_storage_(StorageClaim{type_module, type_name, texts_[static_cast<size_t>(items[2].payload)],
                             items[4].payload});
    push(Value{});
  }

  /// Executes the opcode just read; true at STOP.
  bool step() {
    switch (opcode_) {
      case 0x80:  // PROTO
        if (static_cast<unsigned char>(take(1)[0]) > 5) {
          fail("unsupported pickle protocol");
        }
        return false;
      case 0x95: {  // FRAME: a framing hint; the frame must be present
        const uint64_t length = take_le(8);
        if (length > pickle_.size() - pos_) {
          fail("its frame of " + std::to_string(length) + " bytes runs past the end");
        }
        return false;
      }
      case '.':  // STOP
        pop();
        return true;
      case '(':  // MARK
        if (marks_.size() >= kMaxMarks) {
          fail("more than " + std::to_string(kMaxMarks) + " nested MARKs");
        }
        marks_.push_back(stack_.size());
        return false;
      case '0':  // POP: Python pops the MARK when the frame is empty
        if (stack_.size() > frame_base()) {
          stack_.pop_back();
        } else if (!marks_.empty()) {
          pop_mark();
        } else {
          fail("stack underflow");
        }
        return false;
      case '1':  // POP_MARK
        stack_.resize(pop_mark());
        return false;
      case '2':  // DUP
        push(top());
        return false;
      case 'N':   // NONE
      case 0x88:  // NEWTRUE
      case 0x89:  // NEWFALSE
      case ']':   // EMPTY_LIST
      case '}':   // EMPTY_DICT
      case 0x8f:  // EMPTY_SET
        push(Value{});
        return false;
      case 'G':  // BINFLOAT
        take(8);
        push(Value{});
        return false;
      case 'J':  // BININT
        push(int_value(static_cast<int32_t>(static_cast<uint32_t>(take_le(4)))));
        return false;
      case 'K':  // BININT1
        push(int_value(static_cast<int64_t>(take_le(1))));
        return false;
      case 'M':  // BININT2
        push(int_value(static_cast<int64_t>(take_le(2))));
        return false;
      case 0x8a:  // LONG1
        push(long_value(take(take_le(1))));
        return false;
      case 0x8b: {  // LONG4: signed length
        const int32_t length = static_cast<int32_t>(static_cast<uint32_t>(take_le(4)));
        if (length < 0) {
          fail("negative LONG4 length");
        }
        push(long_value(take(static_cast<uint64_t>(length))));
        return false;
      }
      case 'X':  // BINUNICODE
        push(text_value(take(take_le(4))));
        return false;
      case 0x8c:  // SHORT_BINUNICODE
      case 'U':   // SHORT_BINSTRING
        push(text_value(take(take_le(1))));
        return false;
      case 0x8d:  // BINUNICODE8
        push(text_value(take(take_le(8))));
        return false;
      case 'T': {  // BINSTRING: signed length
        const int32_t length = static_cast<int32_t>(static_cast<uint32_t>(take_le(4)));
        if (length < 0) {
          fail("negative BINSTRING length");
        }
        push(text_value(take(static_cast<uint64_t>(length))));
        return false;
      }
      case 'B':  // BINBYTES
        take(take_le(4));
        push(Value{});
        return false;
      case 'C':  // SHORT_BINBYTES
        take(take_le(1));
        push(Value{});
        return false;
      case ')':  // EMPTY_TUPLE
        push(tuple_value({}));
        return false;
      case 't': {  // TUPLE
        const size_t base = pop_mark();
        std::vector<Value> items(stack_.begin() + static_cast<std::ptrdiff_t>(base), stack_.end());
        stack_.resize(base);
        push(tuple_value(std::move(items)));
        return false;
      }
      case 0x85:  // TUPLE1
      case 0x86:  // TUPLE2
      case 0x87:  // TUPLE3
        push(tuple_from_top(opcode_ - 0x84u));
        return false;
      case 'a':  // APPEND: value onto the list below it
        pop();
        top();
        return false;
      case 's':  // SETITEM: key and value into the dict below them
        pop();
        pop();
        top();
        return false;
      case 'e':     // APPENDS
      case 0x90: {  // ADDITEMS
        stack_.resize(pop_mark());
        top();
        return false;
      }
      case 'u': {  // SETITEMS: key/value pairs; an odd count would make libtorch read past them
        const size_t base = pop_mark();
        if ((stack_.size() - base) % 2 != 0) {
          fail("SETITEMS with an odd number of keys and values");
        }
        stack_.resize(base);
        top();
        return false;
      }
      case 0x91:  // FROZENSET
        stack_.resize(pop_mark());
        push(Value{});
        return false;
      case 'q':  // BINPUT
        memo_put(take_le(1));
        return false;
      case 'r':  // LONG_BINPUT
        memo_put(take_le(4));
        return false;
      case 0x94:  // MEMOIZE
        memo_put(memo_.size());
        return false;
      case 'h':  // BINGET
        memo_get(take_le(1));
        return false;
      case 'j':  // LONG_BINGET
        memo_get(take_le(4));
        return false;
      case 'c': {  // GLOBAL module\nname\n
        const std::string_view module = take_line();
        const std::string_view name = take_line();
        grow_tables(1);
        globals_.emplace_back(module, name);
        push(Value{Kind::kGlobal, static_cast<int64_t>(globals_.size() - 1)});
        return false;
      }
      case 0x93: {  // STACK_GLOBAL
        const Value name = pop();
        const Value module = pop();
        if (name.kind != Kind::kText || module.kind != Kind::kText) {
          fail("STACK_GLOBAL needs two strings");
        }
        grow_tables(1);
        globals_.emplace_back(texts_[static_cast<size_t>(module.payload)],
                              texts_[static_cast<size_t>(name.payload)]);
        push(Value{Kind::kGlobal, static_cast<int64_t>(globals_.size() - 1)});
        return false;
      }
      case 'R':   // REDUCE: callable, args → result
      case 0x81:  // NEWOBJ: class, args → object
        pop();
        pop();
        push(Value{});
        return false;
      case 'b':  // BUILD: state applied to the object below it
        pop();
        top();
        return false;
      case 'Q':  // BINPERSID
        persistent_id();
        return false;
      default:
        fail("unknown opcode " + hex_byte(opcode_) +
             " (not one torch's Pickler or torch.save writes)");
    }
  }

  std::string_view pickle_;
  std::string_view name_;
  const Reporter& report_;
  std::function<void(const StorageClaim&)> on_storage_;
  size_t pos_ = 0;
  size_t op_start_ = 0;
  unsigned opcode_ = 0;
  uint64_t ops_ = 0;
  size_t table_entries_ = 0;
  std::vector<Value> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Value> memo_;
  std::vector<std::string_view> texts_;
  std::vector<std::pair<std::string_view, std::string_view>> globals_;
  std::vector<std::vector<Value>> tuples_;
};

/// The folder holding the storages of pickle `name`, or nothing when the pickle is not one
/// libtorch reads. libtorch reads `<archive>/<stem>.pkl` and its storages from
/// `<archive>/<stem>/<key>` (data.pkl → data/, constants.pkl → constants/; torch.save writes
/// data.pkl and data/ the same way); a lite-interpreter bytecode.pkl shares constants/.
/// Deeper pickles (extra/*.pkl) are user files that need not be pickles at all.
std::optional<std::string> storage_folder_of(std::string_view name) {
  // TorchScript's source-range tables (code/**/*.debug_pkl) go through the same Unpickler
  // when the model loads, so they are scanned too; they declare no storages.
  constexpr std::string_view kDebugSuffix = ".debug_pkl";
  if (name.size() > kDebugSuffix.size() &&
      name.substr(name.size() - kDebugSuffix.size()) == kDebugSuffix) {
    return std::string(name) + "/";
  }
  constexpr std::string_view kSuffix = ".pkl";
  if (name.size() < kSuffix.size() || name.substr(name.size() - kSuffix.size()) != kSuffix ||
      std::count(name.begin(), name.end(), '/') > 1) {
    return std::nullopt;
  }
  const size_t slash = name.rfind('/');
  const std::string_view folder = slash == std::string_view::npos ? "" : name.substr(0, slash + 1);
  std::string_view stem = name.substr(folder.size(), name.size() - folder.size() - kSuffix.size());
  if (stem == "bytecode") {
    stem = "constants";
  }
  return std::string(folder) + std::string(stem) + "/";
}

// ------------------------------------------------------------------------------------------------
// Tensor extents

constexpr size_t kMaxVisits = 100'000'000;
constexpr size_t kMaxDepth = 10'000;

std::string ints_text(c10::IntArrayRef values) { return c10::str(values); }

/// Walks values iteratively (no recursion whatever the nesting), checking each tensor once.
class TensorWalker {
 public:
  explicit TensorWalker(const Reporter& report) : report_(report) {}

  /// Checks one tensor; `label` names it in errors ("parameter 'fc1.weight'").
  void check_tensor(const at::Tensor& tensor, const std::string& label) {
    if (!tensor.defined() || !seen_.insert(tensor.unsafeGetTensorImpl()).second) {
      return;
    }
    count_visit();
    try {
      check_layout(tensor, label);
    } catch (const c10::Error& error) {
      report_.fail(label + " cannot be inspected: " + error.what_without_backtrace());
    }
  }

  /// Checks every tensor reachable from `root`; `kind` and `path` name it ("attribute",
  /// "encoder.cache") and grow with the element path ("encoder.cache[2]").
  void walk(const c10::IValue& root, const std::string& kind, const std::string& path) {
    pending_.push_back({root, path, 0});
    while (!pending_.empty()) {
      Pending item = std::move(pending_.back());
      pending_.pop_back();
      visit(item, kind);
    }
  }

  /// Marks a container (e.g. a module object checked by other means) as already visited.
  void mark_visited(const c10::IValue& value) {
    if (value.isPtrType()) {
      visited_.insert(value.internalToPointer());
    }
  }

  void count_visit() {
    if (++visits_ > kMaxVisits) {
      report_.fail("holds more than " + std::to_string(kMaxVisits) +
                   " values to check; refusing to walk further");
    }
  }

 private:
  struct Pending {
    c10::IValue value;
    std::string path;
    size_t depth;
  };

  static std::string label_of(const std::string& kind, const std::string& path) {
    return kind + " '" + path + "'";
  }

  void check_layout(const at::Tensor& tensor, const std::string& label) {
    if (tensor.is_nested() || tensor.is_mkldnn()) {
      return;  // no strided view over a plain storage to check
    }
    // Sparse tensors keep their data in strided member tensors: check those.
    switch (tensor.layout()) {
      case at::kStrided:
        break;
      case at::kSparse:
        check_tensor(tensor._indices(), label + " (sparse indices)");
        check_tensor(tensor._values(), label + " (sparse values)");
        return;
      case at::kSparseCsr:
      case at::kSparseBsr:
        check_tensor(tensor.crow_indices(), label + " (compressed row indices)");
        check_tensor(tensor.col_indices(), label + " (column indices)");
        check_tensor(tensor.values(), label + " (sparse values)");
        return;
      case at::kSparseCsc:
      case at::kSparseBsc:
        check_tensor(tensor.ccol_indices(), label + " (compressed column indices)");
        check_tensor(tensor.row_indices(), label + " (row indices)");
        check_tensor(tensor.values(), label + " (sparse values)");
        return;
      default:
        return;
    }
    if (tensor.is_quantized() && (tensor.qscheme() == at::kPerChannelAffine ||
                                  tensor.qscheme() == at::kPerChannelAffineFloatQParams)) {
      check_tensor(tensor.q_per_channel_scales(), label + " (per-channel scales)");
      check_tensor(tensor.q_per_channel_zero_points(), label + " (per-channel zero points)");
    }
    if (!tensor.has_storage()) {
      return;
    }
    check_extent(tensor, label);
  }

  void check_extent(const at::Tensor& tensor, const std::string& label) const {
    const c10::IntArrayRef sizes = tensor.sizes();
    const c10::IntArrayRef strides = tensor.strides();
    const int64_t offset = tensor.storage_offset();
    const uint64_t storage_bytes = tensor.storage().nbytes();
    const auto describe = [&] {
      return label + " (shape " + ints_text(sizes) + ", strides " + ints_text(strides) +
             ", storage offset " + std::to_string(offset) + ", " +
             std::string(c10::toString(tensor.scalar_type())) + ")";
    };
    if (sizes.size() != strides.size()) {
      report_.fail(describe() + " has " + std::to_string(strides.size()) + " strides for " +
                   std::to_string(sizes.size()) + " dimensions");
    }
    if (offset < 0) {
      report_.fail(describe() + " has a negative storage offset");
    }
    bool empty = false;
    for (size_t dim = 0; dim < sizes.size(); ++dim) {
      if (sizes[dim] < 0 || strides[dim] < 0) {
        report_.fail(describe() + " has a negative size or stride in dimension " +
                     std::to_string(dim));
      }
      empty = empty || sizes[dim] == 0;
    }
    if (empty) {
      return;  // no element is ever read
    }
    // The last element reachable is at storage_offset + sum((size_i - 1) * stride_i).
    uint64_t last = static_cast<uint64_t>(offset);
    bool overflow = false;
    for (size_t dim = 0; dim < sizes.size(); ++dim) {
      uint64_t reach = 0;
      overflow = overflow ||
                 __builtin_mul_overflow(static_cast<uint64_t>(sizes[dim] - 1),
                                        static_cast<uint64_t>(strides[dim]), &reach) ||
                 __builtin_add_overflow(last, reach, &last);
    }
    uint64_t needed = 0;
    overflow = overflow || __builtin_add_overflow(last, uint64_t{1}, &needed) ||
               __builtin_mul_overflow(needed, static_cast<uint64_t>(tensor.itemsize()), &needed);
    if (overflow) {
      report_.fail(describe() + " reaches beyond 2^64 bytes; the file is corrupted");
    }
    if (needed > storage_bytes) {
      report_.fail(describe() + " reaches byte " + std::to_string(needed) +
                   " of a storage that holds " + std::to_string(storage_bytes) +
                   " bytes; the file is corrupted");
    }
  }

  void visit(const Pending& item, const std::string& kind) {
    count_visit();
    const c10::IValue& value = item.value;
    if (value.isTensor()) {
      check_tensor(value.toTensor(), label_of(kind, item.path));
      return;
    }
    if (!(value.isList() || value.isTuple() || value.isGenericDict() || value.isObject() ||
          value.isEnum())) {
      return;  // scalars, strings, devices, ...: no tensors inside
    }
    if (!visited_.insert(value.internalToPointer()).second) {
      return;  // shared or cyclic
    }
    if (item.depth >= kMaxDepth) {
      report_.fail(label_of(kind, item.path) + " is nested more than " + std::to_string(kMaxDepth) +
                   " levels deep");
    }
    const auto add = [&](const c10::IValue& child, std::string path) {
      if (child.isTensor() || child.isList() || child.isTuple() || child.isGenericDict() ||
          child.isObject() || child.isEnum()) {
        pending_.push_back({child, std::move(path), item.depth + 1});
      }
    };
    if (value.isList()) {
      if (value.isIntList() || value.isDoubleList() || value.isBoolList()) {
        return;
      }
      const c10::ArrayRef<c10::IValue> elements = value.toListRef();
      for (size_t i = 0; i < elements.size(); ++i) {
        count_visit();
        add(elements[i], item.path + "[" + std::to_string(i) + "]");
      }
    } else if (value.isTuple()) {
      const auto elements = value.toTupleRef().elements();
      for (size_t i = 0; i < elements.size(); ++i) {
        count_visit();
        add(elements[i], item.path + "[" + std::to_string(i) + "]");
      }
    } else if (value.isGenericDict()) {
      size_t index = 0;
      for (const auto& entry : value.toGenericDict()) {
        count_visit();
        const c10::IValue& key = entry.key();
        const std::string key_text = key.isString()
                                         ? "\"" + sdk::printable(key.toStringRef(), 60) + "\""
                                     : key.isInt() ? std::to_string(key.toInt())
                                                   : "#" + std::to_string(index);
        add(key, item.path + "[key " + key_text + "]");
        add(entry.value(), item.path + "[" + key_text + "]");
        ++index;
      }
    } else if (value.isObject()) {
      const c10::ivalue::Object& object = value.toObjectRef();
      const c10::ClassTypePtr type = object.type();
      const std::vector<c10::IValue>& slots = object.slots();
      for (size_t i = 0; i < slots.size(); ++i) {
        count_visit();
        const std::string name = type != nullptr && i < type->numAttributes()
                                     ? type->getAttributeName(i)
                                     : "[slot " + std::to_string(i) + "]";
        add(slots[i], item.path.empty() ? name : item.path + "." + name);
      }
    } else if (value.isEnum()) {
      add(value.toEnumHolder()->value(), item.path + ".value");
    }
  }

  const Reporter& report_;
  std::unordered_set<const void*> seen_;     // TensorImpls already checked
  std::unordered_set<const void*> visited_;  // containers and objects already walked
  std::vector<Pending> pending_;
  size_t visits_ = 0;
};

std::string joined(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

}  // namespace

void check_torch_archive(const std::string& bytes, const std::string& what,
                         const std::string& source) {
  const Reporter report(what, source);
  const std::string_view file(bytes);
  const CentralDirectory directory = read_end_records(file, report);
  const std::vector<ZipEntry> entries = read_central_directory(file, directory, report);

  // Content: exact sizes and CRC-32 of every record (miniz in libtorch skips both).
  std::unordered_map<std::string, uint64_t> record_sizes;  // case-folded names
  record_sizes.reserve(entries.size());
  struct Pickle {
    std::string_view name;
    std::string folder;       ///< where its storages' records live
    std::string_view stored;  ///< the bytes of a stored pickle
    std::string inflated;     ///< the bytes of a deflated one
  };
  std::vector<Pickle> pickles;
  for (const ZipEntry& entry : entries) {
    record_sizes.emplace(folded(entry.name), entry.uncompressed_size);
    const std::string_view data = file.substr(entry.data_offset, entry.compressed_size);
    std::optional<std::string> folder = storage_folder_of(folded(entry.name));
    std::string inflated;
    uint32_t crc = 0;
    if (entry.method == kMethodStored) {
      crc = crc32_of(0, data);
    } else {
      if (folder.has_value() && entry.uncompressed_size > kMaxInflatedPickleBytes) {
        report.fail("pickle " + quote_name(entry.name) + " is deflated to " +
                    std::to_string(entry.uncompressed_size) + " bytes, more than the " +
                    std::to_string(kMaxInflatedPickleBytes) + " this check inflates");
      }
      inflate_record(
          entry, data,
          [&](std::string_view chunk) {
            crc = crc32_of(crc, chunk);
            if (folder.has_value()) {
              inflated.append(chunk);
            }
          },
          report);
    }
    if (crc != entry.crc32) {
      report.fail("record " + quote_name(entry.name) + " fails its CRC-32 check (stored " +
                  hex32(entry.crc32) + ", computed " + hex32(crc) + "); the archive is corrupted");
    }
    if (folder.has_value()) {
      const bool stored = entry.method == kMethodStored;
      pickles.push_back(Pickle{entry.name, std::move(*folder), stored ? data : std::string_view(),
                               std::move(inflated)});
    }
  }

  // Storages: each one a pickle declares needs a record of at least numel x element size bytes,
  // or libtorch builds a storage that claims more memory than it was given.
  for (const Pickle& pickle : pickles) {
    const auto on_storage = [&](const StorageClaim& claim) {
      const std::string type = std::string(claim.type_module) + "." + std::string(claim.type_name);
      const size_t element_size = storage_element_size(claim.type_module, claim.type_name);
      if (element_size == 0) {
        report.fail("pickle " + quote_name(pickle.name) + " declares storage " +
                    quote_name(claim.key) + " of unknown type " + quote_name(type));
      }
      if (claim.numel < 0) {
        report.fail("pickle " + quote_name(pickle.name) + " declares storage " +
                    quote_name(claim.key) + " with a negative element count (" +
                    std::to_string(claim.numel) + ")");
      }
      std::string_view element_name = claim.type_name;
      element_name.remove_suffix(std::string_view("Storage").size());
      const std::string elements =
          std::to_string(claim.numel) + " " + std::string(element_name) + " elements";
      uint64_t needed = 0;
      if (__builtin_mul_overflow(static_cast<uint64_t>(claim.numel), uint64_t{element_size},
                                 &needed)) {
        report.fail("pickle " + quote_name(pickle.name) + " declares storage " +
                    quote_name(claim.key) + " of " + elements + ", more bytes than 64 bits count");
      }
      if (claim.numel == 0) {
        return;  // libtorch reads no record for an empty storage
      }
      const std::string record = pickle.folder + std::string(claim.key);
      const auto found = record_sizes.find(folded(record));
      if (found == record_sizes.end()) {
        report.fail("pickle " + quote_name(pickle.name) + " declares storage " +
                    quote_name(claim.key) + " (" + elements + ") but the archive has no record " +
                    quote_name(record) + "; the archive is truncated or corrupted");
      }
      if (found->second < needed) {
        report.fail("record " + quote_name(record) + " holds " + std::to_string(found->second) +
                    " bytes but its storage needs " + std::to_string(needed) + " (" + elements +
                    "); the archive is truncated or corrupted");
      }
    };
    const std::string_view content = pickle.inflated.empty() ? pickle.stored : pickle.inflated;
    PickleScanner(content, pickle.name, report, on_storage).run();
  }
}

void check_tensor_extents(const c10::IValue& value, const std::string& what,
                          const std::string& source) {
  const Reporter report(what, source);
  TensorWalker walker(report);
  walker.walk(value, "tensor", "value");
}

void check_module_tensors(const torch::jit::Module& module, const std::string& what,
                          const std::string& source) {
  const Reporter report(what, source);
  TensorWalker walker(report);
  for (const auto& parameter : module.named_parameters(/*recurse=*/true)) {
    walker.check_tensor(parameter.value, "parameter '" + parameter.name + "'");
  }
  for (const auto& buffer : module.named_buffers(/*recurse=*/true)) {
    walker.check_tensor(buffer.value, "buffer '" + buffer.name + "'");
  }
  const auto modules = module.named_modules();
  for (const auto& named : modules) {
    walker.mark_visited(named.value._ivalue());
  }

  // Other attributes (tensors, lists, dicts, objects) of every module; parameters, buffers and
  // submodules are covered above with their proper names.
  for (const auto& named : modules) {
    const c10::intrusive_ptr<c10::ivalue::Object> object = named.value._ivalue();
    const c10::ClassTypePtr type = object->type();
    const size_t attributes = std::min(type->numAttributes(), object->slots().size());
    for (size_t slot = 0; slot < attributes; ++slot) {
      walker.count_visit();
      const c10::IValue& value = object->getSlot(slot);
      if (type->is_parameter(slot) || type->is_buffer(slot) ||
          (value.isObject() && value.toObjectRef().type() != nullptr &&
           value.toObjectRef().type()->is_module())) {
        continue;
      }
      walker.walk(value, "attribute", joined(named.name, type->getAttributeName(slot)));
    }
  }

  // Tensor constants baked into the methods' graphs (traced models keep many).
  std::unordered_set<const torch::jit::Function*> seen_functions;
  for (const auto& named : modules) {
    for (torch::jit::Function* function : named.value.type()->methods()) {
      if (function == nullptr || !seen_functions.insert(function).second) {
        continue;
      }
      std::shared_ptr<torch::jit::Graph> graph;
      try {
        graph = torch::jit::toGraphFunction(*function).graph();
      } catch (const c10::Error&) {
        continue;  // not a graph function (e.g. a builtin): no constants of its own
      }
      const std::string method = function->qualname().qualifiedName();
      std::vector<const torch::jit::Block*> blocks{graph->block()};
      while (!blocks.empty()) {
        const torch::jit::Block* block = blocks.back();
        blocks.pop_back();
        for (const torch::jit::Node* node : block->nodes()) {
          walker.count_visit();
          for (const torch::jit::Block* nested : node->blocks()) {
            blocks.push_back(nested);
          }
          if (node->kind() != c10::prim::Constant || !node->hasAttribute(c10::attr::value)) {
            continue;
          }
          const std::string label = "constant in method '" + method + "'";
          if (node->kindOf(c10::attr::value) == torch::jit::AttributeKind::t) {
            walker.check_tensor(node->t(c10::attr::value), "tensor " + label);
          } else if (node->kindOf(c10::attr::value) == torch::jit::AttributeKind::ival) {
            walker.walk(node->ival(c10::attr::value), "constant", method);
          }
        }
      }
    }
  }
}

}  // namespace lithe::host
