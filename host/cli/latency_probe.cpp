#include "latency_probe.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/script.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "lithe/host/io/file_io.h"
#include "lithe/sdk/error.h"

namespace lithe::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFolderPrefix = "lithe-search-";

// Removes the folders that searches killed before they could clean up left behind: those named
// after a process that no longer exists.
void remove_abandoned_folders(const fs::path& parent) {
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kFolderPrefix, 0) != 0) {
      continue;
    }
    const std::string rest = name.substr(std::strlen(kFolderPrefix));
    const size_t dash = rest.find('-');
    char* end = nullptr;
    const long pid = std::strtol(rest.c_str(), &end, 10);
    if (dash == std::string::npos || end != rest.c_str() + dash || pid <= 0) {
      continue;
    }
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::error_code ignored;
      fs::remove_all(entry.path(), ignored);
    }
  }
}

// A folder of its own under the system's temporary directory (named after this process, so
// that a later search removes it if this one is killed), removed with its content.
struct TempFolder {
  fs::path path;
  TempFolder() {
    const fs::path parent = fs::temp_directory_path();
    remove_abandoned_folders(parent);
    std::string pattern =
        (parent / (kFolderPrefix + std::to_string(::getpid()) + "-XXXXXX")).string();
    LITHE_CHECK(::mkdtemp(pattern.data()) != nullptr, sdk::Errc::kIo,
                "cannot make a temporary folder for latency measurements in ",
                fs::temp_directory_path().string(), ": ", std::strerror(errno));
    path = pattern;
  }
  ~TempFolder() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
};

std::string self_executable() {
  char self[4096];
  const ssize_t length = ::readlink("/proc/self/exe", self, sizeof self - 1);
  LITHE_CHECK(length > 0, sdk::Errc::kIo, "cannot find the lithe executable: ",
              std::strerror(errno));
  self[length] = '\0';
  return self;
}

// Runs `argv` (argv[0] the program) and returns its exit status and what it printed (stdout
// and stderr together).
std::pair<int, std::string> run_captured(std::vector<std::string> argv) {
  int fds[2];
  LITHE_CHECK(::pipe(fds) == 0, sdk::Errc::kIo, "cannot make a pipe: ", std::strerror(errno));
  std::vector<char*> args;
  for (std::string& a : argv) {
    args.push_back(a.data());
  }
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw sdk::Error(sdk::Errc::kIo, std::string("cannot start a latency measurement: ") +
                                         std::strerror(error));
  }
  if (pid == 0) {  // only exec-safe calls from here
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n > 0) {
      out.append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

}  // namespace

LatencyProbe fresh_process_latency_probe(const std::string& dense_model,
                                         const std::vector<int64_t>& input_shape, int runs,
                                         int warmup, int threads) {
  auto folder = std::make_shared<TempFolder>();
  const std::string self = self_executable();
  std::string shape;
  for (const int64_t d : input_shape) {
    shape += (shape.empty() ? "" : ",") + std::to_string(d);
  }
  return [=](const torch::jit::Module& candidate) -> std::pair<double, double> {
    const fs::path file = folder->path / "candidate.pt";
    std::ostringstream bytes;
    candidate.save(bytes);
    host::write_file(file, bytes.str());
    const auto [status, out] =
        run_captured({self, "latency", "--baseline", dense_model, "--model", file.string(),
                      "--input-shape", shape, "--runs", std::to_string(runs), "--warmup",
                      std::to_string(warmup), "--threads", std::to_string(threads), "--json"});
    const size_t json_at = out.find('{');
    const nlohmann::json result = json_at == std::string::npos
                                      ? nlohmann::json()
                                      : nlohmann::json::parse(out.substr(json_at), nullptr, false);
    LITHE_CHECK(status == 0 && result.is_object() && result.contains("baseline"),
                sdk::Errc::kIo, "the latency measurement in a fresh process failed (exit ",
                status, "): ", out.substr(0, out.find('\n')));
    return {result["baseline"]["ms"].get<double>(), result["models"][0]["ms"].get<double>()};
  };
}

}  // namespace lithe::cli
