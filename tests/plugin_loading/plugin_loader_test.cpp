// Drives host::PluginLoader with real shared libraries built by this folder's CMakeLists.txt:
// a text file named like a plugin, a library without entry point, wrong API version, wrong ABI
// tag, a plugin that throws while registering, two plugins with one name, a plugin registering
// an algorithm another plugin owns, and good plugins (tiny, level, the acme sample).
#include "lithe/host/runtime/plugin_loader.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/layer.h"
#include "lithe/sdk/pruner.h"
#include "lithe/sdk/version.h"
#include "lithe/sdk_internal/options_json.h"
#include "support/cli_run.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::ThrowsMessage;

using Status = LoadReport::Status;

/// The path as the loader reports it (it canonicalises every file it loads).
std::string reported(const fs::path& path) { return fs::weakly_canonical(path).string(); }

/// Copies `files` into `dir`, keeping their names; returns the copies.
std::vector<fs::path> copy_into(const fs::path& dir, const std::vector<fs::path>& files) {
  std::vector<fs::path> copies;
  for (const fs::path& file : files) {
    copies.push_back(dir / file.filename());
    fs::copy_file(file, copies.back());
  }
  return copies;
}

/// A config_list entry {"sparsity": sparsity}, as the host would hand it to a pruner.
sdk::Options sparsity_entry(double sparsity) {
  return sdk::options_from_json(nlohmann::ordered_json{{"sparsity", sparsity}}, "/config_list/0");
}

/// The report of `file` among `reports`, or nullopt.
std::optional<LoadReport> report_of(const std::vector<LoadReport>& reports, const fs::path& file) {
  for (const LoadReport& report : reports) {
    if (report.path == fs::weakly_canonical(file)) {
      return report;
    }
  }
  return std::nullopt;
}

class PluginLoaderTest : public ::testing::Test {
 protected:
  PluginRegistry registry_;
  PluginLoader loader_{registry_};
};

TEST_F(PluginLoaderTest, ReportsTextFileNamedLikePluginAsUnloadableNamingItsPath) {
  const LoadReport report = loader_.load_file(LITHE_FIXTURE_GARBAGE);

  EXPECT_EQ(report.status, Status::kFailed);
  EXPECT_THAT(report.message,
              HasSubstr(reported(LITHE_FIXTURE_GARBAGE) + ": cannot load shared library"));
  EXPECT_THAT(report.plugin, IsEmpty());
  EXPECT_THAT(registry_.algorithms(), IsEmpty());
}

TEST_F(PluginLoaderTest, ReportsLibraryWithoutEntryPointNamingItsPath) {
  const LoadReport report = loader_.load_file(LITHE_FIXTURE_NO_ENTRY);

  EXPECT_EQ(report.status, Status::kFailed);
  EXPECT_THAT(report.message, HasSubstr(reported(LITHE_FIXTURE_NO_ENTRY) +
                                        ": has no entry point lithe_get_plugin_info"));
  EXPECT_THAT(registry_.algorithms(), IsEmpty());
}

// The fixture's register_algorithms aborts, so reaching the assertions proves it was not called.
TEST_F(PluginLoaderTest, RefusesOtherSdkApiVersionWithoutCallingRegister) {
  const LoadReport report = loader_.load_file(LITHE_FIXTURE_BAD_API);

  EXPECT_EQ(report.status, Status::kFailed);
  EXPECT_THAT(report.message,
              HasSubstr(reported(LITHE_FIXTURE_BAD_API) +
                        ": built against Lithe SDK API 999; this host provides API " +
                        std::to_string(LITHE_SDK_API_VERSION)));
  EXPECT_THAT(registry_.algorithms(), IsEmpty());
}

TEST_F(PluginLoaderTest, RefusesForeignAbiTagPrintingBothTagsWithoutCallingRegister) {
  const LoadReport report = loader_.load_file(LITHE_FIXTURE_BAD_ABI);

  EXPECT_EQ(report.status, Status::kFailed);
  EXPECT_THAT(report.message, HasSubstr(reported(LITHE_FIXTURE_BAD_ABI) +
                                        ": ABI tag mismatch: plugin "
                                        "'lithe1;torch0.0.0;gcc;cxx11abi1', host '" +
                                        std::string(LITHE_SDK_ABI_TAG) + "'"));
  EXPECT_THAT(registry_.algorithms(), IsEmpty());
}

