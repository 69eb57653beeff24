// Regression tests for each finding of the hostile-input review, end to end through the `lithe`
// executable: the exit code, the one-line message (where, rule, value) and pre-existing outputs
// left byte-identical. The broader sweep is tests/hostile/ (170+ inputs, every verb).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "support/cli_run.h"
#include "support/paths.h"
#include "support/zip_archive.h"

namespace lithe::test {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

const std::string kSentinel = "sentinel: must survive a failing run";

class HostileFindings : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch_dir(std::string("hostile_findings_") +
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    model_ = (dir_ / "model.pt").string();
    fs::copy_file(lenet_model(), model_);
    config_ = (dir_ / "level.json").string();
    write_text(config_, R"({"algorithm": "level", "config_list": [{"sparsity": 0.5, "op_types": ["Conv2d", "Linear"]}]})");
    out_ = (dir_ / "out.pt").string();
    masks_ = (dir_ / "masks.pth").string();
    write_text(out_, kSentinel);
    write_text(masks_, kSentinel);
  }

  // Exactly one error line, starting with "lithe <verb>: error:", matching `pattern`; a
  // non-zero exit that is not a crash; the sentinels unchanged and no temporary files left.
  void expect_refused(const CliRun& run, const std::string& verb, const std::string& fragment) {
    EXPECT_NE(run.exit_code, 0) << run.out;
    EXPECT_GE(run.exit_code, 1) << "killed by a signal: " << run.out;
    EXPECT_LE(run.exit_code, 2) << run.out;
    int error_lines = 0;
    std::istringstream lines(run.out);
    std::string line;
    std::string error;
    while (std::getline(lines, line)) {
      if (line.rfind("lithe " + verb + ": error: ", 0) == 0) {
        ++error_lines;
        error = line;
      }
    }
    EXPECT_EQ(error_lines, 1) << run.out;
    EXPECT_THAT(error, HasSubstr(fragment)) << run.out;
    EXPECT_EQ(read_text(out_), kSentinel);
    EXPECT_EQ(read_text(masks_), kSentinel);
    for (const auto& item : fs::directory_iterator(dir_)) {
      EXPECT_EQ(item.path().filename().string().find(".tmp."), std::string::npos) << item.path();
    }
  }

  fs::path dir_;
  std::string model_, config_, out_, masks_;
};

// 1. A tensor record shorter than its storage: memory corruption before; now refused by every
// verb that reads a model, naming the record.
TEST_F(HostileFindings, ShortTensorRecordIsRefusedByEveryVerb) {
  std::vector<ZipRecord> records = read_zip(read_text(lenet_model()));
  ZipRecord& fc1 = find_record(records, "lenet/data/4");
  ASSERT_EQ(fc1.payload.size(), 122880u);
  fc1 = stored_record("lenet/data/4", fc1.payload.substr(0, 100));
  const std::string bad = (dir_ / "short.pt").string();
  write_text(bad, write_zip(records));
  const std::string where = "record 'lenet/data/4' holds 100 bytes";
  expect_refused(run_lithe("compress --model " + bad + " --config " + config_ + " --output " +
                           out_ + " --masks " + masks_),
                 "compress", where);
  expect_refused(run_lithe("apply --model " + bad + " --masks " + masks_ + " --output " + out_),
                 "apply", where);
  expect_refused(run_lithe("inspect --model " + bad), "inspect", where);
  expect_refused(run_lithe("flops --model " + bad + " --input-shape 1,1,28,28"), "flops", where);
  expect_refused(run_lithe("eval --model " + bad + " --data " + bad), "eval", where);
  // A flipped byte inside a record: the CRC no longer matches.
  std::string flipped = read_text(lenet_model());
  const size_t offset = find_record(records, "lenet/data/0").data_offset;
  flipped[offset] = static_cast<char>(flipped[offset] ^ 0x40);
  write_text(bad, flipped);
  expect_refused(run_lithe("inspect --model " + bad), "inspect", "CRC");
}

// 2. 100,000 nested '[': a stack overflow in the serializer before; now a depth error with the
// JSON path, under /config_list and under /options.
TEST_F(HostileFindings, DeeplyNestedConfigIsADepthError) {
  write_text(config_, "{\"algorithm\": \"level\", \"config_list\": [{\"x\": " +
                          std::string(100000, '[') + std::string(100000, ']') + "}]}");
  expect_refused(run_lithe("compress --model " + model_ + " --config " + config_ +
                           " --output " + out_),
                 "compress", config_ + ": /config_list/0/x/0/0");
  write_text(config_, "{\"algorithm\": \"level\", \"config_list\": [], \"options\": " +
                          std::string(100000, '[') + "}");
  expect_refused(run_lithe("compress --model " + model_ + " --config " + config_ +
                           " --output " + out_),
                 "compress", "nests deeper than 64 levels");
}

