// Data-parallel runs end to end, with the real `lithe` executable on loopback (Gloo): two ranks
// of batch 32 train exactly like one process of batch 64 on the same data order; masks (AGP,
// L1 filter, APoZ) and QAT's calibration come out as one process computes them; a rank that is
// killed mid-epoch ends the other with an error naming it within a bound, and nothing is
// written; a rendezvous that cannot complete times out with a count of who came.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <torch/script.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "lithe/host/train/dataset.h"
#include "lithe/host/io/mask_file.h"
#include "support/cli_run.h"
#include "support/paths.h"

namespace lithe::test {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// A rank started by hand (as torchrun would), its output going to a file.
struct Rank {
  pid_t pid = -1;
  fs::path log;
};

Rank start_rank(int rank, int world, int port, const std::vector<std::string>& args,
                const fs::path& log, const std::map<std::string, std::string>& env = {}) {
  Rank r;
  r.log = log;
  r.pid = ::fork();
  if (r.pid == 0) {
    ::setenv("RANK", std::to_string(rank).c_str(), 1);
    ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
    ::setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    for (const auto& [key, value] : env) {
      ::setenv(key.c_str(), value.c_str(), 1);
    }
    const std::string out = log.string();
    if (std::freopen(out.c_str(), "w", stdout) == nullptr ||
        ::dup2(::fileno(stdout), STDERR_FILENO) < 0) {
      ::_exit(126);
    }
    std::vector<std::string> all = {lithe_cli().string()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : all) {
      argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return r;
}

// Waits up to `limit` for the rank; returns its wait status, or -1 on timeout (then kills it).
int wait_rank(const Rank& r, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    int status = 0;
    if (::waitpid(r.pid, &status, WNOHANG) == r.pid) {
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(r.pid, SIGKILL);
  ::waitpid(r.pid, nullptr, 0);
  return -1;
}

// A port the kernel reports free now (the rendezvous binds it a moment later).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const bool ok = fd >= 0 &&
                  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  if (fd >= 0) {
    ::close(fd);
  }
  EXPECT_TRUE(ok) << "no free port";
  return ntohs(address.sin_port);
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::string word;
  for (const char c : text) {
    if (c == ' ') {
      if (!word.empty()) out.push_back(word);
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) out.push_back(word);
  return out;
}

class DistributedCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::error_code ec;
    if (!fs::is_directory(host::kDefaultDataDir, ec)) {
      return;
    }
    dir_ = new fs::path(scratch_dir("distributed_data_" + std::to_string(::getpid())));
    // 611 samples: 9 steps of 64, then one of 35 (18 and 17): an uneven last step too.
    host::save_tensor_file(
        host::first_samples(host::load_mnist_directory(host::kDefaultDataDir, "train"), 611),
        *dir_ / "train.pt");
  }
  void SetUp() override {
    if (dir_ == nullptr) {
      GTEST_SKIP() << "dataset-fashion-mnist is not installed";
    }
  }
  static std::string data() { return " --data " + (*dir_ / "train.pt").string(); }

  // Runs `args` once with batch 64 and once as two ranks of batch 32; both must succeed.
  static void run_both(const std::string& args, const std::string& single_out,
                       const std::string& dist_out) {
    const CliRun single = run_lithe(args + " --batch-size 64 --threads 1" + single_out);
    ASSERT_EQ(single.exit_code, 0) << single.out;
    const CliRun dist = run_lithe("launch --nproc 2 -- " + args + " --batch-size 32" + dist_out);
    ASSERT_EQ(dist.exit_code, 0) << dist.out;
  }
  static inline fs::path* dir_ = nullptr;
};

double max_weight_difference(const fs::path& a, const fs::path& b) {
  const torch::jit::Module ma = torch::jit::load(a.string());
  const torch::jit::Module mb = torch::jit::load(b.string());
  double worst = 0;
  const auto pb = mb.named_parameters();
  for (const auto& p : ma.named_parameters()) {
    for (const auto& q : pb) {
      if (q.name == p.name) {
        worst = std::max(worst, (p.value - q.value).abs().max().item<double>());
      }
    }
  }
  return worst;
}

TEST_F(DistributedCliTest, TwoRanksOfBatch32TrainLikeOneProcessOfBatch64) {
  const fs::path out = scratch_dir("distributed_train");
  const std::string args = "train --model " + lenet_model().string() + data() + " --epochs 2";
  run_both(args, " --output " + (out / "single.pt").string(),
           " --output " + (out / "dist.pt").string());
  const double difference = max_weight_difference(out / "single.pt", out / "dist.pt");
  EXPECT_LE(difference, 1e-5) << "20 steps";
  EXPECT_GT(max_weight_difference(out / "single.pt", lenet_model()), 1e-3) << "it trained";
}

TEST_F(DistributedCliTest, MasksComeOutAsOneProcessComputesThem) {
  const fs::path out = scratch_dir("distributed_masks");
  const struct {
    const char* name;
    std::string config;
    std::string extra;
  } cases[] = {
      {"agp", (source_dir() / "samples/configs/agp.json").string(), " --epochs 3"},
      {"l1_filter", (source_dir() / "samples/configs/l1_filter.json").string(), " --epochs 1"},
      {"apoz", (source_dir() / "samples/configs/apoz.json").string(), " --epochs 1"},
  };
  for (const auto& c : cases) {
    const std::string args = "compress --model " + lenet_model().string() + " --config " +
                             c.config + data() + c.extra;
    const fs::path single = out / (std::string(c.name) + "_single.pth");
    const fs::path dist = out / (std::string(c.name) + "_dist.pth");
    run_both(args,
             " --output " + (out / "s.pt").string() + " --masks " + single.string(),
             " --output " + (out / "d.pt").string() + " --masks " + dist.string());
    const host::NamedMasks a = host::load_masks(single);
    const host::NamedMasks b = host::load_masks(dist);
    ASSERT_EQ(a.size(), b.size()) << c.name;
    int64_t pruned = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, b[i].first);
      EXPECT_TRUE(a[i].second.weight.equal(b[i].second.weight)) << c.name << " " << a[i].first;
      pruned += a[i].second.weight.eq(0).sum().item<int64_t>();
    }
    EXPECT_GT(pruned, 0) << c.name << " pruned something";
    EXPECT_LE(max_weight_difference(out / "s.pt", out / "d.pt"), 1e-5) << c.name;
  }
}

