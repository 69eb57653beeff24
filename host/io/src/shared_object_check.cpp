#include "lithe/host/io/shared_object_check.h"

#include <elf.h>

#include <cstring>
#include <fstream>

namespace lithe::host {

namespace fs = std::filesystem;

std::string shared_object_problem(const fs::path& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) {
    return "cannot read its size: " + ec.message();
  }
  std::ifstream in(path, std::ios::binary);
  const auto read_at = [&](uint64_t offset, void* out, size_t length) {
    in.seekg(static_cast<std::streamoff>(offset));
    in.read(static_cast<char*>(out), static_cast<std::streamsize>(length));
    return static_cast<bool>(in);
  };
  Elf64_Ehdr header{};
  if (size < sizeof header || !read_at(0, &header, sizeof header) ||
      std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) {
    return "not an ELF file";
  }
#if defined(__x86_64__)
  constexpr int kMachine = EM_X86_64;
#elif defined(__aarch64__)
  constexpr int kMachine = EM_AARCH64;
#else
  const int kMachine = header.e_machine;
#endif
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB ||
      header.e_type != ET_DYN || header.e_machine != kMachine) {
    return "not a 64-bit shared object for this machine (ELF class " +
           std::to_string(header.e_ident[EI_CLASS]) + ", type " + std::to_string(header.e_type) +
           ", machine " + std::to_string(header.e_machine) + ")";
  }
  const auto fits = [&](uint64_t offset, uint64_t count, uint64_t entry) {
    uint64_t length = 0;
    uint64_t end = 0;
    return !__builtin_mul_overflow(count, entry, &length) &&
           !__builtin_add_overflow(offset, length, &end) && end <= size;
  };
  if (header.e_phentsize != sizeof(Elf64_Phdr) ||
      !fits(header.e_phoff, header.e_phnum, sizeof(Elf64_Phdr))) {
    return "its program header table lies outside the file (truncated?)";
  }
  if (header.e_shnum != 0 && !fits(header.e_shoff, header.e_shnum, header.e_shentsize)) {
    return "its section header table lies outside the file (" + std::to_string(size) +
           " bytes; truncated?)";
  }
  for (uint16_t i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr segment{};
    if (!read_at(header.e_phoff + uint64_t{i} * sizeof segment, &segment, sizeof segment)) {
      return "cannot read program header " + std::to_string(i);
    }
    if ((segment.p_type == PT_LOAD || segment.p_type == PT_DYNAMIC) &&
        !fits(segment.p_offset, 1, segment.p_filesz)) {
      return "segment " + std::to_string(i) + " ends at byte " +
             std::to_string(segment.p_offset + segment.p_filesz) + " but the file has " +
             std::to_string(size) + " (truncated?)";
    }
  }
  return "";
}

}  // namespace lithe::host