// 3. Special files and symbolic links as outputs.
TEST_F(HostileFindings, DevicesAndFifosAreRefusedAndLinksAreWrittenThrough) {
  expect_refused(run_lithe("compress --model " + model_ + " --config " + config_ +
                           " --output /dev/null"),
                 "compress", "--output '/dev/null' is a character device");
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null was replaced";
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_refused(run_lithe("apply --model " + model_ + " --masks " + masks_ + " --output " + fifo),
                 "apply", "is a FIFO");
  expect_refused(run_lithe("compress --model " + model_ + " --config " + config_ + " --output " +
                           out_ + " --masks " + fifo),
                 "compress", "--masks '" + fifo + "' is a FIFO");
  // A link is written through: it stays a link and its target gets the model.
  fs::create_directories(dir_ / "real");
  const fs::path link = dir_ / "link.pt";
  fs::create_symlink(dir_ / "real/pruned.pt", link);
  const CliRun ok = run_lithe("compress --model " + model_ + " --config " + config_ +
                              " --output " + link.string());
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_text(dir_ / "real/pruned.pt").substr(0, 2), "PK");
  EXPECT_EQ(run_lithe("inspect --model " + link.string()).exit_code, 0);
}

// 4. Outputs that alias inputs or each other, for every verb that writes.
TEST_F(HostileFindings, OutputsThatAreInputsAreRefusedBeforeAnyWork) {
  const std::string m = " --model " + model_;
  const std::string model_bytes = read_text(model_);
  const std::string config_bytes = read_text(config_);
  expect_refused(run_lithe("compress" + m + " --config " + config_ + " --output " + model_),
                 "compress", "--output '" + model_ + "' is the same file as --model");
  expect_refused(run_lithe("compress" + m + " --config " + config_ + " --output " + out_ +
                           " --masks " + model_),
                 "compress", "--masks '" + model_ + "' is the same file as --model");
  expect_refused(run_lithe("compress" + m + " --config " + config_ + " --output " + out_ +
                           " --masks " + out_),
                 "compress", "is the same file as --output");
  expect_refused(run_lithe("compress" + m + " --config " + config_ + " --output " + config_),
                 "compress", "is the same file as --config");
  expect_refused(run_lithe("apply" + m + " --masks " + masks_ + " --output " + model_), "apply",
                 "is the same file as --model");
  expect_refused(run_lithe("apply" + m + " --masks " + masks_ + " --output " + masks_), "apply",
                 "is the same file as --masks");
  expect_refused(run_lithe("export-onnx" + m + " --input-shape 1,1,28,28 --output " + model_),
                 "export-onnx", "is the same file as --model");
  const std::string data = (dir_ / "data.pt").string();
  write_text(data, kSentinel);
  expect_refused(run_lithe("train" + m + " --data " + data + " --epochs 1 --output " + data),
                 "train", "is the same file as --data");
  EXPECT_EQ(read_text(data), kSentinel);
  // Through a symbolic link to the input.
  fs::create_symlink(model_, dir_ / "alias.pt");
  expect_refused(run_lithe("compress" + m + " --config " + config_ + " --output " +
                           (dir_ / "alias.pt").string()),
                 "compress", "is the same file as --model");
  EXPECT_EQ(read_text(model_), model_bytes);
  EXPECT_EQ(read_text(config_), config_bytes);
}

// 5. A full disk: std::terminate before; now one line with the OS reason, nothing left behind.
TEST_F(HostileFindings, AFullDiskIsAnErrorNamingTheFileAndTheReason) {
  // A file-size limit fails write() with EFBIG on any machine (lithe ignores SIGXFSZ, which
  // would otherwise kill it).
  const CliRun limited = run_shell("ulimit -f 64; " + lithe_cli().string() +
                                   " compress --model " + model_ + " --config " + config_ +
                                   " --output " + out_ + " --masks " + masks_ + " 2>&1");
  expect_refused(limited, "compress", "cannot write '");
  EXPECT_THAT(limited.out, HasSubstr("File too large"));
  // A real ENOSPC on a 1 MB tmpfs, where this process may mount one (root in a container).
  const fs::path small = dir_ / "small";
  fs::create_directories(small);
  if (::geteuid() != 0 || ::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=128k") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs here (needs root); the EFBIG case above ran";
  }
  write_text(small / "out.pt", kSentinel);
  const CliRun full = run_lithe("compress --model " + model_ + " --config " + config_ +
                                " --output " + (small / "out.pt").string() + " --masks " +
                                (small / "masks.pth").string());
  const std::string left = read_text(small / "out.pt");
  int leftovers = 0;
  for (const auto& item : fs::directory_iterator(small)) {
    leftovers += item.path().filename().string().find(".tmp.") != std::string::npos;
  }
  ::umount(small.c_str());
  EXPECT_EQ(full.exit_code, 1) << full.out;
  EXPECT_THAT(full.out, AllOf(HasSubstr("No space left on device"), Not(HasSubstr("terminate"))));
  EXPECT_EQ(left, kSentinel);
  EXPECT_EQ(leftovers, 0);
}