TEST_F(PluginLoaderTest, RefusesAPluginOfANewerSdkMinorWithoutCallingRegister) {
  const LoadReport report = loader_.load_file(LITHE_FIXTURE_NEWER_SDK);
  EXPECT_EQ(report.status, Status::kFailed);
  EXPECT_THAT(report.message,
              HasSubstr(reported(LITHE_FIXTURE_NEWER_SDK) +
                        ": built against Lithe SDK 1.99; this host provides SDK " +
                        std::to_string(LITHE_SDK_API_VERSION) + "." +
                        std::to_string(LITHE_SDK_MINOR_VERSION) +
                        ", which lacks functions the plugin may call"));
  EXPECT_THAT(registry_.algorithms(), IsEmpty());
}

TEST_F(PluginLoaderTest, LoadsAPluginOfAnOlderSdkMinor) {
  // Tag "lithe1;<toolchain>" as SDK 1.0 plugins wrote it: everything they call still exists.
  const LoadReport report = loader_.load_file(LITHE_FIXTURE_OLDER_SDK);
  EXPECT_EQ(report.status, Status::kLoaded) << report.message;
  EXPECT_EQ(report.plugin, "older_sdk");
}

TEST_F(PluginLoaderTest, LoadsAnSdk13PluginAndRunsItsPrunerWithoutNniCounterparts) {
  const LoadReport report = loader_.load_file(LITHE_FIXTURE_SDK13);
  ASSERT_EQ(report.status, Status::kLoaded) << report.message;
  EXPECT_EQ(report.plugin, "sdk13");
  EXPECT_THAT(registry_.nni_counterparts(), IsEmpty());

  auto pruner = registry_.make_pruner("sdk13", sdk::Options());
  ASSERT_NE(pruner, nullptr);
  // The pruner built through the 1.3 Registry functions prunes: the first 3 of 8 weights.
  sdk::LayerView layer(0, "fc", "Linear", at::arange(1, 9, at::kFloat).reshape({2, 4}),
                       std::nullopt, sparsity_entry(0.375));
  pruner->validate_config(layer.config());
  const std::optional<sdk::Masks> masks = pruner->calc_mask(layer);
  ASSERT_TRUE(masks.has_value());
  EXPECT_TRUE(masks->weight.equal(
      at::tensor({0.F, 0.F, 0.F, 1.F, 1.F, 1.F, 1.F, 1.F}).reshape({2, 4})));
}

TEST_F(PluginLoaderTest, WithdrawsAlgorithmsOfPluginWhoseRegistrationThrows) {
  const LoadReport report = loader_.load_file(LITHE_FIXTURE_THROWS_IN_REGISTER);

  EXPECT_EQ(report.status, Status::kFailed);
  EXPECT_EQ(report.plugin, "faulty");
  EXPECT_THAT(report.message, HasSubstr(reported(LITHE_FIXTURE_THROWS_IN_REGISTER) +
                                        ": plugin 'faulty' failed to register: faulty refuses "
                                        "to register on purpose"));
  EXPECT_EQ(registry_.find(AlgorithmKind::kMasker, "faulty"), nullptr);
  EXPECT_EQ(registry_.find(AlgorithmKind::kPruner, "faulty"), nullptr);
  EXPECT_THAT(registry_.algorithms(), IsEmpty());
  EXPECT_EQ(registry_.find_nni_counterpart("FaultyPruner"), nullptr);
  EXPECT_THAT(registry_.nni_counterparts(), IsEmpty());
  EXPECT_THAT([&] { (void)registry_.make_pruner("faulty", sdk::Options()); },
              ThrowsMessage<sdk::Error>(HasSubstr("unknown pruner 'faulty'")));
}

TEST_F(PluginLoaderTest, AttributesLaterPluginsCorrectlyAfterRegistrationThrew) {
  (void)loader_.load_file(LITHE_FIXTURE_THROWS_IN_REGISTER);
  const LoadReport report = loader_.load_file(LITHE_FIXTURE_TINY);

  ASSERT_EQ(report.status, Status::kLoaded) << report.message;
  const AlgorithmEntry* pruner = registry_.find(AlgorithmKind::kPruner, "tiny");
  ASSERT_NE(pruner, nullptr);
  EXPECT_EQ(pruner->plugin, "tiny");
  EXPECT_EQ(pruner->plugin_path, reported(LITHE_FIXTURE_TINY));
}

