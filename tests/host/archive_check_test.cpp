// Torch archive validation: damaged zips, records shorter than their storages, hostile pickles
// and tensors that reach past their storage are refused with one error naming the file and the
// record; every archive torch itself writes passes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/script.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <sstream>

#include "lithe/host/io/archive_check.h"
#include "lithe/host/io/file_io.h"
#include "lithe/host/io/mask_file.h"
#include "lithe/sdk/error.h"
#include "support/paths.h"
#include "support/zip_archive.h"

namespace lithe::host {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The zip reader and writer the tests build consistent archives with.
using test::crc_of;
using test::find_record;
using test::le;
using test::patch;
using test::put;
using test::read_zip;
using test::stored_record;
using test::write_zip;
using test::ZipRecord;

const std::string& lenet_bytes() {
  static const std::string bytes = read_file(test::lenet_model());
  return bytes;
}

/// The message of the sdk::Error(kInvalidModel) the check throws, or "" when it accepts.
std::string rejection(const std::string& bytes, const std::string& source = "t.pt") {
  try {
    check_torch_archive(bytes, "model file", source);
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), sdk::Errc::kInvalidModel) << e.what();
    return e.what();
  }
  return "";
}

std::string extents_rejection(const c10::IValue& value) {
  try {
    check_tensor_extents(value, "mask file", "m.pt");
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), sdk::Errc::kInvalidModel) << e.what();
    return e.what();
  }
  return "";
}

std::string module_rejection(const torch::jit::Module& module) {
  try {
    check_module_tensors(module, "model file", "m.pt");
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), sdk::Errc::kInvalidModel) << e.what();
    return e.what();
  }
  return "";
}

// ------------------------------------------------------------------------------------------------
// Hand-written pickles, in the forms torch's Pickler (protocol 2) and Python's torch.save
// (protocol 2, or 4 when asked) write.

std::string le_bytes(uint64_t value, int width) {
  std::string out;
  put(out, value, width);
  return out;
}
std::string unicode(const std::string& text) { return "X" + le_bytes(text.size(), 4) + text; }
std::string global(const std::string& module, const std::string& name) {
  return "c" + module + "\n" + name + "\n";
}
std::string binint(int32_t value) { return "J" + le_bytes(static_cast<uint32_t>(value), 4); }
const std::string kProto2 = std::string("\x80\x02", 2);

/// ('storage', <type>, key, 'cpu', <numel opcode>) as a MARK ... TUPLE, then BINPERSID.
std::string persistent_storage(const std::string& type_global, const std::string& key,
                               const std::string& numel) {
  return "(" + unicode("storage") + type_global + unicode(key) + unicode("cpu") + numel + "tQ";
}

/// A protocol-2 pickle whose value is one storage.
std::string storage_pickle(const std::string& type_global, const std::string& key,
                           const std::string& numel) {
  return kProto2 + persistent_storage(type_global, key, numel) + ".";
}

std::string archive(const std::vector<std::pair<std::string, std::string>>& files) {
  std::vector<ZipRecord> records;
  for (const auto& [name, data] : files) {
    records.push_back(stored_record(name, data));
  }
  return write_zip(records);
}

/// archive/data.pkl = `pickle` next to a 16-byte archive/data/0.
std::string data_pickle_archive(const std::string& pickle) {
  return archive({{"archive/data.pkl", pickle}, {"archive/data/0", std::string(16, '\0')}});
}

// ------------------------------------------------------------------------------------------------
// Archives torch writes pass.

TEST(ArchiveCheckTest, AcceptsThePristineLenetModelAndItsTensors) {
  EXPECT_EQ(rejection(lenet_bytes(), "lenet.pt"), "");
  const torch::jit::Module module = torch::jit::load(test::lenet_model().string());
  EXPECT_EQ(module_rejection(module), "");
}

