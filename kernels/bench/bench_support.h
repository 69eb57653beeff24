#pragma once
// What the kernel benchmark programs share: flag parsing with one-line usage errors (exit 2)
// and median timing. Header-only, for the bench executables.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

namespace lithe::bench {

/// `program`'s flags, each "--flag VALUE"; `usage` is the synopsis after the program name.
class FlagParser {
 public:
  FlagParser(std::string program, std::string usage)
      : program_(std::move(program)), usage_(std::move(usage)) {}

  /// Prints "<program>: <message>" and the usage to stderr, exits with status 2.
  [[noreturn]] void fail(const std::string& message) const {
    std::cerr << program_ << ": " << message << "\nusage: " << program_ << " " << usage_ << "\n";
    std::exit(2);
  }

  /// `text` as an integer in [1, max], or fail() naming `flag`, the range and the text.
  int64_t positive(const std::string& flag, const char* text, int64_t max) const {
    char* end = nullptr;
    const long long value = std::strtoll(text, &end, 10);
    if (end == text || *end != '\0' || value < 1 || value > max) {
      fail(flag + " must be an integer in [1, " + std::to_string(max) + "], got '" + text + "'");
    }
    return value;
  }

  /// Calls `handle(flag, value)` for every pair; --help/-h, a flag without a value and a flag
  /// `handle` does not know (it returns false) fail().
  void parse(int argc, char** argv,
             const std::function<bool(const std::string&, const char*)>& handle) const {
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (flag == "--help" || flag == "-h") {
        fail("help requested");
      }
      if (i + 1 >= argc) {
        fail(flag + " needs a value (or is not an option)");
      }
      if (!handle(flag, argv[++i])) {
        fail("unknown option " + flag);
      }
    }
  }

 private:
  std::string program_;
  std::string usage_;
};

/// Median wall time of `repeats` runs of `fn` (after `warmups` untimed runs).
inline double median_seconds(int repeats, const std::function<void()>& fn, int warmups = 0) {
  for (int w = 0; w < warmups; ++w) {
    fn();
  }
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  const std::size_t m = times.size() / 2;
  return times.size() % 2 == 1 ? times[m] : 0.5 * (times[m - 1] + times[m]);
}

}  // namespace lithe::bench