// twin_b's register_algorithms aborts: it must be refused before registration.
TEST_F(PluginLoaderTest, RefusesSecondPluginWithSameNameNamingBothPaths) {
  loader_.load_directory(fs::path(LITHE_FIXTURE_ROOT) / "duplicate_plugin");

  const std::vector<LoadReport>& reports = loader_.reports();
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].status, Status::kLoaded) << reports[0].message;
  EXPECT_EQ(reports[0].path, reported(LITHE_FIXTURE_TWIN_A));
  EXPECT_EQ(reports[0].plugin, "twin");
  EXPECT_EQ(reports[1].status, Status::kFailed);
  EXPECT_EQ(reports[1].path, reported(LITHE_FIXTURE_TWIN_B));
  EXPECT_THAT(
      reports[1].message,
      HasSubstr("duplicate plugin 'twin': " + reported(LITHE_FIXTURE_TWIN_B) +
                " has the same name as the already loaded " + reported(LITHE_FIXTURE_TWIN_A)));
}

TEST_F(PluginLoaderTest, RefusesAlgorithmNameOwnedByAnotherPluginNamingBothOwners) {
  const LoadReport level = loader_.load_file(LITHE_PLUGIN_LEVEL);
  ASSERT_EQ(level.status, Status::kLoaded) << level.message;

  loader_.load_directory(fs::path(LITHE_FIXTURE_ROOT) / "duplicate_algorithm");

  const std::optional<LoadReport> copycat = report_of(loader_.reports(), LITHE_FIXTURE_COPYCAT);
  ASSERT_TRUE(copycat.has_value());
  EXPECT_EQ(copycat->status, Status::kFailed);
  EXPECT_THAT(copycat->message,
              HasSubstr(reported(LITHE_FIXTURE_COPYCAT) + ": plugin 'copycat' failed to register"));
  EXPECT_THAT(copycat->message,
              HasSubstr("duplicate pruner 'level': registered by plugin 'level' (" +
                        reported(LITHE_PLUGIN_LEVEL) + ") and again by plugin 'copycat' (" +
                        reported(LITHE_FIXTURE_COPYCAT) + ")"));
  // The first owner keeps the name; what copycat registered before failing is withdrawn.
  const AlgorithmEntry* pruner = registry_.find(AlgorithmKind::kPruner, "level");
  ASSERT_NE(pruner, nullptr);
  EXPECT_EQ(pruner->plugin, "level");
  EXPECT_EQ(registry_.find(AlgorithmKind::kMasker, "copycat"), nullptr);
  EXPECT_NE(registry_.make_pruner("level", sdk::Options()), nullptr);
}

TEST_F(PluginLoaderTest, LoadsGoodPluginFromDirectoryMixedWithBrokenFiles) {
  const fs::path dir = test::scratch_dir("plugin_loading/mixed");
  const std::vector<fs::path> files =
      copy_into(dir, {LITHE_FIXTURE_GARBAGE, LITHE_FIXTURE_NO_ENTRY, LITHE_FIXTURE_BAD_API,
                      LITHE_FIXTURE_BAD_ABI, LITHE_FIXTURE_THROWS_IN_REGISTER, LITHE_FIXTURE_TINY});

  loader_.load_directory(dir);

  const std::vector<LoadReport>& reports = loader_.reports();
  ASSERT_EQ(reports.size(), files.size());
  for (const fs::path& file : files) {
    const std::optional<LoadReport> report = report_of(reports, file);
    ASSERT_TRUE(report.has_value()) << file;
    if (file.filename() == "lithe_plugin_tiny.so") {
      EXPECT_EQ(report->status, Status::kLoaded) << report->message;
      EXPECT_EQ(report->plugin, "tiny");
      EXPECT_EQ(report->version, "0.1.0");
      EXPECT_THAT(report->algorithms, ElementsAre("masker tiny", "pruner tiny"));
    } else {
      EXPECT_EQ(report->status, Status::kFailed) << file;
      EXPECT_THAT(report->message, HasSubstr(reported(file))) << file;
    }
  }

  // The good plugin's pruner works: tiny prunes the last k weights in row-major order.
  std::unique_ptr<sdk::Pruner> pruner = registry_.make_pruner("tiny", sdk::Options());
  sdk::LayerView layer(0, "fc", "Linear", at::arange(10, at::kFloat).reshape({2, 5}), std::nullopt,
                       sparsity_entry(0.3));
  pruner->validate_config(layer.config());
  const std::optional<sdk::Masks> masks = pruner->calc_mask(layer);
  ASSERT_TRUE(masks.has_value());
  const at::Tensor expected =
      at::tensor({1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 0.0f, 0.0f, 0.0f}).reshape({2, 5});
  EXPECT_TRUE(at::equal(masks->weight, expected)) << masks->weight;
}

