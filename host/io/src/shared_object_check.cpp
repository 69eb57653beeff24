#include "lithe/host/io/shared_object_check.h"

#include <elf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
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

bool insecure_libraries_allowed() {
  const char* value = std::getenv("LITHE_ALLOW_INSECURE_PLUGINS");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

std::string trust_problem(const fs::path& path, bool is_directory) {
  const uid_t me = ::geteuid();
  const auto check = [&](const fs::path& item, bool plugin_dir_or_file) -> std::string {
    struct stat st {};
    if (::stat(item.c_str(), &st) != 0) {
      return "cannot examine '" + item.string() + "': " + std::strerror(errno);
    }
    if (st.st_uid != 0 && st.st_uid != me) {
      return "'" + item.string() + "' is owned by user " + std::to_string(st.st_uid) +
             ", neither root nor this user";
    }
    const bool sticky_root = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX) != 0 && st.st_uid == 0;
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (plugin_dir_or_file || !sticky_root)) {
      char mode[8];
      std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
      return "'" + item.string() + "' is writable by " +
             ((st.st_mode & S_IWOTH) != 0 ? "others" : "its group") + " (mode " + mode + ")";
    }
    return "";
  };
  if (std::string problem = check(path, true); !problem.empty()) {
    return problem;
  }
  fs::path dir = path.parent_path();
  bool own_dir = !is_directory;  // a file's own directory gets the strict rule too
  for (int depth = 0; depth < 256 && !dir.empty(); ++depth) {
    if (std::string problem = check(dir, own_dir); !problem.empty()) {
      return problem;
    }
    own_dir = false;
    if (dir == dir.root_path()) {
      break;
    }
    dir = dir.parent_path();
  }
  return "";
}

std::string untrusted_message(const std::string& where, const std::string& problem) {
  return where + ": refused: " + problem +
         "; anyone who can write there could run code in lithe. Fix the permissions "
         "(chmod go-w), or set LITHE_ALLOW_INSECURE_PLUGINS=1 for a development tree";
}

}  // namespace lithe::host
