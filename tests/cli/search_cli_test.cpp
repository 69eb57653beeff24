// End-to-end tests of `lithe search` on a LeNet trained on Fashion-MNIST: the best model is
// written sped up and fits the budget as `lithe flops` counts it, with the accuracy `lithe
// eval` measures; the report draws every trial; several pruners can be searched at once; with
// --quantize the best model is also quantized and converted to int8 in the same run; a search
// killed with SIGKILL mid-trial and started again continues from its state file to the same
// best model, tensor for tensor; a state of another search, a floor above the best and hostile
// arguments fail in one line and write nothing.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/script.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lithe/host/train/dataset.h"
#include "support/cli_run.h"
#include "support/fashion_data.h"
#include "support/paths.h"

namespace lithe::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class SearchCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::error_code ec;
    if (!fs::is_directory(host::kDefaultDataDir, ec)) {
      return;
    }
    dir_ = new fs::path(scratch_dir("cli_search_data_" + std::to_string(::getpid())));
    write_fashion_files(*dir_, 2000, 500);
    const CliRun trained = run_lithe("train --model " + lenet_model().string() +
                                     " --epochs 2 --lr 0.05 --threads 2" + data_flags() +
                                     " --output " + (*dir_ / "trained.pt").string());
    if (trained.exit_code != 0) {
      train_error_ = new std::string(trained.out);
    }
  }
  void SetUp() override {
    if (dir_ == nullptr) {
      GTEST_SKIP() << "dataset-fashion-mnist is not installed";
    }
    ASSERT_EQ(train_error_, nullptr) << *train_error_;
  }
  static std::string data_flags() {
    return " --data " + (*dir_ / "train.pt").string() + " --test-data " +
           (*dir_ / "test.pt").string();
  }
  // The search's arguments without --output and --state.
  static std::string search_args(const std::string& extra,
                                 const std::string& algorithm = "l1_filter") {
    return "search --model " + (*dir_ / "trained.pt").string() + " --algorithm " + algorithm +
           " --threads 2 --latency-runs 3 --bisection-steps 8" + data_flags() + " " + extra;
  }
  static nlohmann::json json_of(const CliRun& run) {
    return nlohmann::json::parse(run.out.substr(run.out.find("\n{") + 1));
  }
  static inline fs::path* dir_ = nullptr;
  static inline std::string* train_error_ = nullptr;
};

TEST_F(SearchCliTest, WritesTheSpedUpBestModelWithinTheFlopsBudgetAndItsReport) {
  const fs::path out = scratch_dir("cli_search_flops");
  const CliRun run = run_lithe(search_args("--flops-budget 0.5x --trials 5 --json --report " +
                                           (out / "r.html").string() + " --output " +
                                           (out / "best.pt").string()));
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("search: [5/5] trial 4 (annealing)"));  // progress on stderr
  const nlohmann::json result = json_of(run);
  EXPECT_EQ(result["layers"], nlohmann::json({"conv1", "conv2"}));
  const double dense_accuracy = result["dense"]["accuracy"].get<double>();
  EXPECT_GT(dense_accuracy, 0.5) << "the trained LeNet";
  const nlohmann::json& best = result["best"];
  EXPECT_LE(best["use"]["flops_ratio"].get<double>(), 0.5);
  // Counted afresh on the written file: the model is sped up, not merely masked.
  const CliRun flops = run_lithe("flops --json --input-shape 1,1,28,28 --model " +
                                 (out / "best.pt").string());
  ASSERT_EQ(flops.exit_code, 0) << flops.out;
  const nlohmann::json counted = nlohmann::json::parse(flops.out);
  EXPECT_EQ(counted["total_flops"], best["use"]["flops"]);
  EXPECT_LE(counted["total_flops"].get<double>(),
            0.5 * result["dense"]["flops"].get<double>());
  // The accuracy it reports is the written model's on the test data.
  const CliRun eval = run_lithe("eval --json --threads 2 --model " + (out / "best.pt").string() +
                                " --data " + (*dir_ / "test.pt").string());
  ASSERT_EQ(eval.exit_code, 0) << eval.out;
  EXPECT_EQ(nlohmann::json::parse(eval.out.substr(eval.out.find('{')))["accuracy"],
            best["accuracy"]);
  // Best: no feasible trial is more accurate; trial 0 is the uniform baseline.
  int feasible = 0;
  for (const nlohmann::json& t : result["trials"]) {
    if (t["feasible"].get<bool>()) {
      ++feasible;
      EXPECT_LE(t["use"]["flops_ratio"].get<double>(), 0.5) << t.dump();
      EXPECT_LE(t["accuracy"].get<double>(), best["trial_accuracy"].get<double>());
    }
  }
  EXPECT_EQ(result["trials"][0]["origin"], "uniform");
  // The report: one point per evaluated trial in each chart, the chosen one drawn larger.
  const std::string html = read_text(out / "r.html");
  size_t points = 0;
  for (size_t at = html.find("data-series=\"trials\""); at != std::string::npos;
       at = html.find("data-series=\"trials\"", at + 1)) {
    ++points;
  }
  EXPECT_EQ(points, 2U * feasible);
  EXPECT_THAT(html, HasSubstr("trial " + std::to_string(best["trial"].get<int>()) +
                              " (" + result["trials"][best["trial"].get<int>()]["origin"]
                                         .get<std::string>() + "), chosen"));
  // The state file sits beside the output by default.
  EXPECT_TRUE(fs::is_regular_file(out / "best.pt.search-state.json"));

}

