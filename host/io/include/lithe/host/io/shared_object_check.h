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

/// Why `path` (a library or a plugin directory, canonical) cannot be trusted, or "". Like ssh's
/// StrictModes: code loaded into the process must not be replaceable by anyone but its owner or
/// root, so the file, its directory and every directory above it must be owned by root or by
/// this user and not be writable by group or others. A sticky directory owned by root (/tmp)
/// is accepted above the library's own directory: others cannot rename or remove what is in
/// it. Never throws.
std::string trust_problem(const std::filesystem::path& path, bool is_directory);

/// LITHE_ALLOW_INSECURE_PLUGINS=1: trust_problem is not asked (a development tree), for plugins
/// and ONNX Runtime alike.
bool insecure_libraries_allowed();

/// The one-line refusal of an untrusted library: `where` (the path, or the option and the
/// path), trust_problem's `problem`, and what to do about it.
std::string untrusted_message(const std::string& where, const std::string& problem);

}  // namespace lithe::host
