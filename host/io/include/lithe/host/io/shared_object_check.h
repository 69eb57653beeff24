#pragma once
/// \file
/// The check every shared library Lithe opens at run time (plugins, ONNX Runtime) passes before
/// dlopen sees it.

#include <filesystem>
#include <string>

namespace lithe::host {

/// Why `path` is not a whole ELF shared object for this machine, or "" when it is one. dlopen
/// maps a file's segments as they are declared: a truncated library (a half-copied file) then
/// faults with SIGBUS when its missing pages are touched, so the header, every table and every
/// loadable segment must lie within the file before it is opened. Reads the file; never throws.
std::string shared_object_problem(const std::filesystem::path& path);

}  // namespace lithe::host
