#pragma once
// Runs the real `lithe` executable and captures what it prints, for end-to-end tests.

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "support/paths.h"

namespace lithe::test {

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

/// Runs a shell command line and captures what it prints (append "2>&1" for stderr too).
inline CliRun run_shell(const std::string& command) {
  CliRun run;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    return run;
  }
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) {
    run.out += buffer.data();
  }
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

inline CliRun run_lithe(const std::string& args) {
  return run_shell(lithe_cli().string() + " " + args + " 2>&1");
}

/// Runs `lithe args` with `env` ("NAME=value ...") added to its environment.
inline CliRun run_lithe_env(const std::string& env, const std::string& args) {
  return run_shell("env " + env + " " + lithe_cli().string() + " " + args + " 2>&1");
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace lithe::test
