// Hostile inputs at the library level: bounded JSON, the output-path rule, staged writes that
// fail cleanly, masks that are masks, data and training that stay finite, thread ranges.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <torch/script.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <limits>

#include "lithe/host/session/pruning_session.h"
#include "lithe/host/train/dataset.h"
#include "lithe/host/io/file_io.h"
#include "lithe/host/model/apply_compression_results.h"
#include "lithe/host/io/mask_file.h"
#include "lithe/host/io/json_document.h"
#include "lithe/host/io/output_paths.h"
#include "lithe/host/io/staged_file.h"
#include "lithe/host/io/threads.h"
#include "lithe/host/train/trainer.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk_internal/options_json.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const sdk::Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string bytes_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// ---------------------------------------------------------------- JSON

TEST(JsonDocument, DepthBeyondTheLimitIsRefusedWithItsPath) {
  const std::string deep = "{\"config_list\": [{\"x\": " + std::string(100000, '[') + "]}]}";
  const std::string message = error_of([&] { parse_json_document(deep, "c.json"); });
  EXPECT_THAT(message, AllOf(HasSubstr("c.json: /config_list/0/x/0/0"),
                             HasSubstr("nests deeper than 64 levels")));
  // Exactly at the limit still parses.
  const std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_NO_THROW(parse_json_document(ok, "ok.json"));
  const std::string over = std::string(kMaxJsonDepth + 1, '[') + std::string(kMaxJsonDepth + 1, ']');
  EXPECT_THAT(error_of([&] { parse_json_document(over, "over.json"); }),
              HasSubstr("nests deeper than"));
}

TEST(JsonDocument, DuplicateKeysAreRefusedWithTheirPath) {
  EXPECT_THAT(error_of([] { parse_json_document(R"({"a": 1, "a": 2})", "d.json"); }),
              HasSubstr("d.json: /a appears twice in one object"));
  EXPECT_THAT(error_of([] {
                parse_json_document(
                    R"({"config_list": [{"sparsity": 0.5}, {"op_types": [], "sparsity": 0.1, "sparsity": 0.2}]})",
                    "d.json");
              }),
              HasSubstr("d.json: /config_list/1/sparsity appears twice"));
  // The same key in sibling objects is fine.
  EXPECT_NO_THROW(parse_json_document(R"([{"a": 1}, {"a": 2}])", "ok.json"));
}

TEST(JsonDocument, NumberOverflowAndSyntaxErrorsNameTheJsonPath) {
  EXPECT_THAT(error_of([] { parse_json_document(R"({"options": {"lr": 1e999}})", "n.json"); }),
              AllOf(HasSubstr("n.json: /options/lr"), HasSubstr("1e999")));
  EXPECT_THAT(error_of([] { parse_json_document(R"({"a": [1, 2, oops]})", "s.json"); }),
              AllOf(HasSubstr("s.json: not valid JSON at /a/2"), HasSubstr("byte")));
}

TEST(JsonDocument, LongValuesAndControlCharactersStayOnOneShortLine) {
  const std::string huge(10 << 20, 'x');
  const std::string message = error_of(
      [&] { parse_compression_config("{\"algorithm\": \"" + huge + "\"}", "big.json"); });
  EXPECT_LT(message.size(), 600u);
  EXPECT_THAT(message, HasSubstr("big.json: /algorithm"));
  // A NUL and a newline inside a key: escaped, the message is not cut.
  const std::string nul = error_of(
      [] { parse_compression_config("{\"algo\\u0000rithm\\n\": 1}", "nul.json"); });
  EXPECT_THAT(nul, AllOf(HasSubstr("\\x00"), HasSubstr("\\n"), HasSubstr("is not a known key")));
  EXPECT_EQ(nul.find('\n'), std::string::npos);
}