TEST(ArchiveCheckTest, AcceptsEveryCheckedInModel) {
  size_t models = 0;
  for (const auto& entry : fs::directory_iterator(test::source_dir() / "tests/data")) {
    if (entry.path().extension() != ".pt") {
      continue;
    }
    SCOPED_TRACE(entry.path().string());
    EXPECT_EQ(rejection(read_file(entry.path())), "");
    EXPECT_EQ(module_rejection(torch::jit::load(entry.path().string())), "");
    ++models;
  }
  EXPECT_GE(models, 10u);
}

TEST(ArchiveCheckTest, AcceptsMaskFilesAndTensorPickles) {
  NamedMasks masks;
  sdk::Masks conv;
  conv.weight = torch::ones({6, 1, 5, 5});
  conv.bias = torch::zeros({6});
  sdk::Masks fc;
  fc.weight = torch::randint(0, 2, {10, 84}).to(torch::kBool);
  masks.emplace_back("conv1", conv);
  masks.emplace_back("fc3", fc);
  const std::string mask_file = serialize_masks(masks);
  EXPECT_EQ(rejection(mask_file, "mask.pth"), "");
  const c10::IValue loaded =
      torch::jit::pickle_load(std::vector<char>(mask_file.begin(), mask_file.end()));
  EXPECT_EQ(extents_rejection(loaded), "");

  // Every dtype torch's Pickler maps to a storage type, views with offsets, an empty tensor.
  const at::Tensor base = torch::arange(24, torch::kDouble).view({4, 6});
  const std::vector<at::Tensor> tensors = {
      base,
      base.t(),
      base.slice(/*dim=*/1, 2, 5),
      base[3],
      torch::ones({3}, torch::kHalf),
      torch::ones({3}, torch::kBFloat16),
      torch::ones({2, 2}, torch::kLong),
      torch::ones({5}, torch::kInt),
      torch::ones({5}, torch::kShort),
      torch::ones({5}, torch::kChar),
      torch::ones({5}, torch::kByte),
      torch::ones({5}, torch::kBool),
      torch::ones({2}, torch::kComplexFloat),
      torch::ones({2}, torch::kComplexDouble),
      torch::empty({0, 3}),
  };
  const std::vector<char> pickled =
      torch::jit::pickle_save(c10::IValue(c10::List<at::Tensor>(tensors)));
  const std::string pickled_bytes(pickled.begin(), pickled.end());
  EXPECT_EQ(rejection(pickled_bytes, "tensors.pt"), "");
  EXPECT_EQ(extents_rejection(torch::jit::pickle_load(pickled)), "");
}

TEST(ArchiveCheckTest, AcceptsARebuiltLenetInBothZipForms) {
  const std::vector<ZipRecord> records = read_zip(lenet_bytes());
  ASSERT_EQ(records.size(), 33u);
  for (const bool zip64 : {false, true}) {
    SCOPED_TRACE(zip64 ? "zip64" : "zip32");
    const std::string rebuilt = write_zip(records, zip64);
    EXPECT_EQ(rejection(rebuilt), "");
    // The test's writer makes archives libtorch reads (so the defects below are the only ones).
    std::istringstream in(rebuilt);
    const torch::jit::Module module = torch::jit::load(in);
    EXPECT_EQ(module.named_parameters().size(), 10u);
  }
}

TEST(ArchiveCheckTest, AcceptsAnArchiveWithAComment) {
  std::string bytes =
      archive({{"archive/data.pkl", storage_pickle(global("torch", "FloatStorage"), "0", "K\x04")},
               {"archive/data/0", std::string(16, '\0')}});
  patch(bytes, bytes.size() - 2, 7, 2);
  EXPECT_EQ(rejection(bytes + "comment"), "");
  // A comment length that runs past the end leaves no end record to find.
  EXPECT_THAT(rejection(bytes + "short"), HasSubstr("is not a torch archive"));
}

// ------------------------------------------------------------------------------------------------
// Storage claims