// --quantize: the best model is quantized (post-training, calibrated on the search's data) and
// converted to int8 in the same run, at nearly the float model's accuracy; the int8 model loads
// in plain libtorch.
TEST_F(SearchCliTest, TheBestModelIsQuantizedAndConvertedToInt8InTheSameRun) {
  const fs::path out = scratch_dir("cli_search_int8");
  write_text(out / "ptq.json", R"({"algorithm": "ptq", "config_list": [
      {"quant_types": ["weight", "output"], "quant_bits": 8,
       "op_types": ["Conv2d", "Linear"]}]})");
  const CliRun run = run_lithe(search_args(
      "--flops-budget 0.5x --trials 2 --eval-samples 200 --json --quantize " +
      (out / "ptq.json").string() + " --quantize-calibration-batches 4 --convert " +
      (out / "int8.pt").string() + " --output " + (out / "best.pt").string()));
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const nlohmann::json result = json_of(run);
  const nlohmann::json& quantized = result["quantized"];
  EXPECT_EQ(quantized["algorithm"], "ptq");
  EXPECT_EQ(quantized["output"], (out / "best.quantized.pt").string());
  // The job started from the best model: its accuracy before quantizing is the best's.
  EXPECT_EQ(quantized["accuracy_before"]["accuracy"], result["best"]["accuracy"]);
  EXPECT_GT(quantized["int8"]["int8_layers"].get<int>(), 0);
  EXPECT_NEAR(quantized["int8"]["accuracy"]["accuracy"].get<double>(),
              result["best"]["accuracy"].get<double>(), 0.03);
  EXPECT_TRUE(fs::is_regular_file(out / "best.pt"));
  EXPECT_TRUE(fs::is_regular_file(out / "best.quantized.pt"));
  EXPECT_TRUE(fs::is_regular_file(out / "best.quantized.calibration.json"));
  // Built for the engine the conversion chose (x86 for ptq's asymmetric weights).
  const std::string engine = quantized["int8"]["engine"].get<std::string>();
  at::globalContext().setQEngine(engine == "qnnpack" ? at::QEngine::QNNPACK
                                 : engine == "x86"   ? at::QEngine::X86
                                 : engine == "fbgemm" ? at::QEngine::FBGEMM
                                                      : at::QEngine::ONEDNN);
  torch::jit::Module int8 = torch::jit::load((out / "int8.pt").string());
  const at::Tensor logits = int8.forward({torch::zeros({2, 1, 28, 28})}).toTensor();
  EXPECT_EQ(logits.sizes(), (c10::IntArrayRef{2, 10}));
  // No temporary file is left beside the outputs.
  for (const fs::directory_entry& e : fs::directory_iterator(out)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
}