TEST(JsonDocument, AMisspelledKeyGetsASuggestion) {
  const auto entry = parse_json_document(R"({"sparsty": 0.5, "op_types": ["Conv2d"]})", "t.json");
  const sdk::Options options = sdk::options_from_json(entry, "/config_list/0");
  EXPECT_THAT(error_of([&] { options.require<double>("sparsity"); }),
              AllOf(HasSubstr("/config_list/0: missing required key 'sparsity'"),
                    HasSubstr("unknown key 'sparsty': did you mean 'sparsity'?")));
  // Nothing close: the keys present are listed instead.
  EXPECT_THAT(error_of([&] { options.require<double>("end_epoch"); }),
              HasSubstr("keys present: 'sparsty', 'op_types'"));
}

// ---------------------------------------------------------------- output paths

class OutputPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::scratch_dir("untrusted_output_paths");
    write_text(dir_ / "in.pt", "input bytes");
    write_text(dir_ / "old.pt", "previous output");
  }
  fs::path dir_;
};

TEST_F(OutputPaths, SpecialFilesAreRefusedBeforeAnything) {
  EXPECT_THAT(error_of([] { check_output_paths({}, {{"--output", "/dev/null"}}); }),
              AllOf(HasSubstr("--output '/dev/null' is a character device"),
                    HasSubstr("nothing was written")));
  ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0600), 0);
  EXPECT_THAT(error_of([&] { StagedFile staged(dir_ / "fifo", "--masks"); }),
              HasSubstr("is a FIFO"));
  EXPECT_THAT(error_of([&] { check_output_paths({}, {{"--json", dir_}}); }),
              HasSubstr("is a directory"));
  EXPECT_THAT(error_of([&] { check_output_paths({}, {{"--output", dir_ / "missing/x.pt"}}); }),
              HasSubstr("does not exist"));
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST_F(OutputPaths, AnOutputThatIsAnInputOrAnotherOutputIsRefused) {
  const fs::path in = dir_ / "in.pt";
  EXPECT_THAT(error_of([&] { check_output_paths({{"--model", in}}, {{"--output", in}}); }),
              HasSubstr("--output '" + in.string() + "' is the same file as --model"));
  // Through "..", a hard link and a symbolic link.
  fs::create_directories(dir_ / "sub");
  EXPECT_THAT(error_of([&] {
                check_output_paths({{"--model", in}}, {{"--masks", dir_ / "sub/../in.pt"}});
              }),
              HasSubstr("is the same file as --model"));
  fs::create_hard_link(in, dir_ / "hard.pt");
  EXPECT_THAT(
      error_of([&] { check_output_paths({{"--model", in}}, {{"--output", dir_ / "hard.pt"}}); }),
      HasSubstr("is the same file as --model"));
  fs::create_symlink(in, dir_ / "link.pt");
  EXPECT_THAT(
      error_of([&] { check_output_paths({{"--config", in}}, {{"--onnx", dir_ / "link.pt"}}); }),
      HasSubstr("--onnx '" + (dir_ / "link.pt").string() + "' is the same file as --config"));
  // Two outputs that do not exist yet but name one file.
  EXPECT_THAT(error_of([&] {
                check_output_paths({}, {{"--output", dir_ / "new.pt"},
                                        {"--masks", dir_ / "sub/../new.pt"}});
              }),
              HasSubstr("is the same file as --output"));
  EXPECT_EQ(bytes_of(in), "input bytes");
  EXPECT_NO_THROW(check_output_paths({{"--model", in}}, {{"--output", dir_ / "other.pt"}}));
}

TEST_F(OutputPaths, ASymbolicLinkIsWrittenThroughAndStaysALink) {
  fs::create_directories(dir_ / "elsewhere");
  fs::create_symlink(dir_ / "elsewhere/target.pt", dir_ / "out.pt");  // dangling for now
  StagedFile staged(dir_ / "out.pt");
  staged.write("new content");
  staged.commit();
  EXPECT_TRUE(fs::is_symlink(dir_ / "out.pt"));
  EXPECT_EQ(bytes_of(dir_ / "elsewhere/target.pt"), "new content");
  // No temporary file is left in either directory.
  for (const fs::path& d : {dir_, dir_ / "elsewhere"}) {
    for (const auto& item : fs::directory_iterator(d)) {
      EXPECT_EQ(item.path().string().find(".tmp."), std::string::npos) << item.path();
    }
  }
}