TEST(ArchiveCheckTest, RejectsARecordShorterThanItsStorage) {
  std::vector<ZipRecord> records = read_zip(lenet_bytes());
  ZipRecord& weight = find_record(records, "lenet/data/4");
  ASSERT_EQ(weight.uncompressed_size, 122880u);
  weight = stored_record("lenet/data/4", weight.payload.substr(0, 100));
  for (const bool zip64 : {false, true}) {
    EXPECT_EQ(rejection(write_zip(records, zip64), "lenet.pt"),
              "model file 'lenet.pt': record 'lenet/data/4' holds 100 bytes but its storage needs "
              "122880 (30720 Float elements); the archive is truncated or corrupted");
  }
}

// libtorch finds records without regard to case (miniz's default), so a pickle named
// "data.PKL" and a record named "DATA/4" are what it reads as data.pkl and data/4.
TEST(ArchiveCheckTest, ComparesRecordNamesWithoutCaseAsLibtorchDoes) {
  std::vector<ZipRecord> records = read_zip(lenet_bytes());
  find_record(records, "lenet/data.pkl").name = "lenet/data.PKL";
  ZipRecord& weight = find_record(records, "lenet/data/4");
  weight = stored_record("lenet/DATA/4", weight.payload.substr(0, 100));
  EXPECT_THAT(rejection(write_zip(records), "lenet.pt"),
              HasSubstr("record 'lenet/data/4' holds 100 bytes but its storage needs 122880"));
  records = read_zip(lenet_bytes());
  records.push_back(stored_record("lenet/Data/4", "x"));
  EXPECT_THAT(rejection(write_zip(records), "lenet.pt"), HasSubstr("two records named"));
}

TEST(ArchiveCheckTest, RejectsAMissingStorageRecord) {
  std::vector<ZipRecord> records = read_zip(lenet_bytes());
  records.erase(std::find_if(records.begin(), records.end(),
                             [](const ZipRecord& r) { return r.name == "lenet/data/4"; }));
  EXPECT_THAT(rejection(write_zip(records)),
              AllOf(StartsWith("model file 't.pt': pickle 'lenet/data.pkl' declares storage '4' "
                               "(30720 Float elements)"),
                    HasSubstr("has no record 'lenet/data/4'")));
}

TEST(ArchiveCheckTest, ResolvesStorageRecordsTheWayLibtorchDoes) {
  const std::string four_floats = storage_pickle(global("torch", "FloatStorage"), "0", "K\x04");
  const std::string sixteen_bytes(16, '\0');
  // constants.pkl reads constants/<key>, not data/<key>.
  EXPECT_EQ(rejection(archive(
                {{"archive/constants.pkl", four_floats}, {"archive/constants/0", sixteen_bytes}})),
            "");
  EXPECT_THAT(rejection(archive(
                  {{"archive/constants.pkl", four_floats}, {"archive/data/0", sixteen_bytes}})),
              HasSubstr("has no record 'archive/constants/0'"));
  // A lite-interpreter bytecode.pkl shares constants/.
  EXPECT_EQ(rejection(archive(
                {{"archive/bytecode.pkl", four_floats}, {"archive/constants/0", sixteen_bytes}})),
            "");
  // Extra files are the user's bytes, not pickles libtorch reads.
  EXPECT_EQ(rejection(archive({{"archive/extra/notes.pkl", "not a pickle"}})), "");
  // An empty storage needs no record (libtorch reads none).
  EXPECT_EQ(rejection(archive({{"archive/data.pkl",
                                storage_pickle(global("torch", "FloatStorage"), "0", "K\x00"s)}})),
            "");
}