TEST_F(PluginLoaderTest, LevelPluginPrunerZeroesSmallestMagnitudes) {
  const LoadReport report = loader_.load_file(LITHE_PLUGIN_LEVEL);
  ASSERT_EQ(report.status, Status::kLoaded) << report.message;
  EXPECT_THAT(report.algorithms, ElementsAre("masker level", "pruner level"));

  std::unique_ptr<sdk::Pruner> pruner = registry_.make_pruner("level", sdk::Options());
  sdk::LayerView layer(0, "fc", "Linear", at::tensor({4.0f, -1.0f, 3.0f, -2.0f}).reshape({2, 2}),
                       std::nullopt, sparsity_entry(0.5));
  const std::optional<sdk::Masks> masks = pruner->calc_mask(layer);

  ASSERT_TRUE(masks.has_value());
  EXPECT_TRUE(at::equal(masks->weight, at::tensor({1.0f, 0.0f, 1.0f, 0.0f}).reshape({2, 2})))
      << masks->weight;
}

// The out-of-tree sample, built in tree here: balanced sparsity, each row keeps its own largest
// |w|, which differs from level's global choice on this weight.
TEST_F(PluginLoaderTest, AcmeSamplePrunesSmallestMagnitudesOfEachRow) {
  const LoadReport report = loader_.load_file(LITHE_FIXTURE_ACME);
  ASSERT_EQ(report.status, Status::kLoaded) << report.message;
  EXPECT_THAT(report.algorithms, ElementsAre("masker acme_magnitude", "pruner acme_magnitude"));

  std::unique_ptr<sdk::Pruner> pruner = registry_.make_pruner("acme_magnitude", sdk::Options());
  const at::Tensor weight =
      at::tensor({1.0f, -5.0f, 3.0f, 2.0f, 10.0f, -0.5f, 7.0f, 8.0f}).reshape({2, 1, 2, 2});
  sdk::LayerView layer(0, "conv", "Conv2d", weight, std::nullopt, sparsity_entry(0.5));
  const std::optional<sdk::Masks> masks = pruner->calc_mask(layer);

  ASSERT_TRUE(masks.has_value());
  const at::Tensor expected =
      at::tensor({0.0f, 1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 1.0f}).reshape({2, 1, 2, 2});
  EXPECT_TRUE(at::equal(masks->weight, expected)) << masks->weight;
}

TEST_F(PluginLoaderTest, AcmeSampleMaskerKeepsEqualCountPerRowOfLinearWeight) {
  ASSERT_EQ(loader_.load_file(LITHE_FIXTURE_ACME).status, Status::kLoaded);
  auto masker = registry_.make_masker("acme_magnitude", sdk::Options());
  // Distinct magnitudes, so the expected kept set of each row is exact.
  const at::Tensor weight = (at::randperm(96, at::kFloat) + 1).reshape({8, 12});
  sdk::LayerView layer(0, "fc", "Linear", weight, at::zeros({8}), sdk::Options());

  const std::optional<sdk::Masks> masks = masker->calc_mask(layer, 0.4);

  ASSERT_TRUE(masks.has_value());
  EXPECT_FALSE(masks->bias.has_value());
  const int64_t pruned_per_row = sdk::prune_count(12, 0.4);
  for (int64_t row = 0; row < 8; ++row) {
    const at::Tensor mask_row = masks->weight[row];
    EXPECT_EQ((mask_row == 0).sum().item<int64_t>(), pruned_per_row) << "row " << row;
    const at::Tensor kept = weight[row].abs().masked_select(mask_row != 0);
    const at::Tensor pruned = weight[row].abs().masked_select(mask_row == 0);
    EXPECT_GT(kept.min().item<float>(), pruned.max().item<float>()) << "row " << row;
  }
}

TEST_F(PluginLoaderTest, LoadingSameFileTwiceIsIdempotent) {
  const fs::path tiny(LITHE_FIXTURE_TINY);
  const LoadReport first = loader_.load_file(tiny);
  const LoadReport again = loader_.load_file(tiny);
  // The same file through another spelling of its path, and through its directory.
  const LoadReport respelled = loader_.load_file(tiny.parent_path() / ".." /
                                                 tiny.parent_path().filename() / tiny.filename());
  loader_.load_directory(tiny.parent_path());

  ASSERT_EQ(first.status, Status::kLoaded) << first.message;
  EXPECT_EQ(again.status, Status::kLoaded) << again.message;
  EXPECT_EQ(respelled.status, Status::kLoaded) << respelled.message;
  EXPECT_EQ(again.path, first.path);
  EXPECT_EQ(respelled.path, first.path);
  EXPECT_EQ(loader_.reports().size(), 1u);
  EXPECT_EQ(registry_.algorithms().size(), 2u);
}

