#pragma once
// A small zip reader (for trusted inputs: the checked-in models) and writer, so a test can build
// an archive that is consistent (sizes, CRCs) except for the one defect under test.

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace lithe::test {

inline uint64_t le(const std::string& bytes, size_t offset, int width) {
  uint64_t value = 0;
  for (int i = 0; i < width; ++i) {
    value |= uint64_t{static_cast<unsigned char>(bytes.at(offset + i))} << (8 * i);
  }
  return value;
}

inline void put(std::string& out, uint64_t value, int width) {
  for (int i = 0; i < width; ++i) {
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
  }
}

inline void patch(std::string& bytes, size_t offset, uint64_t value, int width) {
  std::string field;
  put(field, value, width);
  bytes.replace(offset, width, field);
}

inline uint32_t crc_of(const std::string& data) {
  return static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
}

struct ZipRecord {
  std::string name;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t uncompressed_size = 0;
  std::string payload;       ///< the bytes as they lie in the file (deflated for method 8)
  uint64_t data_offset = 0;  ///< where the payload was in the file it was read from
};

inline ZipRecord stored_record(const std::string& name, const std::string& data) {
  ZipRecord record;
  record.name = name;
  record.crc = crc_of(data);
  record.uncompressed_size = data.size();
  record.payload = data;
  return record;
}

/// Entries of a small trusted archive (no zip64, no comment), in central-directory order.
inline std::vector<ZipRecord> read_zip(const std::string& file) {
  const size_t eocd = file.size() - 22;
  if (le(file, eocd, 4) != 0x06054b50u) {
    throw std::runtime_error("test archive: no end-of-central-directory record at the end");
  }
  const uint64_t entries = le(file, eocd + 10, 2);
  size_t pos = le(file, eocd + 16, 4);
  std::vector<ZipRecord> records;
  for (uint64_t i = 0; i < entries; ++i) {
    if (le(file, pos, 4) != 0x02014b50u) {
      throw std::runtime_error("test archive: bad central directory entry");
    }
    ZipRecord record;
    record.method = static_cast<uint16_t>(le(file, pos + 10, 2));
    record.crc = static_cast<uint32_t>(le(file, pos + 16, 4));
    const uint64_t compressed = le(file, pos + 20, 4);
    record.uncompressed_size = le(file, pos + 24, 4);
    const size_t name_length = le(file, pos + 28, 2);
    const size_t variable = name_length + le(file, pos + 30, 2) + le(file, pos + 32, 2);
    record.name = file.substr(pos + 46, name_length);
    const size_t local = le(file, pos + 42, 4);
    record.data_offset = local + 30 + le(file, local + 26, 2) + le(file, local + 28, 2);
    record.payload = file.substr(record.data_offset, compressed);
    records.push_back(record);
    pos += 46 + variable;
  }
  return records;
}

/// A zip of `records` in order; with `zip64`, every size and offset goes through zip64 extra
/// fields and the zip64 end records (what torch writes for large files).
inline std::string write_zip(const std::vector<ZipRecord>& records, bool zip64 = false) {
  const uint32_t placeholder = 0xFFFFFFFFu;
  const uint16_t version = zip64 ? 45 : 20;
  std::string out;
  std::string directory;
  for (const ZipRecord& record : records) {
    const uint64_t offset = out.size();
    put(out, 0x04034b50, 4);
    put(out, version, 2);
    put(out, 0, 2);  // flags
    put(out, record.method, 2);
    put(out, 0, 2);     // time
    put(out, 0x21, 2);  // date: 1980-01-01
    put(out, record.crc, 4);
    put(out, zip64 ? placeholder : record.payload.size(), 4);
    put(out, zip64 ? placeholder : record.uncompressed_size, 4);
    put(out, record.name.size(), 2);
    put(out, zip64 ? 20 : 0, 2);
    out += record.name;
    if (zip64) {
      put(out, 0x0001, 2);
      put(out, 16, 2);
      put(out, record.uncompressed_size, 8);
      put(out, record.payload.size(), 8);
    }
    out += record.payload;

    put(directory, 0x02014b50, 4);
    put(directory, version, 2);  // made by
    put(directory, version, 2);  // needed
    put(directory, 0, 2);
    put(directory, record.method, 2);
    put(directory, 0, 2);
    put(directory, 0x21, 2);
    put(directory, record.crc, 4);
    put(directory, zip64 ? placeholder : record.payload.size(), 4);
    put(directory, zip64 ? placeholder : record.uncompressed_size, 4);
    put(directory, record.name.size(), 2);
    put(directory, zip64 ? 28 : 0, 2);
    put(directory, 0, 2);  // comment
    put(directory, 0, 2);  // disk
    put(directory, 0, 2);  // internal attributes
    put(directory, 0, 4);  // external attributes
    put(directory, zip64 ? placeholder : offset, 4);
    directory += record.name;
    if (zip64) {
      put(directory, 0x0001, 2);
      put(directory, 24, 2);
      put(directory, record.uncompressed_size, 8);
      put(directory, record.payload.size(), 8);
      put(directory, offset, 8);
    }
  }
  const uint64_t directory_offset = out.size();
  out += directory;
  if (zip64) {
    const uint64_t zip64_end = out.size();
    put(out, 0x06064b50, 4);
    put(out, 44, 8);
    put(out, 45, 2);
    put(out, 45, 2);
    put(out, 0, 4);
    put(out, 0, 4);
    put(out, records.size(), 8);
    put(out, records.size(), 8);
    put(out, directory.size(), 8);
    put(out, directory_offset, 8);
    put(out, 0x07064b50, 4);
    put(out, 0, 4);
    put(out, zip64_end, 8);
    put(out, 1, 4);
  }
  put(out, 0x06054b50, 4);
  put(out, 0, 2);
  put(out, 0, 2);
  put(out, zip64 ? 0xFFFF : records.size(), 2);
  put(out, zip64 ? 0xFFFF : records.size(), 2);
  put(out, zip64 ? placeholder : directory.size(), 4);
  put(out, zip64 ? placeholder : directory_offset, 4);
  put(out, 0, 2);
  return out;
}

inline ZipRecord& find_record(std::vector<ZipRecord>& records, const std::string& name) {
  const auto found = std::find_if(records.begin(), records.end(),
                                  [&](const ZipRecord& record) { return record.name == name; });
  if (found == records.end()) {
    throw std::runtime_error("test archive has no record " + name);
  }
  return *found;
}

}  // namespace lithe::test