TEST(ArchiveCheckTest, UnderstandsPythonTorchSavePickles) {
  // torch.save of an UntypedStorage: the global is torch.storage.UntypedStorage, numel in bytes.
  const std::string untyped =
      storage_pickle(global("torch.storage", "UntypedStorage"), "0", std::string("K\x05", 2));
  EXPECT_EQ(rejection(archive({{"s/data.pkl", untyped}, {"s/data/0", "12345"}})), "");
  EXPECT_THAT(rejection(archive({{"s/data.pkl", untyped}, {"s/data/0", "1234"}})),
              HasSubstr("record 's/data/0' holds 4 bytes but its storage needs 5 (5 Untyped "
                        "elements)"));

  // LONG1 element counts.
  const std::string long1 =
      storage_pickle(global("torch", "ByteStorage"), "0", std::string("\x8a\x02\x00\x01", 4));
  EXPECT_EQ(rejection(archive({{"s/data.pkl", long1}, {"s/data/0", std::string(256, 'x')}})), "");
  EXPECT_THAT(rejection(archive({{"s/data.pkl", long1}, {"s/data/0", std::string(255, 'x')}})),
              HasSubstr("holds 255 bytes but its storage needs 256"));

  // Memoized strings and globals shared by two storages (BINPUT / BINGET), in a tuple.
  const std::string shared_pickle = kProto2 + "((" + unicode("storage") + "q\x00"s +
                                    global("torch", "FloatStorage") + "q\x01"s + unicode("0") +
                                    unicode("cpu") + "q\x02"s + "K\x04" + "tQ" + "(h\x00h\x01"s +
                                    unicode("1") + "h\x02"s + "K\x08" + "tQ" + "t.";
  EXPECT_EQ(rejection(archive({{"s/data.pkl", shared_pickle},
                               {"s/data/0", std::string(16, 'x')},
                               {"s/data/1", std::string(32, 'x')}})),
            "");
  EXPECT_THAT(rejection(archive({{"s/data.pkl", shared_pickle},
                                 {"s/data/0", std::string(16, 'x')},
                                 {"s/data/1", std::string(31, 'x')}})),
              HasSubstr("record 's/data/1' holds 31 bytes but its storage needs 32 (8 Float"));

  // Protocol 4: FRAME, SHORT_BINUNICODE, MEMOIZE, STACK_GLOBAL.
  const auto short_unicode = [](const std::string& text) {
    return "\x8c"s + static_cast<char>(text.size()) + text + "\x94";  // with MEMOIZE
  };
  const std::string body = "(" + short_unicode("storage") + short_unicode("torch") +
                           short_unicode("FloatStorage") + "\x93\x94" + short_unicode("0") +
                           short_unicode("cpu") + "K\x04" + "t\x94Q\x94.";
  const std::string protocol4 = "\x80\x04\x95"s + le_bytes(body.size(), 8) + body;
  EXPECT_EQ(rejection(archive({{"s/data.pkl", protocol4}, {"s/data/0", std::string(16, 'x')}})),
            "");
  EXPECT_THAT(
      rejection(archive({{"s/data.pkl", protocol4}, {"s/data/0", std::string(15, 'x')}})),
      HasSubstr("record 's/data/0' holds 15 bytes but its storage needs 16 (4 Float elements)"));
}

TEST(ArchiveCheckTest, RejectsInvalidStorageDeclarations) {
  EXPECT_THAT(
      rejection(data_pickle_archive(storage_pickle(global("torch", "WeirdStorage"), "0", "K\x01"))),
      HasSubstr("pickle 'archive/data.pkl' declares storage '0' of unknown type "
                "'torch.WeirdStorage'"));
  EXPECT_THAT(
      rejection(data_pickle_archive(storage_pickle(global("os", "FloatStorage"), "0", "K\x01"))),
      HasSubstr("of unknown type 'os.FloatStorage'"));
  EXPECT_THAT(rejection(data_pickle_archive(
                  storage_pickle(global("torch", "FloatStorage"), "0", binint(-1)))),
              HasSubstr("declares storage '0' with a negative element count (-1)"));
  EXPECT_THAT(
      rejection(data_pickle_archive(storage_pickle(
          global("torch", "FloatStorage"), "0", std::string("\x8a\x09", 2) + std::string(9, 1)))),
      HasSubstr("has an element count that is not a 64-bit integer"));
  EXPECT_THAT(
      rejection(data_pickle_archive(
          storage_pickle(global("torch", "DoubleStorage"), "0", binint(0x7FFFFFFF)))),
      HasSubstr("record 'archive/data/0' holds 16 bytes but its storage needs 17179869176"));
  EXPECT_THAT(rejection(data_pickle_archive(kProto2 + "NQ.")),
              HasSubstr("a persistent id is not a tuple"));
  EXPECT_THAT(rejection(data_pickle_archive(kProto2 + "(" + unicode("module") +
                                            global("torch", "FloatStorage") + unicode("0") +
                                            unicode("cpu") + "K\x01tQ.")),
              HasSubstr("is not a 5-tuple starting with 'storage'"));
}