TEST_F(OutputPaths, AFailingWriteNamesTheFileAndTheOsReasonAndKeepsTheOldFile) {
  // RLIMIT_FSIZE makes write() fail (EFBIG) like a full disk, without a special mount.
  struct rlimit old_limit {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string message = error_of([&] {
    StagedFile staged(dir_ / "old.pt");
    staged.write(std::string(1 << 20, 'x'));
    staged.commit();
  });
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_THAT(message, AllOf(HasSubstr("cannot write '" + (dir_ / "old.pt").string() + "'"),
                             HasSubstr("File too large"), Not(HasSubstr(".tmp."))));
  EXPECT_EQ(bytes_of(dir_ / "old.pt"), "previous output");
  for (const auto& item : fs::directory_iterator(dir_)) {
    EXPECT_EQ(item.path().string().find(".tmp."), std::string::npos) << item.path();
  }
}

TEST_F(OutputPaths, UnwritableDirectoriesReportTheOsReason) {
  const std::string message = error_of([] { write_file_atomic("/proc/self/lithe_out.pt", "x"); });
  EXPECT_THAT(message, HasSubstr("output '/proc/self/lithe_out.pt' cannot be written: "));
  EXPECT_THAT(message, ::testing::AnyOf(HasSubstr("No such file"), HasSubstr("Permission denied"),
                                        HasSubstr("not permitted"), HasSubstr("Read-only")));
  EXPECT_EQ(message.find(".tmp."), std::string::npos);
}

// ---------------------------------------------------------------- masks

NamedMasks masks_with(const at::Tensor& weight) {
  NamedMasks masks;
  sdk::Masks m;
  m.weight = weight;
  masks.emplace_back("conv1", m);
  return masks;
}

TEST(MaskFiles, ValuesOtherThanZeroAndOneAreRefusedNamingTheLayerAndCount) {
  at::Tensor w = torch::ones({6, 1, 5, 5});
  w[0][0][0][0] = 0.5;
  w[1][0][0][0] = 2;
  w[2][0][0][0] = -1;
  EXPECT_THAT(error_of([&] { deserialize_masks(serialize_masks(masks_with(w)), "m.pth"); }),
              AllOf(HasSubstr("mask file 'm.pth', layer 'conv1'"), HasSubstr("only 0 and 1"),
                    HasSubstr("3 of 150 entries")));
  at::Tensor nan = torch::ones({6, 1, 5, 5});
  nan[5][0][4][4] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(error_of([&] { deserialize_masks(serialize_masks(masks_with(nan)), "m.pth"); }),
              HasSubstr("1 of 150 entries"));
  at::Tensor inf = torch::ones({6, 1, 5, 5});
  inf[0][0][0][1] = std::numeric_limits<float>::infinity();
  EXPECT_THAT(error_of([&] { deserialize_masks(serialize_masks(masks_with(inf)), "m.pth"); }),
              HasSubstr("only 0 and 1"));
  EXPECT_THAT(error_of([&] {
                deserialize_masks(serialize_masks(masks_with(torch::ones({2}, at::kComplexFloat))),
                                  "m.pth");
              }),
              HasSubstr("must be bool, integer or floating"));
  EXPECT_THAT(error_of([&] { deserialize_masks(serialize_masks({}), "empty.pth"); }),
              HasSubstr("mask file 'empty.pth' holds no layers"));
  // bool, integer and float 0/1 masks are all fine.
  EXPECT_NO_THROW(deserialize_masks(serialize_masks(masks_with(torch::ones({3}, at::kBool))), "b"));
  EXPECT_NO_THROW(deserialize_masks(serialize_masks(masks_with(torch::zeros({3}, at::kLong))), "l"));
}

TEST(MaskFiles, APrunedInfiniteWeightBecomesExactlyZero) {
  const auto model = load_torchscript_model(test::lenet_model());
  const ModuleRecord* conv1 = model->find_module("conv1");
  ASSERT_NE(conv1, nullptr);
  {
    at::NoGradGuard no_grad;
    conv1->weight->fill_(std::numeric_limits<float>::infinity());
  }
  at::Tensor mask = torch::ones(conv1->weight->sizes());
  mask[0].zero_();
  apply_compression_results(*model, masks_with(mask), "m.pth");
  EXPECT_EQ(conv1->weight->select(0, 0).abs().sum().item<float>(), 0.0f);
  EXPECT_TRUE(std::isinf(conv1->weight->select(0, 1).sum().item<float>()));
}

// ---------------------------------------------------------------- data and training

TEST(DataFiles, NonFiniteImagesAreRefusedNamingTheSample) {
  const fs::path dir = test::scratch_dir("untrusted_data");
  Dataset data;
  data.images = torch::zeros({8, 1, 28, 28});
  data.images[5][0][3][3] = std::numeric_limits<float>::quiet_NaN();
  data.images[6][0][0][0] = -std::numeric_limits<float>::infinity();
  data.labels = torch::zeros({8}, at::kLong);
  save_tensor_file(data, dir / "nan.pt");
  EXPECT_THAT(error_of([&] { load_tensor_file(dir / "nan.pt"); }),
              AllOf(HasSubstr("sample 5 of 'images' holds NaN or infinite values"),
                    HasSubstr("2 of 8 samples")));
}

TEST(DataFiles, AnOutOfRangeLabelIsReportedWithItsValue) {
  const auto model = load_torchscript_model(test::lenet_model());
  Dataset data;
  data.source = "labels.pt";
  data.images = torch::zeros({4, 1, 28, 28});
  data.labels = torch::tensor({3, -1, 2, 1}, at::kLong);
  EXPECT_THAT(error_of([&] { check_dataset_fits_model(*model, data); }),
              AllOf(HasSubstr("sample 1 has label -1"), HasSubstr("[0, 10)")));
  data.labels = torch::tensor({3, 1, 10, 1}, at::kLong);
  EXPECT_THAT(error_of([&] { check_dataset_fits_model(*model, data); }),
              HasSubstr("sample 2 has label 10"));
}

TEST(Training, ANonFiniteLossStopsWithEpochAndStep) {
  const auto model = load_torchscript_model(test::lenet_model());
  {
    at::NoGradGuard no_grad;  // a model that arrives with an infinite weight
    model->find_module("fc3")->weight->fill_(std::numeric_limits<float>::infinity());
  }
  Dataset data;
  data.source = "t.pt";
  data.images = torch::randn({64, 1, 28, 28});
  data.labels = torch::zeros({64}, at::kLong);
  TrainOptions options;
  options.epochs = 1;
  options.batch_size = 32;
  options.progress = false;
  const std::string message = error_of([&] { train(*model, data, nullptr, options); });
  EXPECT_THAT(message, AllOf(HasSubstr("training diverged at epoch 1 step 1"),
                             HasSubstr("nothing was written")));
}

// ---------------------------------------------------------------- threads

TEST(Threads, CountsOutsideTheRangeAreRefused) {
  EXPECT_THAT(error_of([] { configure_threads(-1); }),
              AllOf(HasSubstr("--threads must be 0 (all cores) or 1.."), HasSubstr("got -1")));
  EXPECT_THAT(error_of([] { configure_threads(100000); }), HasSubstr("got 100000"));
  EXPECT_EQ(configure_threads(1), 1);
  EXPECT_GE(configure_threads(0), 1);
}

}  // namespace
}  // namespace lithe::host