TEST_F(PluginLoaderTest, LoadDirectoryIgnoresMissingDirectoryAndFilesNotNamedLikePlugins) {
  const fs::path dir = test::scratch_dir("plugin_loading/misnamed");
  fs::copy_file(LITHE_FIXTURE_TINY, dir / "libtiny.so");
  fs::copy_file(LITHE_FIXTURE_TINY, dir / "lithe_plugin_tiny.so.bak");

  loader_.load_directory(dir);
  loader_.load_directory(dir / "does_not_exist");

  EXPECT_THAT(loader_.reports(), IsEmpty());
  EXPECT_THAT(registry_.algorithms(), IsEmpty());
}

/// Saves $LITHE_PLUGIN_PATH and restores it after each test.
class PluginSearchPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* value = std::getenv("LITHE_PLUGIN_PATH"); value != nullptr) {
      saved_ = value;
    }
  }
  void TearDown() override {
    if (saved_.has_value()) {
      ::setenv("LITHE_PLUGIN_PATH", saved_->c_str(), 1);
    } else {
      ::unsetenv("LITHE_PLUGIN_PATH");
    }
  }
  /// <build>/lib/lithe/plugins: the test binary lives in <build>/tests, like bin/lithe in bin/.
  static fs::path exe_relative_dir() {
    return fs::weakly_canonical(test::binary_dir() / "lib" / "lithe" / "plugins");
  }

  std::optional<std::string> saved_;
};

// Lithe's own plugins first (found from the library), then $LITHE_PLUGIN_PATH, then folders
// given in code: the built-ins own their names.
TEST_F(PluginSearchPathTest, OrdersLibraryDirThenPluginPathEntriesThenCliDirs) {
  ::setenv("LITHE_PLUGIN_PATH", "/env/one::/env/two:", 1);

  std::vector<fs::path> dirs = plugin_search_path({"/cli/a", "/cli/b"});

  ASSERT_EQ(dirs.size(), 5u);
  dirs.front() = fs::weakly_canonical(dirs.front());
  EXPECT_THAT(dirs, ElementsAre(exe_relative_dir(), fs::path("/env/one"), fs::path("/env/two"),
                                fs::path("/cli/a"), fs::path("/cli/b")));
}

TEST_F(PluginSearchPathTest, WithoutPluginPathUsesLibraryDirThenCliDirs) {
  ::unsetenv("LITHE_PLUGIN_PATH");

  std::vector<fs::path> dirs = plugin_search_path({"/cli/a"});

  ASSERT_EQ(dirs.size(), 2u);
  dirs.front() = fs::weakly_canonical(dirs.front());
  EXPECT_THAT(dirs, ElementsAre(exe_relative_dir(), fs::path("/cli/a")));
}

TEST_F(PluginSearchPathTest, LoadSearchPathLoadsLibraryDirThenPluginPathThenCliDirs) {
  const fs::path fixtures(LITHE_FIXTURE_ROOT);
  ::setenv("LITHE_PLUGIN_PATH", (fixtures / "tiny").c_str(), 1);
  PluginRegistry registry;
  PluginLoader loader(registry);

  loader.load_search_path({fixtures / "duplicate_plugin"});

  const std::vector<LoadReport> reports = loader.reports();
  auto position = [&](const fs::path& file) {
    const auto it = std::find_if(reports.begin(), reports.end(), [&](const LoadReport& r) {
      return r.path == fs::weakly_canonical(file);
    });
    EXPECT_NE(it, reports.end()) << file << " was not loaded";
    EXPECT_EQ(it == reports.end() ? Status::kFailed : it->status, Status::kLoaded) << file;
    return it - reports.begin();
  };
  const auto level = position(LITHE_PLUGIN_LEVEL);
  const auto tiny = position(LITHE_FIXTURE_TINY);
  const auto twin = position(LITHE_FIXTURE_TWIN_A);
  EXPECT_LT(level, tiny);
  EXPECT_LT(tiny, twin);
  EXPECT_NE(registry.find(AlgorithmKind::kPruner, "tiny"), nullptr);
}