// ------------------------------------------------------------------------------------------------
// Hostile pickles

TEST(ArchiveCheckTest, RejectsMalformedPickles) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {kProto2 + "\xff.", "unknown opcode 0xff"},
      {kProto2 + "0.", "stack underflow"},
      {kProto2 + "N(\x85.", "stack underflow"},  // TUPLE1 may not reach below the MARK
      {kProto2 + std::string("h\x07.", 3), "memo entry 7 was never stored"},
      {kProto2 + "X" + le_bytes(16, 4) + "abc", "its argument of 16 bytes runs past the end"},
      {kProto2 + "cmodule_without_newline", "newline-terminated argument runs past the end"},
      {kProto2 + "t.", "no MARK to pop to"},
      {kProto2 + "}(NNNu.", "SETITEMS with an odd number of keys and values"},
      {std::string("\x80\x09N.", 4), "unsupported pickle protocol"},
      {kProto2 + std::string(1'100'000, '('), "nested MARKs"},
  };
  for (const auto& [pickle, message] : cases) {
    SCOPED_TRACE(message);
    EXPECT_THAT(rejection(data_pickle_archive(pickle)),
                AllOf(StartsWith("model file 't.pt': pickle 'archive/data.pkl' is malformed at "
                                 "byte "),
                      HasSubstr(message)));
  }
  EXPECT_EQ(rejection(data_pickle_archive(kProto2 + "N")),
            "model file 't.pt': pickle 'archive/data.pkl' ends after 3 bytes without a STOP "
            "opcode; the archive is truncated or corrupted");
}

// ------------------------------------------------------------------------------------------------
// Zip damage

TEST(ArchiveCheckTest, RejectsFilesThatAreNotZipArchives) {
  for (const std::string& bytes : {std::string(), std::string("hello"), std::string(5000, '\0'),
                                   lenet_bytes().substr(0, lenet_bytes().size() / 2)}) {
    EXPECT_EQ(rejection(bytes, "x.pt"),
              "model file 'x.pt' is not a torch archive (no zip end-of-central-directory record)");
  }
}

TEST(ArchiveCheckTest, RejectsAFlippedByteThroughTheCrc) {
  std::vector<ZipRecord> records = read_zip(lenet_bytes());
  const ZipRecord& weight = find_record(records, "lenet/data/4");
  std::string bytes = lenet_bytes();
  bytes[weight.data_offset + 1000] ^= 0x10;
  EXPECT_THAT(rejection(bytes, "lenet.pt"),
              AllOf(StartsWith("model file 'lenet.pt': record 'lenet/data/4' fails its CRC-32 "
                               "check (stored 0xe8a20c64, computed 0x"),
                    HasSubstr("); the archive is corrupted")));

  // In a deflated record the damage shows as a corrupt stream, a wrong length or a CRC mismatch.
  // (The last byte is left alone: its high bits may be padding after the final block.)
  const ZipRecord& code = find_record(records, "lenet/code/__torch__.py");
  ASSERT_EQ(code.method, 8);
  for (size_t at = 0; at + 1 < code.payload.size(); at += 7) {
    std::string damaged = lenet_bytes();
    damaged[code.data_offset + at] ^= 0x5a;
    EXPECT_THAT(rejection(damaged), HasSubstr("record 'lenet/code/__torch__.py'")) << at;
  }
}