// --algorithm a,b: each pruner's uniform baseline, then trials that name their pruner; the best
// is written with its own.
TEST_F(SearchCliTest, SeveralPrunersAreTriedAndEachTrialNamesItsOwn) {
  const fs::path out = scratch_dir("cli_search_pruners");
  const CliRun run = run_lithe(search_args(
      "--flops-budget 0.5x --trials 4 --eval-samples 200 --json --report " +
          (out / "r.html").string() + " --output " + (out / "best.pt").string(),
      "l1_filter,l2_filter"));
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("trial 1 (uniform, l2_filter)"));
  const nlohmann::json result = json_of(run);
  EXPECT_EQ(result["algorithm"], "l1_filter,l2_filter");
  EXPECT_EQ(result["trials"][0]["algorithm"], "l1_filter");
  EXPECT_EQ(result["trials"][1]["algorithm"], "l2_filter");
  EXPECT_THAT(read_text(out / "r.html"), HasSubstr("<td>uniform, l2_filter</td>"));
  const CliRun twice = run_lithe(search_args(
      "--flops-budget 0.5x --output " + (out / "b2.pt").string(), "l1_filter,l1_filter"));
  EXPECT_NE(twice.exit_code, 0);
  EXPECT_THAT(twice.out, HasSubstr("--algorithm: 'l1_filter' is named twice"));
  EXPECT_FALSE(fs::exists(out / "b2.pt"));
  const CliRun none = run_lithe(search_args(
      "--flops-budget 0.5x --output " + (out / "b2.pt").string(), ","));
  EXPECT_NE(none.exit_code, 0);
  EXPECT_THAT(none.out, HasSubstr("--algorithm: no pruner in ','"));
  EXPECT_FALSE(fs::exists(out / "b2.pt"));
}

// AutoCompress: rounds of search, ADMM and speedup to the budget. The state keeps each round's
// model beside it; a run started again reads them instead of running the rounds again, and
// refuses a round model that is not the one the state recorded.
TEST_F(SearchCliTest, AutoCompressShrinksInRoundsAndResumesFromItsRoundModels) {
  const fs::path out = scratch_dir("cli_search_auto_compress");
  const std::string args = search_args(
      "--flops-budget 0.5x --strategy auto_compress --rounds 2 --trials 2 --eval-samples 200 "
      "--round-algorithm admm --round-options "
      "'{\"base_algo\": \"l1\", \"num_iterations\": 2, \"training_epochs\": 1}' --json");
  const CliRun run = run_lithe(args + " --report " + (out / "r.html").string() + " --output " +
                               (out / "best.pt").string());
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("round 1/2 searches 2 trials for flops "));
  EXPECT_THAT(run.out, HasSubstr("round 2/2 done (trained, sped up)"));
  const nlohmann::json result = json_of(run);
  ASSERT_EQ(result["rounds"].size(), 2U);
  EXPECT_LE(result["rounds"][0]["use"]["flops_ratio"].get<double>(), std::sqrt(0.5));
  EXPECT_LE(result["best"]["use"]["flops_ratio"].get<double>(), 0.5);
  EXPECT_LT(result["rounds"][1]["use"]["flops"].get<int64_t>(),
            result["rounds"][0]["use"]["flops"].get<int64_t>());
  const CliRun flops = run_lithe("flops --json --input-shape 1,1,28,28 --model " +
                                 (out / "best.pt").string());
  ASSERT_EQ(flops.exit_code, 0) << flops.out;
  EXPECT_EQ(nlohmann::json::parse(flops.out)["total_flops"], result["best"]["use"]["flops"]);
  const std::string state = (out / "best.pt").string() + ".search-state.json";
  EXPECT_TRUE(fs::exists(state + ".round-1.pt"));
  EXPECT_TRUE(fs::exists(state + ".round-2.pt"));
  EXPECT_THAT(read_text(out / "r.html"), HasSubstr("<h2>Round 2</h2>"));

  // Started again: both rounds come from the state, the model is the same tensor for tensor.
  const CliRun again = run_lithe(args + " --output " + (out / "again.pt").string() +
                                 " --state " + state);
  ASSERT_EQ(again.exit_code, 0) << again.out;
  EXPECT_THAT(again.out, HasSubstr("resuming auto_compress from " + state + ": 2 of 2 rounds"));
  EXPECT_THAT(again.out, ::testing::Not(HasSubstr("round 1/2 searches")));
  EXPECT_EQ(json_of(again)["rounds"], result["rounds"]);
  auto a = torch::jit::load((out / "best.pt").string());
  auto b = torch::jit::load((out / "again.pt").string());
  const auto pa = a.named_parameters();
  auto pb = b.named_parameters().begin();
  for (const auto& p : pa) {
    EXPECT_TRUE(at::equal(p.value, (*pb).value)) << p.name;
    ++pb;
  }

  // A round model replaced: refused by its digest, nothing written.
  fs::copy_file(state + ".round-1.pt", state + ".round-2.pt",
                fs::copy_options::overwrite_existing);
  const std::string before = read_text(out / "again.pt");
  const CliRun tampered = run_lithe(args + " --output " + (out / "again.pt").string() +
                                    " --state " + state);
  EXPECT_NE(tampered.exit_code, 0);
  EXPECT_THAT(tampered.out, HasSubstr(state + ".round-2.pt: the model of round 2 has digest"));
  EXPECT_EQ(std::count(tampered.out.begin(), tampered.out.end(), '\n'), 1) << tampered.out;
  EXPECT_EQ(read_text(out / "again.pt"), before);
}

