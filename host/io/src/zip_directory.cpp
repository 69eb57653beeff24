// The zip layer of the archive checks (zip_directory.h).
#include "zip_directory.h"

#include <zlib.h>

#include <string>
#include <unordered_set>

namespace lithe::host::archive {
namespace {

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
constexpr uint16_t kMethodDeflated = 8;
// General purpose flags: bit 0 traditional encryption, bit 6 strong encryption.
constexpr uint16_t kEncryptedFlags = 0x0001 | 0x0040;

// Sanity bounds. A TorchScript model holds a few records per parameter; a million entries or a
// terabyte of content is no model this toolkit can load, only a size field that is garbage.
constexpr uint64_t kMaxEntries = 1'000'000;
constexpr uint64_t kMaxTotalUncompressedBytes = uint64_t{1} << 40;

uint16_t u16(std::string_view bytes, uint64_t offset) {
  return static_cast<uint16_t>(read_le(bytes, offset, 2));
}
uint32_t u32(std::string_view bytes, uint64_t offset) {
  return static_cast<uint32_t>(read_le(bytes, offset, 4));
}
uint64_t u64(std::string_view bytes, uint64_t offset) { return read_le(bytes, offset, 8); }


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

}  // namespace

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
static void apply_zip64_extra(std::string_view extra, ZipEntry& entry, const Reporter& report) {
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

}  // namespace lithe::host::archive