TEST(ArchiveCheckTest, RejectsStructuralDamage) {
  const std::string a(10, 'a');
  const std::string good = archive({{"archive/a", a}, {"archive/b", a}});
  ASSERT_EQ(rejection(good), "");
  const size_t directory = le(good, good.size() - 22 + 16, 4);
  const size_t second_entry = directory + 46 + std::string("archive/a").size();

  EXPECT_THAT(rejection(archive({{"archive/a", a}, {"archive/a", a}})),
              HasSubstr("the archive holds two records named 'archive/a'"));

  std::string method = good;
  patch(method, directory + 10, 12, 2);
  EXPECT_THAT(rejection(method), HasSubstr("record 'archive/a' uses compression method 12"));

  std::string encrypted = good;
  patch(encrypted, directory + 8, 1, 2);
  EXPECT_THAT(rejection(encrypted), HasSubstr("record 'archive/a' is encrypted"));

  std::string sizes = good;
  patch(sizes, directory + 20, 11, 4);
  EXPECT_THAT(rejection(sizes), HasSubstr("is stored uncompressed but its sizes differ"));

  std::string beyond = good;
  patch(beyond, second_entry + 20, 0x7FFFFFFF, 4);
  patch(beyond, second_entry + 24, 0x7FFFFFFF, 4);
  EXPECT_THAT(rejection(beyond), HasSubstr("record 'archive/b' claims 2147483647 bytes of data"));

  std::string local = good;
  patch(local, second_entry + 42, 0x7FFFFFF0, 4);
  EXPECT_THAT(rejection(local), HasSubstr("record 'archive/b': its local header"));

  std::string renamed = good;
  renamed[30 + 8] = 'z';  // the first local header's name
  EXPECT_THAT(rejection(renamed), HasSubstr("its local header does not carry the same name"));

  std::string overlap = good;  // record a's data now runs into record b's header
  patch(overlap, directory + 20, 20, 4);
  patch(overlap, directory + 24, 20, 4);
  EXPECT_THAT(rejection(overlap), HasSubstr("records 'archive/a' and 'archive/b' overlap"));

  std::string count = good;
  patch(count, good.size() - 22 + 8, 60000, 2);
  patch(count, good.size() - 22 + 10, 60000, 2);
  EXPECT_THAT(rejection(count), HasSubstr("is too small for the 60000 entries it claims"));

  std::string directory_offset = good;
  patch(directory_offset, good.size() - 22 + 16, good.size(), 4);
  EXPECT_THAT(rejection(directory_offset), HasSubstr("the central directory"));

  std::string disks = good;
  patch(disks, good.size() - 22 + 4, 1, 2);
  EXPECT_THAT(rejection(disks), HasSubstr("multi-disk archives are not supported"));

  std::string deflated = archive({{"archive/a", a}});
  const size_t deflated_directory = le(deflated, deflated.size() - 22 + 16, 4);
  patch(deflated, 8, 8, 2);
  patch(deflated, deflated_directory + 10, 8, 2);
  EXPECT_THAT(rejection(deflated), HasSubstr("record 'archive/a': its deflate stream"));
}

TEST(ArchiveCheckTest, RejectsDamagedZip64Records) {
  std::vector<ZipRecord> records = {stored_record("archive/a", "0123456789")};
  const std::string zip64 = write_zip(records, /*zip64=*/true);
  ASSERT_EQ(rejection(zip64), "");
  const size_t locator = zip64.size() - 22 - 20;
  std::string bad_locator = zip64;
  patch(bad_locator, locator + 8, zip64.size() + 1000, 8);
  EXPECT_THAT(rejection(bad_locator), HasSubstr("where there is no zip64 end record"));

  // Central zip64 extra field too short for the placeholders it must replace.
  const size_t zip64_end = le(zip64, locator + 8, 8);
  const size_t directory = le(zip64, zip64_end + 48, 8);
  std::string short_extra = zip64;
  patch(short_extra, directory + 46 + 9 + 2, 8, 2);
  EXPECT_THAT(rejection(short_extra), HasSubstr("is too short for the sizes it must hold"));
}

// ------------------------------------------------------------------------------------------------
// Robustness: random damage either passes or gives sdk::Error(kInvalidModel), never a crash.