TEST_F(DistributedCliTest, QatScalesComeOutAsOneProcessComputesThem) {
  const fs::path out = scratch_dir("distributed_qat");
  const std::string args = "compress --model " + lenet_model().string() + " --config " +
                           (source_dir() / "samples/configs/qat.json").string() + data() +
                           " --epochs 1";
  run_both(args,
           " --output " + (out / "s.pt").string() + " --calibration " +
               (out / "s.json").string(),
           " --output " + (out / "d.pt").string() + " --calibration " +
               (out / "d.json").string());
  const nlohmann::json a = nlohmann::json::parse(read_text(out / "s.json"));
  const nlohmann::json b = nlohmann::json::parse(read_text(out / "d.json"));
  int compared = 0;
  for (const auto& [layer, types] : a["layers"].items()) {
    for (const char* type : {"weight", "output"}) {
      for (const char* key : {"scale", "zero_point", "tracked_min", "tracked_max"}) {
        if (!types[type].contains(key)) {
          continue;
        }
        const double x = types[type][key].get<double>();
        const double y = b["layers"][layer][type][key].get<double>();
        EXPECT_NEAR(x, y, 1e-5 * std::max(1.0, std::abs(x))) << layer << " " << type << " " << key;
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 5 * 2 + 5 * 4);
}

TEST_F(DistributedCliTest, AKilledRankEndsTheOtherWithAnErrorWithinTenSecondsAndNothingIsWritten) {
  const fs::path out = scratch_dir("distributed_kill");
  const int port = free_port();
  // The whole Fashion-MNIST training set: an epoch takes seconds, so the kill lands mid-epoch
  // (after loading the data and the rendezvous, about a second), well before the 5 epochs end.
  const std::vector<std::string> args =
      split("train --model " + lenet_model().string() + " --epochs 5 --batch-size 32 --output " +
            (out / "never.pt").string());
  const std::map<std::string, std::string> env = {{"LITHE_DIST_TIMEOUT", "20"}};
  const Rank r0 = start_rank(0, 2, port, args, out / "rank0.log", env);
  const Rank r1 = start_rank(1, 2, port, args, out / "rank1.log", env);
  std::this_thread::sleep_for(std::chrono::seconds(4));
  ASSERT_EQ(::kill(r1.pid, SIGKILL), 0);
  const auto killed = Clock::now();
  const int status = wait_rank(r0, std::chrono::seconds(60));
  const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  ::waitpid(r1.pid, nullptr, 0);
  ASSERT_NE(status, -1) << "rank 0 still running a minute after rank 1 was killed";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  EXPECT_LT(seconds, 10.0);
  EXPECT_THAT(read_text(r0.log), AllOf(HasSubstr("rank 0 of 2"), HasSubstr("exchanging"),
                                       HasSubstr("another rank ended")))
      << read_text(r0.log);
  for (const auto& entry : fs::directory_iterator(out)) {
    EXPECT_EQ(entry.path().extension(), ".log") << "left behind: " << entry.path();
  }
}

TEST_F(DistributedCliTest, ARendezvousWithAMissingRankTimesOutSayingWhoCame) {
  const fs::path out = scratch_dir("distributed_alone");
  const auto start = Clock::now();
  const Rank r0 = start_rank(
      0, 2, free_port(),
      split("train --model " + lenet_model().string() + data() + " --epochs 1 --output " +
            (out / "never.pt").string()),
      out / "rank0.log", {{"LITHE_DIST_TIMEOUT", "2"}});
  const int status = wait_rank(r0, std::chrono::seconds(30));
  ASSERT_NE(status, -1);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
  EXPECT_THAT(read_text(r0.log), AllOf(HasSubstr("rank 0 of 2"), HasSubstr("timed out after 2 s"),
                                       HasSubstr("1 of 2 ranks arrived")))
      << read_text(r0.log);
  EXPECT_FALSE(fs::exists(out / "never.pt"));
}

TEST_F(DistributedCliTest, BadRankVariablesAndLaunchArgumentsAreRefused) {
  const fs::path out = scratch_dir("distributed_bad");
  const std::string train = "train --model " + lenet_model().string() + data() +
                            " --epochs 1 --output " + (out / "never.pt").string();
  CliRun run = run_lithe("launch --nproc 0 -- " + train);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.out, HasSubstr("--nproc must be >= 1, got 0"));
  run = run_lithe("launch --nproc 2 -- eval --model " + lenet_model().string());
  EXPECT_THAT(run.out, HasSubstr("runs the data-parallel verbs train and compress, got 'eval'"));
  run = run_lithe("launch --nproc 2 -- train --model " + lenet_model().string() +
                  " --data /nonexistent --epochs 1 --output " + (out / "never.pt").string());
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("/nonexistent"));
  EXPECT_THAT(run.out, HasSubstr("lithe launch: failed: rank"));
  const CliRun no_rank = run_lithe_env("WORLD_SIZE=2", train);
  EXPECT_EQ(no_rank.exit_code, 1);
  EXPECT_THAT(no_rank.out, HasSubstr("WORLD_SIZE is 2 but RANK is not set"));
  const CliRun bad_rank = run_lithe_env("WORLD_SIZE=2 RANK=2", train);
  EXPECT_THAT(bad_rank.out, HasSubstr("RANK must be in [0, WORLD_SIZE) = [0, 2), got 2"));
  write_text(out / "old_store", "left by a crash");
  const struct {
    std::string env;
    std::string message;
  } bad_env[] = {
      {"WORLD_SIZE=two", "environment variable WORLD_SIZE must be an integer, got 'two'"},
      {"WORLD_SIZE=2 RANK=0 MASTER_PORT=70000", "MASTER_PORT must be in 1..65535, got 70000"},
      {"WORLD_SIZE=2 RANK=0 LITHE_DIST_TIMEOUT=0",
       "LITHE_DIST_TIMEOUT must be a number of seconds > 0, got 0"},
      {"WORLD_SIZE=2 RANK=0 LITHE_DIST_FILE_STORE=" + (out / "old_store").string(),
       "the store file '" + (out / "old_store").string() + "' already exists"},
  };
  for (const auto& c : bad_env) {
    const CliRun bad = run_lithe_env(c.env, train);
    EXPECT_EQ(bad.exit_code, 1) << c.env;
    EXPECT_THAT(bad.out, HasSubstr(c.message)) << c.env;
  }
  run = run_lithe("launch --nproc 2 --master-port 70000 -- " + train);
  EXPECT_THAT(run.out, HasSubstr("--master-port must be in 0..65535, got 70000"));
  run = run_lithe("launch --nproc 2");
  EXPECT_THAT(run.out, HasSubstr("give the verb to run after --"));
  EXPECT_FALSE(fs::exists(out / "never.pt"));
}

}  // namespace
}  // namespace lithe::test