// 6. Thread counts: 100000 never returned, -1 was silently "all cores".
TEST_F(HostileFindings, ThreadCountsOutOfRangeAreRefusedAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  expect_refused(run_lithe("inspect --model " + model_ + " --threads 100000"), "inspect",
                 "--threads must be 0 (all cores) or 1..");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  expect_refused(run_lithe("compress --model " + model_ + " --config " + config_ +
                           " --output " + out_ + " --threads -1"),
                 "compress", "got -1");
}

// Masks that are not masks, and empty mask files.
TEST_F(HostileFindings, MaskValuesOtherThanZeroAndOneAreRefused) {
  const CliRun made = run_lithe("compress --model " + model_ + " --config " + config_ +
                                " --output " + (dir_ / "pruned.pt").string() + " --masks " +
                                (dir_ / "good.pth").string());
  ASSERT_EQ(made.exit_code, 0) << made.out;
  // Turn one 1 of conv1's weight mask into 0.5 (float32 0x3f000000), CRC kept consistent.
  std::vector<ZipRecord> records = read_zip(read_text(dir_ / "good.pth"));
  ZipRecord* conv1 = nullptr;
  for (ZipRecord& record : records) {
    if (record.payload.size() == 150 * 4 && conv1 == nullptr) {
      conv1 = &record;
    }
  }
  ASSERT_NE(conv1, nullptr);
  std::string data = conv1->payload;
  for (size_t i = 0; i + 4 <= data.size(); i += 4) {
    if (data.compare(i, 4, std::string("\x00\x00\x80\x3f", 4)) == 0) {
      data.replace(i, 4, std::string("\x00\x00\x00\x3f", 4));
      break;
    }
  }
  *conv1 = stored_record(conv1->name, data);
  const std::string half = (dir_ / "half.pth").string();
  write_text(half, write_zip(records));
  expect_refused(run_lithe("apply --model " + model_ + " --masks " + half + " --output " + out_),
                 "apply", "layer 'conv1': the 'weight' mask must hold only 0 and 1, but 1 of 150");
  expect_refused(run_lithe("speedup --model " + model_ + " --masks " + half +
                           " --input-shape 1,1,28,28 --output " + out_),
                 "speedup", "mask file '" + half + "', layer 'conv1'");
}

// Duplicate keys: the last one used to win silently.
TEST_F(HostileFindings, DuplicateConfigKeysAreRefusedWithTheirPath) {
  write_text(config_, R"({"algorithm": "level", "config_list": [{"sparsity": 0.5, "sparsity": 0.9, "op_types": ["Conv2d"]}]})");
  expect_refused(run_lithe("compress --model " + model_ + " --config " + config_ +
                           " --output " + out_),
                 "compress", "/config_list/0/sparsity appears twice in one object");
}

// Poor messages: an input shape too large to allocate names the option.
TEST_F(HostileFindings, AHugeInputShapeNamesTheOption) {
  expect_refused(run_lithe("flops --model " + model_ + " --input-shape 1000000000,1,1,1"),
                 "flops", "--input-shape '1000000000,1,1,1' has more than 268435456 elements");
}

// Ranks started with different WORLD_SIZE values: "timed out ... 2 of 2 ranks arrived" before;
// now both name the disagreement.
TEST_F(HostileFindings, RanksThatDisagreeOnWorldSizeSaySo) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  ::close(fd);
  const std::string common = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                             std::to_string(ntohs(address.sin_port)) + " LITHE_DIST_TIMEOUT=4 ";
  const std::string train = " " + lithe_cli().string() + " train --model " + model_ +
                            " --epochs 1 --threads 1 --output ";
  const fs::path log0 = dir_ / "rank0.log";
  const fs::path log1 = dir_ / "rank1.log";
  run_shell("env " + common + "WORLD_SIZE=2 RANK=0" + train + (dir_ / "r0.pt").string() + " > " +
            log0.string() + " 2>&1 & sleep 1; env " + common + "WORLD_SIZE=3 RANK=1" + train +
            (dir_ / "r1.pt").string() + " > " + log1.string() + " 2>&1; wait");
  EXPECT_THAT(read_text(log1), HasSubstr("rank 1 of 3: WORLD_SIZE is 3 here but 2 at another rank"));
  EXPECT_THAT(read_text(log0), HasSubstr("rank 0 of 2: WORLD_SIZE is 2 here but 3 at another rank"));
  EXPECT_FALSE(fs::exists(dir_ / "r0.pt"));
  EXPECT_FALSE(fs::exists(dir_ / "r1.pt"));
}

}  // namespace
}  // namespace lithe::test