// Names are owned: a copy of a built-in plugin in a --plugin-dir is refused, naming the file it
// clashes with and the override, and the built-in keeps its algorithms.
TEST_F(PluginSearchPathTest, SameNamedPluginInCliDirIsRefusedAndTheBuiltInKeepsItsName) {
  ::unsetenv("LITHE_PLUGIN_PATH");
  const fs::path dir = test::scratch_dir("plugin_loading/shadow");
  const fs::path shadow = copy_into(dir, {LITHE_PLUGIN_LEVEL}).front();
  PluginRegistry registry;
  PluginLoader loader(registry);

  loader.load_search_path({dir});

  const std::optional<LoadReport> copy = report_of(loader.reports(), shadow);
  ASSERT_TRUE(copy.has_value());
  EXPECT_EQ(copy->status, Status::kFailed);
  EXPECT_THAT(copy->message,
              HasSubstr("duplicate plugin 'level': " + reported(shadow) +
                        " has the same name as the already loaded " +
                        reported(LITHE_PLUGIN_LEVEL)));
  EXPECT_THAT(copy->message, HasSubstr("--override-plugin level"));
  const AlgorithmEntry* pruner = registry.find(AlgorithmKind::kPruner, "level");
  ASSERT_NE(pruner, nullptr);
  EXPECT_EQ(pruner->plugin_path, reported(LITHE_PLUGIN_LEVEL));
}

// The documented override: the later plugin of that name replaces the built-in entirely.
TEST_F(PluginSearchPathTest, AllowedOverrideReplacesTheBuiltInPluginOfTheSameName) {
  ::unsetenv("LITHE_PLUGIN_PATH");
  const fs::path dir = test::scratch_dir("plugin_loading/override");
  const fs::path replacement = copy_into(dir, {LITHE_PLUGIN_LEVEL}).front();
  PluginRegistry registry;
  PluginLoader loader(registry);
  loader.allow_override("level");

  loader.load_search_path({dir});

  const std::optional<LoadReport> copy = report_of(loader.reports(), replacement);
  const std::optional<LoadReport> builtin = report_of(loader.reports(), LITHE_PLUGIN_LEVEL);
  ASSERT_TRUE(copy.has_value());
  ASSERT_TRUE(builtin.has_value());
  EXPECT_EQ(copy->status, Status::kLoaded) << copy->message;
  EXPECT_EQ(copy->overrides, "overrides plugin 'level' of " + reported(LITHE_PLUGIN_LEVEL));
  EXPECT_EQ(builtin->overrides, "overridden by " + reported(replacement));
  EXPECT_THAT(builtin->algorithms, IsEmpty());
  const AlgorithmEntry* pruner = registry.find(AlgorithmKind::kPruner, "level");
  ASSERT_NE(pruner, nullptr);
  EXPECT_EQ(pruner->plugin_path, reported(replacement));
  EXPECT_NE(registry.make_pruner("level", sdk::Options()), nullptr);
}

// An override by another plugin's name takes over the algorithm names it registers again.
TEST_F(PluginSearchPathTest, AllowedOverrideTakesOverAnAlgorithmOfAnotherPlugin) {
  ::unsetenv("LITHE_PLUGIN_PATH");
  PluginRegistry registry;
  PluginLoader loader(registry);
  loader.allow_override("copycat");

  loader.load_search_path({fs::path(LITHE_FIXTURE_ROOT) / "duplicate_algorithm"});

  const std::optional<LoadReport> copycat = report_of(loader.reports(), LITHE_FIXTURE_COPYCAT);
  const std::optional<LoadReport> level = report_of(loader.reports(), LITHE_PLUGIN_LEVEL);
  ASSERT_TRUE(copycat.has_value());
  ASSERT_TRUE(level.has_value());
  EXPECT_EQ(copycat->status, Status::kLoaded) << copycat->message;
  EXPECT_EQ(copycat->overrides, "overrides pruner 'level' of plugin 'level' (" +
                                    reported(LITHE_PLUGIN_LEVEL) + ")");
  EXPECT_THAT(level->algorithms, Not(Contains("pruner level")));
  EXPECT_THAT(level->algorithms, Contains("masker level"));
  const AlgorithmEntry* pruner = registry.find(AlgorithmKind::kPruner, "level");
  ASSERT_NE(pruner, nullptr);
  EXPECT_EQ(pruner->plugin, "copycat");
}