// A sensitivity table from `lithe sensitivity --csv` seeds trial 1 with what each layer
// tolerates.
TEST_F(SearchCliTest, ASensitivityTableSeedsTrialOne) {
  const fs::path out = scratch_dir("cli_search_sensitivity");
  const CliRun table = run_lithe("sensitivity --threads 2 --algorithm l1_filter --model " +
                                 (*dir_ / "trained.pt").string() + " --test-data " +
                                 (*dir_ / "test.pt").string() + " --sparsities 0.2,0.4,0.6,0.8" +
                                 " --csv " + (out / "s.csv").string());
  ASSERT_EQ(table.exit_code, 0) << table.out;
  const CliRun run = run_lithe(search_args("--flops-budget 0.5x --trials 3 --json --sensitivity " +
                                           (out / "s.csv").string() + " --output " +
                                           (out / "best.pt").string()));
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_THAT(run.out, HasSubstr("search: tolerated within 0.05 of "));
  const nlohmann::json result = json_of(run);
  EXPECT_EQ(result["trials"][1]["origin"], "sensitivity");
  EXPECT_EQ(result["trials"][2]["origin"], "annealing");
  // A table without the searched layer, and a threshold without a table.
  write_text(out / "other.csv", "layername,0.5\nfc1,0.8\n");
  CliRun bad = run_lithe(search_args("--flops-budget 0.5x --trials 2 --sensitivity " +
                                     (out / "other.csv").string() + " --output " +
                                     (out / "x.pt").string()));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.out, HasSubstr("other.csv: no row for the searched layer 'conv1'"));
  bad = run_lithe(search_args("--flops-budget 0.5x --sensitivity-threshold 0.1 --output " +
                              (out / "x.pt").string()));
  EXPECT_THAT(bad.out, HasSubstr("--sensitivity-threshold has no effect without --sensitivity"));
  EXPECT_FALSE(fs::exists(out / "x.pt"));
}

// Starts `lithe args...` with its output in `log`; returns the child's pid.
pid_t start_lithe(const std::vector<std::string>& args, const fs::path& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv;
    const std::string program = lithe_cli().string();
    argv.push_back(const_cast<char*>(program.c_str()));
    for (const std::string& a : args) {
      argv.push_back(const_cast<char*>(a.c_str()));
    }
    argv.push_back(nullptr);
    ::execv(program.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

// Whether two TorchScript files hold the same parameters and buffers, bit for bit.
bool same_tensors(const fs::path& a, const fs::path& b) {
  const torch::jit::Module x = torch::jit::load(a.string());
  const torch::jit::Module y = torch::jit::load(b.string());
  std::vector<std::pair<std::string, at::Tensor>> tx;
  std::vector<std::pair<std::string, at::Tensor>> ty;
  for (const auto& p : x.named_parameters()) tx.emplace_back(p.name, p.value);
  for (const auto& p : x.named_buffers()) tx.emplace_back(p.name, p.value);
  for (const auto& p : y.named_parameters()) ty.emplace_back(p.name, p.value);
  for (const auto& p : y.named_buffers()) ty.emplace_back(p.name, p.value);
  if (tx.size() != ty.size() || tx.empty()) {
    return false;
  }
  for (size_t i = 0; i < tx.size(); ++i) {
    if (tx[i].first != ty[i].first || !tx[i].second.equal(ty[i].second)) {
      return false;
    }
  }
  return true;
}

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) {
    out.push_back(w);
  }
  return out;
}

