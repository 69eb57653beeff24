#pragma once
// The zip layer of a torch archive, read as hostile input: the (zip64) end records, the central
// directory and its local headers, CRC-32 and bounded inflation of deflated records. Every
// offset and length is checked before it is used and nothing allocates by a size the file
// claims.

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "archive_reading.h"

namespace lithe::host::archive {

inline constexpr uint16_t kMethodStored = 0;
/// torch stores its pickles; a deflated one is inflated into memory, so its size is bounded.
inline constexpr uint64_t kMaxInflatedPickleBytes = uint64_t{1} << 30;

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

/// The directory's place, from the end records (fails through `report` when they are broken).
CentralDirectory read_end_records(std::string_view file, const Reporter& report);
/// Every entry, each checked against its local header (names unique as libtorch compares them,
/// sizes, methods, no encryption, no overlap).
std::vector<ZipEntry> read_central_directory(std::string_view file,
                                             const CentralDirectory& directory,
                                             const Reporter& report);
/// zlib's CRC-32 of `data`, continuing from `crc`.
uint32_t crc32_of(uint32_t crc, std::string_view data);
/// Inflates a raw deflate stream, handing the output to `sink` in chunks. Fails unless the
/// stream ends after exactly the entry's uncompressed size. Memory stays fixed whatever the
/// header claims.
void inflate_record(const ZipEntry& entry, std::string_view compressed,
                    const std::function<void(std::string_view)>& sink, const Reporter& report);

}  // namespace lithe::host::archive
