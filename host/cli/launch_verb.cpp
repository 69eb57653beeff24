// `lithe launch --nproc N -- <verb> <args>`: torchrun for one machine. Starts N copies of this
// executable with the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT), waits for them, and when one fails, names it and ends the others
// after a grace period (they normally fail on their own within milliseconds, when their next
// exchange finds the peer gone).
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <csignal>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lithe/sdk/error.h"
#include "verbs.h"

extern char** environ;

namespace lithe::cli {
namespace {

volatile std::sig_atomic_t g_signal = 0;  // a signal sent to launch, forwarded to the ranks
extern "C" void remember_signal(int signal) { g_signal = signal; }

// A port the kernel reports free now (the rendezvous binds it a moment later).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  LITHE_CHECK(fd >= 0, sdk::Errc::kIo, "cannot open a socket to find a free port: ",
              std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  ::close(fd);
  LITHE_CHECK(ok, sdk::Errc::kIo, "cannot find a free port: ", std::strerror(errno));
  return ntohs(address.sin_port);
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

}  // namespace

int run_launch(const std::vector<std::string>& args) {
  int nproc = 0;
  int port = 0;
  int grace = 30;
  std::vector<std::string> command;
  po::options_description desc("options");
  desc.add_options()
      ("nproc", po::value(&nproc)->required(), "number of ranks to start (>= 1)")
      ("master-port", po::value(&port)->default_value(0),
       "rendezvous port on 127.0.0.1 (0 = a free one)")
      ("grace", po::value(&grace)->default_value(grace),
       "seconds the other ranks get to end on their own after one fails, before SIGKILL")
      ("command", po::value(&command)->multitoken(), "the lithe verb and its arguments");
  po::positional_options_description positional;
  positional.add("command", -1);
  if (!parse_verb_args("launch", "--nproc N [--master-port P] -- <verb> <args>", args, desc,
                       &positional)) {
    return 0;
  }
  LITHE_CHECK(nproc >= 1, sdk::Errc::kInvalidConfig, "--nproc must be >= 1, got ", nproc);
  LITHE_CHECK(port >= 0 && port <= 65535, sdk::Errc::kInvalidConfig,
              "--master-port must be in 0..65535, got ", port);
  LITHE_CHECK(grace >= 0, sdk::Errc::kInvalidConfig, "--grace must be >= 0, got ", grace);
  LITHE_CHECK(!command.empty(), sdk::Errc::kInvalidConfig,
              "give the verb to run after --, e.g. lithe launch --nproc 2 -- train ...");
  LITHE_CHECK(command[0] == "train" || command[0] == "compress", sdk::Errc::kInvalidConfig,
              "lithe launch runs the data-parallel verbs train and compress, got '", command[0],
              "'");
  if (port == 0) {
    port = free_port();
  }
  char self[4096];
  const ssize_t length = ::readlink("/proc/self/exe", self, sizeof self - 1);
  LITHE_CHECK(length > 0, sdk::Errc::kIo, "cannot find the lithe executable: ",
              std::strerror(errno));
  self[length] = '\0';

  // Everything a child needs is built before forking (a child only calls exec-safe functions).
  std::vector<char*> argv = {self};
  for (std::string& part : command) {
    argv.push_back(part.data());
  }
  argv.push_back(nullptr);
  static const std::set<std::string> replaced = {"RANK",        "LOCAL_RANK", "WORLD_SIZE",
                                                 "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
  std::vector<std::vector<std::string>> environments(static_cast<size_t>(nproc));
  for (int rank = 0; rank < nproc; ++rank) {
    std::vector<std::string>& env = environments[static_cast<size_t>(rank)];
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      if (replaced.count(entry.substr(0, entry.find('='))) == 0) {
        env.push_back(entry);
      }
    }
    env.push_back("RANK=" + std::to_string(rank));
    env.push_back("LOCAL_RANK=" + std::to_string(rank));
    env.push_back("WORLD_SIZE=" + std::to_string(nproc));
    env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(nproc));
    env.push_back("MASTER_ADDR=127.0.0.1");
    env.push_back("MASTER_PORT=" + std::to_string(port));
  }
  // Signals to launch (Ctrl-C, a CI cancel, kill) reach the ranks; a rank whose launch dies
  // is sent SIGTERM by the kernel.
  for (const int signal : {SIGINT, SIGTERM, SIGHUP}) {
    std::signal(signal, remember_signal);
  }
  const pid_t launcher = ::getpid();
  std::map<pid_t, int> ranks;  // pid -> rank
  for (int rank = 0; rank < nproc; ++rank) {
    std::vector<char*> envp;
    for (std::string& entry : environments[static_cast<size_t>(rank)]) {
      envp.push_back(entry.data());
    }
    envp.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::fprintf(stderr, "lithe launch: cannot start rank %d: %s\n", rank,
                   std::strerror(errno));
      for (const auto& [child, started] : ranks) {
        ::kill(child, SIGKILL);
        ::waitpid(child, nullptr, 0);
      }
      return 1;
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != launcher) {
        ::_exit(1);  // launch died before the line above took effect
      }
      ::execve(self, argv.data(), envp.data());
      ::_exit(127);
    }
    ranks[pid] = rank;
  }

  int result = 0;
  std::string first_failure;
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (!ranks.empty()) {
    if (g_signal != 0) {
      const int signal = g_signal;
      g_signal = 0;
      std::fprintf(stderr, "lithe launch: got signal %d (%s): passing it to the ranks\n", signal,
                   strsignal(signal));
      for (const auto& [child, rank] : ranks) {
        ::kill(child, signal);
      }
      if (first_failure.empty()) {
        first_failure = std::string("launch got signal ") + strsignal(signal);
        result = 128 + signal;
        deadline = std::chrono::steady_clock::now() + std::chrono::seconds(grace);
      }
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0 && ranks.count(pid) != 0) {
      const int rank = ranks[pid];
      ranks.erase(pid);
      const bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
      if (failed && first_failure.empty()) {
        first_failure = "rank " + std::to_string(rank) + " " + describe_status(status);
        std::fprintf(stderr, "lithe launch: %s; the other ranks get %d s to end\n",
                     first_failure.c_str(), grace);
        result = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        deadline = std::chrono::steady_clock::now() + std::chrono::seconds(grace);
      } else if (failed) {
        std::fprintf(stderr, "lithe launch: rank %d %s\n", rank, describe_status(status).c_str());
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (const auto& [child, rank] : ranks) {
        std::fprintf(stderr, "lithe launch: rank %d still running %d s after %s: killing it\n",
                     rank, grace, first_failure.c_str());
        ::kill(child, SIGKILL);
      }
      deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!first_failure.empty()) {
    std::fprintf(stderr, "lithe launch: failed: %s\n", first_failure.c_str());
  }
  return result;
}

}  // namespace lithe::cli
