#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>

#include "lithe/host/session/pruning_session.h"
#include "lithe/host/io/file_io.h"
#include "lithe/host/model/apply_compression_results.h"
#include "lithe/host/io/mask_file.h"
#include "lithe/host/model/model.h"
#include "lithe/sdk/error.h"
#include "support/paths.h"
#include "support/registry.h"

namespace lithe::host {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

NamedMasks prune_lenet(Model& model, double sparsity) {
  PruningSession session(model, test::level_registry(),
                         {"level",
                          R"([{"sparsity": )" + std::to_string(sparsity) +
                              R"(, "op_types": ["default"]}])",
                          "{}", "t"});
  session.compress();
  return session.masks();
}

TEST(MaskFileTest, RoundTripsTheNniLayoutIncludingNoneBiases) {
  NamedMasks masks;
  sdk::Masks with_bias;
  with_bias.weight = torch::randint(0, 2, {4, 3}).to(torch::kFloat);
  with_bias.bias = torch::ones({4});
  sdk::Masks without_bias;
  without_bias.weight = torch::zeros({2, 2, 1, 1});
  masks.emplace_back("fc", with_bias);
  masks.emplace_back("conv", without_bias);
  const NamedMasks back = deserialize_masks(serialize_masks(masks), "memory");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].first, "fc");
  EXPECT_TRUE(back[0].second.weight.equal(with_bias.weight));
  EXPECT_TRUE(back[0].second.bias->equal(*with_bias.bias));
  EXPECT_EQ(back[1].first, "conv");
  EXPECT_FALSE(back[1].second.bias.has_value());
}

TEST(MaskFileTest, MalformedFilesAreRejectedNamingTheFile) {
  EXPECT_THAT([] { deserialize_masks("not a pickle", "bad.pt"); },
              ThrowsMessage<sdk::Error>(HasSubstr("mask file 'bad.pt' is not a torch archive")));
  c10::impl::GenericDict flat(c10::StringType::get(), c10::AnyType::get());
  flat.insert("fc1", torch::ones({2}));
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(flat));
  EXPECT_THAT([&] { deserialize_masks(std::string(bytes.begin(), bytes.end()), "flat.pt"); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "mask file 'flat.pt', layer 'fc1': must map to {'weight': ..., 'bias': ...}")));
}

TEST(MaskFileTest, ApplyCompressionResultsReproducesThePrunedWeights) {
  auto pruned = load_torchscript_model(test::lenet_model());
  const NamedMasks masks = prune_lenet(*pruned, 0.7);
  const auto dir = test::scratch_dir("apply_round_trip");
  save_masks(masks, dir / "mask.pth");

  auto fresh = load_torchscript_model(test::lenet_model());
  apply_compression_results(*fresh, dir / "mask.pth");
  for (const auto& [name, m] : masks) {
    EXPECT_TRUE(fresh->find_module(name)->weight->equal(*pruned->find_module(name)->weight))
        << name;
  }
}

TEST(MaskFileTest, ApplyValidatesEverythingBeforeChangingAnyWeight) {
  auto model = load_torchscript_model(test::lenet_model());
  const at::Tensor conv1_before = model->find_module("conv1")->weight->clone();
  NamedMasks masks;
  sdk::Masks good;
  good.weight = torch::zeros({6, 1, 5, 5});
  sdk::Masks wrong;
  wrong.weight = torch::zeros({16, 6, 3, 3});
  masks.emplace_back("conv1", good);
  masks.emplace_back("conv2", wrong);
  EXPECT_THAT([&] { apply_compression_results(*model, masks, "m.pth"); },
              ThrowsMessage<sdk::Error>(HasSubstr(
                  "mask file 'm.pth', layer 'conv2': weight mask shape [16, 6, 3, 3] does not "
                  "match the weight shape [16, 6, 5, 5]")));
  EXPECT_TRUE(model->find_module("conv1")->weight->equal(conv1_before));

  NamedMasks unknown;
  unknown.emplace_back("conv9", good);
  EXPECT_THAT([&] { apply_compression_results(*model, unknown, "m.pth"); },
              ThrowsMessage<sdk::Error>(HasSubstr("the model has no module named 'conv9'")));
}

TEST(AtomicWriteTest, ReplacesContentAndLeavesNoTemporaryFiles) {
  const auto dir = test::scratch_dir("atomic_write");
  write_file_atomic(dir / "out.bin", "first version");
  write_file_atomic(dir / "out.bin", "second");
  EXPECT_EQ(read_file(dir / "out.bin"), "second");
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(AtomicWriteTest, FailureLeavesTheExistingTargetUntouched) {
  const auto dir = test::scratch_dir("atomic_write_failure");
  // A directory is not a file to replace: refused before anything is written.
  std::filesystem::create_directories(dir / "target" / "keep");
  EXPECT_THAT([&] { write_file_atomic(dir / "target", "data"); },
              ThrowsMessage<sdk::Error>(HasSubstr("is a directory; an output must be a regular file")));
  EXPECT_TRUE(std::filesystem::is_directory(dir / "target" / "keep"));
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1) << "temporary file left behind";
  EXPECT_THAT([&] { write_file_atomic(dir / "missing_dir" / "x", "data"); },
              ThrowsMessage<sdk::Error>(HasSubstr("missing_dir/x")));
}

TEST(PythonInteropTest, PythonLoadsOurMasksAndOurModel) {
  auto model = load_torchscript_model(test::lenet_model());
  const auto dir = test::scratch_dir("python_interop");
  const NamedMasks masks = prune_lenet(*model, 0.5);
  save_masks(masks, dir / "mask.pth");
  model->save(dir / "model.pt");
  const std::string script =
      "import torch, sys\n"
      "m = torch.load(sys.argv[1], weights_only=True)\n"
      "assert sorted(m) == ['conv1', 'conv2', 'fc1', 'fc2', 'fc3'], sorted(m)\n"
      "assert int((m['fc1']['weight'] == 0).sum()) == 15360\n"
      "assert m['fc1']['bias'].shape == (120,)\n"
      "net = torch.jit.load(sys.argv[2])\n"
      "assert int((net.fc1.weight == 0).sum()) == 15360\n"
      "assert net(torch.randn(2, 1, 28, 28)).shape == (2, 10)\n"
      "print('ok')\n";
  {
    std::ofstream out(dir / "check.py");
    out << script;
  }
  // The project's Python: torch of the release Lithe is built against.
  const std::string command = test::python_executable().string() + " " +
                              (dir / "check.py").string() + " " +
                              (dir / "mask.pth").string() + " " + (dir / "model.pt").string();
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
}

}  // namespace
}  // namespace lithe::host