TEST(ArchiveCheckTest, SurvivesRandomMutationsAndTruncationsOfLenet) {
  const std::string& original = lenet_bytes();
  const std::vector<ZipRecord> records = read_zip(original);
  std::mt19937_64 random(20240601);
  std::uniform_int_distribution<size_t> position(0, original.size() - 1);
  std::uniform_int_distribution<int> flip(1, 255);
  size_t rejected = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string mutated = original;
    const size_t at = position(random);
    mutated[at] = static_cast<char>(mutated[at] ^ flip(random));
    const std::string message = rejection(mutated);
    rejected += message.empty() ? 0 : 1;
    // A changed byte inside any record's data always shows (CRC, inflate or storage checks).
    for (const ZipRecord& record : records) {
      if (at >= record.data_offset && at < record.data_offset + record.payload.size()) {
        EXPECT_FALSE(message.empty()) << "byte " << at << " of " << record.name;
      }
    }
  }
  EXPECT_GT(rejected, 1900u);
  for (int i = 0; i < 200; ++i) {
    EXPECT_FALSE(rejection(original.substr(0, position(random))).empty());
  }
}

TEST(ArchiveCheckTest, SurvivesRandomMutationsOfThePickleWithValidCrcs) {
  std::vector<ZipRecord> records = read_zip(lenet_bytes());
  const std::string pickle = find_record(records, "lenet/data.pkl").payload;
  std::mt19937_64 random(7);
  std::uniform_int_distribution<size_t> position(0, pickle.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  const auto check_with_pickle = [&](const std::string& mutated) {
    find_record(records, "lenet/data.pkl") = stored_record("lenet/data.pkl", mutated);
    return rejection(write_zip(records));
  };
  size_t rejected = 0;
  for (int i = 0; i < 1000; ++i) {
    std::string mutated = pickle;
    for (int changes = 1 + i % 3; changes > 0; --changes) {
      mutated[position(random)] = static_cast<char>(byte(random));
    }
    rejected += check_with_pickle(mutated).empty() ? 0 : 1;
  }
  EXPECT_GT(rejected, 100u);
  for (size_t length = 0; length < pickle.size(); ++length) {
    EXPECT_THAT(check_with_pickle(pickle.substr(0, length)), HasSubstr("lenet/data.pkl")) << length;
  }
}

// ------------------------------------------------------------------------------------------------
// Tensor extents

/// A 12-float storage viewed as 3x4 with row stride 5: the last element is at index 13.
at::Tensor view_beyond_storage() {
  const at::Tensor base = torch::arange(12, torch::kFloat);
  at::Tensor view = base.as_strided({3, 4}, {4, 1});
  c10::TensorImpl* impl = view.unsafeGetTensorImpl();
  impl->set_allow_tensor_metadata_change(true);
  const std::vector<int64_t> sizes = {3, 4};
  const std::vector<int64_t> strides = {5, 1};
  impl->set_sizes_and_strides(sizes, strides);
  return view;
}

TEST(TensorExtentsTest, RejectsAViewBeyondItsStorage) {
  EXPECT_EQ(extents_rejection(view_beyond_storage()),
            "mask file 'm.pt': tensor 'value' (shape [3, 4], strides [5, 1], storage offset 0, "
            "Float) reaches byte 56 of a storage that holds 48 bytes; the file is corrupted");

  at::Tensor offset = torch::arange(12, torch::kFloat).as_strided({1, 4}, {4, 1});
  offset.unsafeGetTensorImpl()->set_allow_tensor_metadata_change(true);
  offset.unsafeGetTensorImpl()->set_storage_offset(10);
  EXPECT_THAT(extents_rejection(offset),
              HasSubstr("storage offset 10, Float) reaches byte 56 of a storage that holds 48"));
}

TEST(TensorExtentsTest, NamesABadTensorInsideNestedListsAndDicts) {
  c10::impl::GenericList layers(c10::AnyType::get());
  layers.push_back(torch::ones({2}));
  layers.push_back(view_beyond_storage());
  c10::impl::GenericDict inner(c10::StringType::get(), c10::AnyType::get());
  inner.insert("layers", layers);
  c10::impl::GenericDict outer(c10::StringType::get(), c10::AnyType::get());
  outer.insert("model", c10::ivalue::Tuple::create({c10::IValue(1), c10::IValue(inner)}));
  EXPECT_THAT(extents_rejection(outer),
              HasSubstr("tensor 'value[\"model\"][1][\"layers\"][1]' (shape [3, 4]"));
}

TEST(TensorExtentsTest, AcceptsValidTensorsOfEveryKindAndSurvivesCycles) {
  const at::Tensor base = torch::randn({4, 5});
  c10::impl::GenericList values(c10::AnyType::get());
  values.push_back(base.t());
  values.push_back(base.expand({3, 4, 5}));  // stride 0
  values.push_back(base.slice(1, 1, 4));
  values.push_back(torch::empty({0, 7}));
  values.push_back(at::Tensor());
  values.push_back(torch::ones({4, 5}).to_sparse());
  values.push_back(torch::quantize_per_channel(base, torch::ones({4}) * 0.1,
                                               torch::zeros({4}, torch::kLong), 0, torch::kQInt8));
  values.push_back(torch::quantize_per_tensor(base, 0.1, 0, torch::kQUInt8));
  values.push_back(c10::IValue(values));  // a list that holds itself
  EXPECT_EQ(extents_rejection(values), "");
  values.set(values.size() - 1, c10::IValue());  // break the cycle so the list can be freed
}

TEST(ModuleTensorsTest, NamesTheParameterWhoseStorageIsShort) {
  const torch::jit::Module module = torch::jit::load(test::lenet_model().string());
  at::Tensor weight;
  for (const auto& parameter : module.named_parameters()) {
    if (parameter.name == "fc1.weight") {
      weight = parameter.value;
    }
  }
  ASSERT_TRUE(weight.defined());
  c10::StorageImpl* storage = weight.storage().unsafeGetStorageImpl();
  const size_t bytes = storage->nbytes();
  storage->set_nbytes(100);  // what libtorch builds from a 100-byte record
  const std::string message = module_rejection(module);
  storage->set_nbytes(bytes);
  EXPECT_EQ(message,
            "model file 'm.pt': parameter 'fc1.weight' (shape [120, 256], strides [256, 1], "
            "storage offset 0, Float) reaches byte 122880 of a storage that holds 100 bytes; the "
            "file is corrupted");
}

TEST(ModuleTensorsTest, ChecksBuffersAttributesAndGraphConstants) {
  torch::jit::Module child("Child");
  child.register_buffer("running", torch::zeros({3}));
  torch::jit::Module module("Parent");
  module.register_module("child", child);
  c10::List<at::Tensor> cache;
  cache.push_back(torch::ones({2}));
  module.register_attribute("cache", c10::ListType::ofTensors(), cache);
  module.define("def forward(self, x):\n  return x + 1\n");
  EXPECT_EQ(module_rejection(module), "");

  {
    c10::StorageImpl* storage = child.attr("running").toTensor().storage().unsafeGetStorageImpl();
    storage->set_nbytes(4);
    const std::string message = module_rejection(module);
    storage->set_nbytes(12);
    EXPECT_THAT(message, HasSubstr("buffer 'child.running' (shape [3]"));
  }

  cache.push_back(view_beyond_storage());
  EXPECT_THAT(module_rejection(module), HasSubstr("attribute 'cache[1]' (shape [3, 4]"));
  cache.erase(cache.begin() + 1);
  EXPECT_EQ(module_rejection(module), "");

  const std::shared_ptr<torch::jit::Graph> graph =
      torch::jit::toGraphFunction(module.get_method("forward").function()).graph();
  torch::jit::WithInsertPoint guard(graph->return_node());
  graph->insertConstant(view_beyond_storage());
  EXPECT_THAT(module_rejection(module), AllOf(HasSubstr("tensor constant in method '"),
                                              HasSubstr("forward'"), HasSubstr("reaches byte 56")));
}

}  // namespace
}  // namespace lithe::host