// "unknown algorithm" says where plugins were looked for and what each folder held.
TEST_F(PluginSearchPathTest, UnknownAlgorithmMessageListsEveryFolderSearched) {
  const fs::path empty = test::scratch_dir("plugin_loading/empty_folder");
  ::setenv("LITHE_PLUGIN_PATH", "/nonexistent/lithe/plugins", 1);
  PluginRegistry registry;
  PluginLoader loader(registry);

  loader.load_search_path({empty, fs::path(LITHE_FIXTURE_ROOT) / "throws_in_register"});

  EXPECT_THAT([&] { registry.make_pruner("snip", sdk::Options()); },
              ThrowsMessage<sdk::Error>(AllOf(
                  HasSubstr("unknown pruner 'snip'"), HasSubstr("plugin folders searched: "),
                  HasSubstr(exe_relative_dir().string() + " ("),
                  HasSubstr("/nonexistent/lithe/plugins (missing)"),
                  HasSubstr(empty.string() + " (no lithe_plugin_* files)"),
                  HasSubstr("throws_in_register (0 loaded, 1 failed)"))));
}

// Trust (ssh StrictModes): code that anyone else could replace is not loaded.
class PluginTrustTest : public PluginSearchPathTest {
 protected:
  void SetUp() override {
    PluginSearchPathTest::SetUp();
    ::unsetenv("LITHE_ALLOW_INSECURE_PLUGINS");
    ::umask(022);
  }
  void TearDown() override {
    ::unsetenv("LITHE_ALLOW_INSECURE_PLUGINS");
    PluginSearchPathTest::TearDown();
  }
  PluginRegistry registry_;
  PluginLoader loader_{registry_};
};

TEST_F(PluginTrustTest, AWorldWritableDirectoryIsRefusedWithOneReport) {
  const fs::path dir = test::scratch_dir("plugin_loading/trust_dir");
  copy_into(dir, {LITHE_FIXTURE_TINY});
  fs::permissions(dir, fs::perms::all);  // 0777

  loader_.load_directory(dir);

  ASSERT_EQ(loader_.reports().size(), 1u);
  EXPECT_EQ(loader_.reports()[0].status, Status::kFailed);
  EXPECT_THAT(loader_.reports()[0].message,
              AllOf(HasSubstr("refused"), HasSubstr("is writable by others (mode 0777)"),
                    HasSubstr("LITHE_ALLOW_INSECURE_PLUGINS=1")));
  EXPECT_THAT(registry_.algorithms(), IsEmpty());
  fs::permissions(dir, fs::perms::group_write, fs::perm_options::remove);
  fs::permissions(dir, fs::perms::others_write, fs::perm_options::remove);
}

TEST_F(PluginTrustTest, AGroupWritablePluginFileIsRefused) {
  const fs::path dir = test::scratch_dir("plugin_loading/trust_file");
  const fs::path copy = copy_into(dir, {LITHE_FIXTURE_TINY}).front();
  fs::permissions(copy, fs::perms::group_write, fs::perm_options::add);

  const LoadReport report = loader_.load_file(copy);

  EXPECT_EQ(report.status, Status::kFailed);
  EXPECT_THAT(report.message, HasSubstr("is writable by its group"));
  EXPECT_THAT(registry_.algorithms(), IsEmpty());
}

TEST_F(PluginTrustTest, ALinkIntoAWritableDirectoryIsJudgedByWhereItLeads) {
  const fs::path root = test::scratch_dir("plugin_loading/trust_link");
  fs::create_directories(root / "open/plugins");
  copy_into(root / "open/plugins", {LITHE_FIXTURE_TINY});
  fs::permissions(root / "open", fs::perms::all);  // anyone may rename plugins/ away
  fs::create_symlink(root / "open/plugins", root / "link");

  loader_.load_directory(root / "link");

  ASSERT_EQ(loader_.reports().size(), 1u);
  EXPECT_THAT(loader_.reports()[0].message,
              AllOf(HasSubstr((root / "open").string() + "' is writable by others"),
                    HasSubstr("it resolves to '" + (root / "open/plugins").string())));
  EXPECT_THAT(registry_.algorithms(), IsEmpty());
  fs::permissions(root / "open", fs::perms::others_write | fs::perms::group_write,
                  fs::perm_options::remove);
}

TEST_F(PluginTrustTest, ARelativePluginPathEntryIsRefused) {
  ::setenv("LITHE_PLUGIN_PATH", "relative/plugins", 1);

  loader_.load_search_path({});

  const auto refused = std::find_if(loader_.reports().begin(), loader_.reports().end(),
                                    [](const LoadReport& r) { return r.path == "relative/plugins"; });
  ASSERT_NE(refused, loader_.reports().end());
  EXPECT_THAT(refused->message, HasSubstr("LITHE_PLUGIN_PATH entry 'relative/plugins' is relative"));
}