TEST_F(SearchCliTest, KilledMidTrialItResumesFromItsStateToTheSameBestModel) {
  const fs::path out = scratch_dir("cli_search_resume");
  // One epoch of fine-tuning per trial: trials long enough to be killed inside one.
  const std::string args =
      search_args("--flops-budget 0.5x --trials 5 --trial-epochs 1 --json --batch-size 64");
  const CliRun whole = run_lithe(args + " --output " + (out / "whole.pt").string());
  ASSERT_EQ(whole.exit_code, 0) << whole.out;

  const fs::path state = out / "killed.json";
  const std::string killed_args =
      args + " --output " + (out / "killed.pt").string() + " --state " + state.string();
  const pid_t pid = start_lithe(words(killed_args), out / "killed.log");
  ASSERT_GT(pid, 0);
  size_t done_when_killed = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (std::chrono::steady_clock::now() < deadline) {
    const nlohmann::json doc = nlohmann::json::parse(read_text(state), nullptr, false);
    if (!doc.is_discarded() && doc.contains("trials") && doc["trials"].size() >= 2) {
      ::kill(pid, SIGKILL);
      done_when_killed = doc["trials"].size();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the search ended before it was killed: "
                                   << read_text(out / "killed.log");
  ASSERT_GE(done_when_killed, 2U);
  ASSERT_LT(done_when_killed, 5U);
  EXPECT_FALSE(fs::exists(out / "killed.pt"));
  // The state file is whole (written atomically) and holds the finished trials.
  const nlohmann::json left = nlohmann::json::parse(read_text(state));
  EXPECT_GE(left["trials"].size(), done_when_killed);

  const CliRun resumed = run_lithe(killed_args);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  EXPECT_THAT(resumed.out, HasSubstr("search: resuming from " + state.string() + ": " +
                                     std::to_string(left["trials"].size()) + " trials done"));
  const nlohmann::json a = json_of(whole);
  const nlohmann::json b = json_of(resumed);
  EXPECT_EQ(b["best"]["trial"], a["best"]["trial"]);
  EXPECT_EQ(b["best"]["sparsities"], a["best"]["sparsities"]);
  EXPECT_EQ(b["best"]["accuracy"], a["best"]["accuracy"]);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(b["trials"][i]["sparsities"], a["trials"][i]["sparsities"]) << i;
    EXPECT_EQ(b["trials"][i]["accuracy"], a["trials"][i]["accuracy"]) << i;
  }
  // The same tensors (the archives differ only in TorchScript's per-process class names).
  EXPECT_TRUE(same_tensors(out / "killed.pt", out / "whole.pt"));
  EXPECT_GT(a["best"]["accuracy"].get<double>(), 0.5) << "fine-tuned trials of a trained LeNet";
}

// A latency budget: every candidate is timed in a fresh `lithe latency` process, and `lithe
// latency` times the written model against the dense one. (How much faster it is, is the
// benchmark's to say: a timed assertion fails whenever another job shares the machine.)
TEST_F(SearchCliTest, ALatencyBudgetIsTimedInFreshProcesses) {
  const fs::path out = scratch_dir("cli_search_latency");
  // A temporary directory of its own; in it, the folder a killed search left (named after a
  // process that cannot exist) and one of a live process (this test's).
  const fs::path tmp = out / "tmp";
  fs::create_directories(tmp / "lithe-search-999999999-abcdef");
  const fs::path live = tmp / ("lithe-search-" + std::to_string(::getpid()) + "-abcdef");
  fs::create_directories(live);
  const CliRun run = run_lithe_env("TMPDIR=" + tmp.string(),
                                   search_args("--latency-budget 0.8x --input-shape 64,1,28,28 "
                                               "--trials 2 --json --output " +
                                               (out / "best.pt").string()));
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const nlohmann::json result = json_of(run);
  const nlohmann::json& best = result["best"];
  EXPECT_LE(best["use"]["latency_ratio"].get<double>(), 0.8);
  EXPECT_LT(best["use"]["flops_ratio"].get<double>(), 1.0);
  // The search's own folder is gone, so is the abandoned one; the live process's stays.
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(tmp)) {
    left.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(left, std::vector<std::string>{live.filename().string()});
  const CliRun timed = run_lithe("latency --json --threads 2 --runs 40 --input-shape 64,1,28,28 "
                                 "--baseline " + (*dir_ / "trained.pt").string() + " --model " +
                                 (out / "best.pt").string());
  ASSERT_EQ(timed.exit_code, 0) << timed.out;
  const nlohmann::json medians = nlohmann::json::parse(timed.out);
  EXPECT_EQ(medians["runs"], 40);
  EXPECT_EQ(medians["models"][0]["model"], (out / "best.pt").string());
  EXPECT_GT(medians["models"][0]["ratio"].get<double>(), 0) << timed.out;
  EXPECT_GT(medians["baseline"]["ms"].get<double>(), 0);

  // Hostile arguments to `lithe latency`: one line each, non-zero.
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"--input-shape 1,1,28,28", "--model"},
           {"--model " + lenet_model().string() + " --input-shape 1,x", "--input-shape"},
           {"--model " + lenet_model().string() + " --input-shape 1,1,28,28 --runs 0",
            "--runs must be in [1, 1000000], got 0"},
           {"--model " + (out / "none.pt").string() + " --input-shape 1,1,28,28", "none.pt"},
           {"--model " + lenet_model().string() + " --input-shape 1,3,28,28",
            "the models' forward failed on an input of shape 1,3,28,28"}}) {
    const CliRun bad = run_lithe("latency " + args);
    EXPECT_NE(bad.exit_code, 0) << args;
    EXPECT_THAT(bad.out, HasSubstr(message)) << args;
    EXPECT_EQ(std::count(bad.out.begin(), bad.out.end(), '\n'), 1) << bad.out;
  }
}