TEST_F(PluginTrustTest, TheOptOutLoadsAnInsecureDirectory) {
  const fs::path dir = test::scratch_dir("plugin_loading/trust_opt_out");
  copy_into(dir, {LITHE_FIXTURE_TINY});
  fs::permissions(dir, fs::perms::all);
  ::setenv("LITHE_ALLOW_INSECURE_PLUGINS", "1", 1);

  loader_.load_directory(dir);

  ASSERT_EQ(loader_.reports().size(), 1u);
  EXPECT_EQ(loader_.reports()[0].status, Status::kLoaded) << loader_.reports()[0].message;
  EXPECT_NE(registry_.find(AlgorithmKind::kPruner, "tiny"), nullptr);
  fs::permissions(dir, fs::perms::others_write | fs::perms::group_write, fs::perm_options::remove);
}

}  // namespace
}  // namespace lithe::host

namespace lithe::host {
namespace {

// A segfault inside a plugin ends the process as before (SIGSEGV, exit status 139 from a shell),
// but first says which algorithm, layer and call were running and which file the faulting code
// is in.
TEST(PluginCrashReportTest, SegfaultInsidePluginNamesThePluginCallAndItsFile) {
  const fs::path out = test::scratch_dir("plugin_loading/crash");
  test::write_text(out / "config.json",
                   R"({"algorithm": "crasher", "config_list": [{"sparsity": 0.5,
                       "op_types": ["Conv2d"]}]})");
  const test::CliRun run = test::run_shell(
      "{ " + test::lithe_cli().string() + " compress --plugin-dir " +
      fs::path(LITHE_FIXTURE_CRASHER).parent_path().string() + " --model " +
      test::lenet_model().string() + " --config " + (out / "config.json").string() +
      " --output " + (out / "pruned.pt").string() + "; echo \"exit status $?\"; } 2>&1");

  EXPECT_THAT(run.out, HasSubstr("exit status 139")) << run.out;
  EXPECT_THAT(run.out, HasSubstr("lithe: fatal SIGSEGV (invalid memory access) while running "
                                 "pruner 'crasher' on layer 'conv1', in calc_mask(); the "
                                 "faulting code is in " +
                                 reported(LITHE_FIXTURE_CRASHER)))
      << run.out;
  EXPECT_FALSE(fs::exists(out / "pruned.pt"));
}

}  // namespace
}  // namespace lithe::host

namespace lithe::host {
namespace {

// The CLI side of the override: refused without --override-plugin (a warning naming it), and
// with it the listing shows who replaced whom; the replaced file owns nothing any more.
TEST(PluginOverrideCliTest, OverridePluginFlagReplacesTheBuiltInAndTheListingSaysSo) {
  const fs::path dir = test::scratch_dir("plugin_loading/override_cli");
  const fs::path copy = copy_into(dir, {LITHE_PLUGIN_LEVEL}).front();

  const test::CliRun refused = test::run_lithe("plugins --plugin-dir " + dir.string());
  EXPECT_EQ(refused.exit_code, 0) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("FAILED  duplicate plugin 'level': " + reported(copy)));
  EXPECT_THAT(refused.out, HasSubstr("(--override-plugin level)"));

  const test::CliRun replaced =
      test::run_lithe("plugins --plugin-dir " + dir.string() + " --override-plugin level");
  EXPECT_EQ(replaced.exit_code, 0) << replaced.out;
  EXPECT_THAT(replaced.out, HasSubstr("lithe: note: plugin 'level' (" + reported(copy) +
                                      ") overrides plugin 'level' of " +
                                      reported(LITHE_PLUGIN_LEVEL)));
  const std::string builtin_block =
      "  loaded  level 1.2.0  " + reported(LITHE_PLUGIN_LEVEL) + "\n          (overridden by " +
      reported(copy) + ")\n  loaded  ";
  EXPECT_THAT(replaced.out, HasSubstr(builtin_block)) << replaced.out;
  EXPECT_THAT(replaced.out, HasSubstr("  loaded  level 1.2.0  " + reported(copy) +
                                      "\n          (overrides plugin 'level' of " +
                                      reported(LITHE_PLUGIN_LEVEL) + ")\n          masker level"))
      << replaced.out;
}

}  // namespace
}  // namespace lithe::host