TEST_F(SearchCliTest, AnotherSearchsStateAFloorAboveTheBestAndBadArgumentsWriteNothing) {
  const fs::path out = scratch_dir("cli_search_refusals");
  const fs::path state = out / "s.json";
  const std::string base = search_args("--flops-budget 0.5x --trials 2 --state " +
                                       state.string() + " --output " +
                                       (out / "best.pt").string());
  // A floor no model reaches: the state is kept, no model is written.
  CliRun run = run_lithe(base + " --metric-floor 0.99");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("below --metric-floor 0.99; no model written"));
  EXPECT_FALSE(fs::exists(out / "best.pt"));
  const std::string kept = read_text(state);
  EXPECT_EQ(nlohmann::json::parse(kept)["trials"].size(), 2U);

  // The same state with another seed: refused, naming the option; the state is untouched.
  run = run_lithe(base + " --seed 5");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr(state.string() + ": was written by another search: "
                                 "/search/seed is 0 there and 5 now"));
  EXPECT_EQ(read_text(state), kept);
  EXPECT_FALSE(fs::exists(out / "best.pt"));

  // A damaged state: the JSON path and the value.
  write_text(out / "bad.json", "{\"format\": \"lithe-search-state\", \"version\": 2}");
  run = run_lithe(search_args("--flops-budget 0.5x --state " + (out / "bad.json").string() +
                              " --output " + (out / "best.pt").string()));
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("bad.json: /version: must be 1 (written by another Lithe), "
                                 "got 2"));

  const std::string output = " --output " + (out / "best.pt").string();
  write_text(out / "l1.json", R"({"algorithm": "l1_filter",
      "config_list": [{"sparsity": 0.5, "op_types": ["Conv2d"]}]})");
  write_text(out / "ptq.json", R"({"algorithm": "ptq", "config_list": [
      {"quant_types": ["weight"], "quant_bits": 8, "op_types": ["Conv2d"]}]})");
  write_text(out / "nope.json", R"({"algorithm": "nope_quantizer", "config_list": [
      {"quant_types": ["weight"], "quant_bits": 8, "op_types": ["Conv2d"]}]})");
  const std::vector<std::pair<std::string, std::string>> hostile = {
      {"--trials 2" + output, "give exactly one of --flops-budget, --params-budget and "
                              "--latency-budget, got 0"},
      {"--flops-budget 0.5x --latency-budget 0.5x" + output, "got 2"},
      {"--flops-budget 1.5x" + output,
       "--flops-budget: a share of the dense model must be in (0, 1], got '1.5x'"},
      {"--latency-budget 3" + output, "--latency-budget: a latency budget is a share"},
      {"--flops-budget 0.5x --trials 0" + output, "--trials must be in [1, 100000], got 0"},
      {"--flops-budget 0.5x --strategy grid" + output,
       "--strategy: the strategy must be random, annealing, netadapt, amc or auto_compress, "
       "got 'grid'"},
      {"--flops-budget 0.5x --rounds 2" + output,
       "--rounds is for --strategy auto_compress, not annealing"},
      {"--flops-budget 0.5x --strategy auto_compress --rounds 0" + output,
       "--rounds must be >= 1, got 0"},
      {"--flops-budget 0.5x --strategy auto_compress --round-algorithm admm --round-options "
       "'[1]'" + output,
       "--round-options must be a JSON object, got '[1]'"},
      {"--flops-budget 0.5x --strategy auto_compress" + output,
       "auto_compress needs --round-algorithm"},
      {"--flops-budget 0.5x --metric-floor 2" + output,
       "--metric-floor is a top-1 accuracy in [0, 1], got 2"},
      {"--flops-budget 0.5x --lr 0.1" + output,
       "--lr has no effect without --trial-epochs, --recalibrate-bn, --epochs or "
       "--quantize-epochs"},
      {"--flops-budget 0.5x --convert " + (out / "i.pt").string() + output,
       "--convert has no effect without --quantize"},
      {"--flops-budget 0.5x --quantize " + (out / "l1.json").string() + output,
       "l1.json: /algorithm: --quantize takes a quantizer, got 'l1_filter' (a pruner: the "
       "search prunes with --algorithm)"},
      {"--flops-budget 0.5x --quantize " + (out / "ptq.json").string() +
           " --quantize-epochs -1" + output,
       "--quantize-epochs must be >= 0, got -1"},
      {"--flops-budget 0.5x --quantize " + (out / "ptq.json").string() +
           " --quantize-calibration-batches -2" + output,
       "--quantize-calibration-batches must be >= 0, got -2"},
      {"--flops-budget 0.5x --quantize " + (out / "ptq.json").string() +
           " --fold-batchnorm --no-fold-batchnorm" + output,
       "--fold-batchnorm and --no-fold-batchnorm: give one of them"},
      {"--flops-budget 0.5x --no-fold-batchnorm" + output,
       "--no-fold-batchnorm has no effect without --quantize"},
      {"--flops-budget 0.5x --quantize " + (out / "nope.json").string() + output,
       "nope.json: /algorithm: --quantize takes a quantizer, got 'nope_quantizer' (not "
       "registered)"},
      {"--flops-budget 0.5x --quantize " + (out / "ptq.json").string() +
           " --quantized-output " + (out / "best.pt").string() + output,
       "--quantized-output"},
      {"--flops-budget 0.5x --output " + (*dir_ / "trained.pt").string(), "--output"},
      {"--flops-budget 0.5x --state " + out.string() + output, "--state"},
      {"--flops-budget 0.5x --input-shape 1,0,28" + output, "--input-shape"},
      {"--flops-budget 0.5x --layers fc9" + output, "--layers: the model has no module 'fc9'"},
  };
  for (const auto& [args, message] : hostile) {
    run = run_lithe(search_args(args));
    EXPECT_NE(run.exit_code, 0) << args;
    EXPECT_THAT(run.out, HasSubstr(message)) << args;
    EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 1) << run.out;
    EXPECT_FALSE(fs::exists(out / "best.pt")) << args;
  }
  // A quantization that fails once the search is done: neither the best model nor any
  // quantized output is written.
  write_text(out / "ptq_bad.json", R"({"algorithm": "ptq", "config_list": [
      {"quant_types": ["weight"], "quant_bits": 8, "op_names": ["conv9"]}]})");
  run = run_lithe(search_args("--flops-budget 0.5x --trials 1 --eval-samples 50 --state " +
                              (out / "q.json").string() + " --quantize " +
                              (out / "ptq_bad.json").string() + output));
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("conv9"));
  EXPECT_FALSE(fs::exists(out / "best.pt"));
  EXPECT_FALSE(fs::exists(out / "best.quantized.pt"));
  EXPECT_FALSE(fs::exists(out / "best.quantized.calibration.json"));
  // A pruner whose masks remove no whole channel: said so, nothing written but the state.
  run = run_lithe(search_args("--flops-budget 0.5x --trials 1 --eval-samples 50 --state " +
                                  (out / "level.json").string() + output,
                              "level"));
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("no trial of 1 fits flops 0.5x with --max-sparsity 0.9; no "
                                 "candidate lost a single channel: 'level' must zero whole "
                                 "filters"));
  EXPECT_FALSE(fs::exists(out / "best.pt"));
}

}  // namespace
}  // namespace lithe::test
