// OnnxRuntimeSession: ONNX Runtime's C API opened at run time from the library inside the
// onnxruntime wheel of the project's .venv (scripts/install-deps.sh). It runs Lithe's own ONNX
// files in process and computes what the TorchScript model computes; ORT's refusals come back as
// errors carrying ORT's message, and the session stays usable after a failed run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "lithe/host/export/onnx_export.h"
#include "lithe/host/export/onnx_runtime.h"
#include "lithe/sdk/error.h"
#include "support/conformance_models.h"
#include "support/paths.h"

namespace lithe {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string onnx_of(const torch::jit::Module& module, const std::vector<int64_t>& shape) {
  host::OnnxExportOptions options;
  options.input_shape = shape;
  return host::export_onnx(module, options);
}

TEST(OnnxRuntimeSessionTest, RunsLithesOnnxFileInProcessAndComputesWhatTorchScriptComputes) {
  torch::jit::Module model = test::load_conformance_model("vgg_bn");
  model.eval();
  host::OnnxRuntimeSession session(test::onnxruntime_library(), "--onnxruntime",
                                   onnx_of(model, {2, 3, 32, 32}), 1);
  EXPECT_EQ(session.version().rfind("1.", 0), 0u) << session.version();
  // Two runs of one session on different inputs, each as the TorchScript forward computes it.
  for (const uint64_t seed : {1u, 2u}) {
    const at::Tensor x = at::randn({2, 3, 32, 32}, at::detail::createCPUGenerator(seed));
    const at::Tensor want = model.forward({x}).toTensor();
    const at::Tensor got = session.run(x);
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-5))
        << "max |ort - torchscript| " << (got - want).abs().max().item<double>();
  }
}

TEST(OnnxRuntimeSessionTest, OrtsRefusalsCarryItsMessageAndTheSessionSurvivesAFailedRun) {
  try {
    host::OnnxRuntimeSession bad(test::onnxruntime_library(), "--onnxruntime",
                                 "this is not a serialized ModelProto", 1);
    FAIL() << "ORT accepted bytes that are not a model";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), sdk::Errc::kUnsupported);
    EXPECT_THAT(e.what(), AllOf(HasSubstr("ONNX Runtime 1."), HasSubstr("could not load the ONNX "
                                                                       "model")));
  }
  torch::jit::Module model = test::load_conformance_model("lenet");
  model.eval();
  host::OnnxRuntimeSession session(test::onnxruntime_library(), "--onnxruntime",
                                   onnx_of(model, {1, 1, 28, 28}), 2);
  try {
    (void)session.run(at::zeros({1, 3, 28, 28}));  // the file is for one channel
    FAIL() << "ORT ran an input of the wrong shape";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), sdk::Errc::kUnsupported);
    EXPECT_THAT(e.what(), HasSubstr("could not run the model"));
  }
  const at::Tensor x = at::randn({1, 1, 28, 28}, at::detail::createCPUGenerator(3));
  EXPECT_TRUE(at::allclose(session.run(x), model.forward({x}).toTensor(), 1e-5, 1e-5));
}

TEST(OnnxRuntimeSessionTest, ALibraryWithoutOrtsEntryPointIsRefusedBeforeAnyModel) {
  // Needs no ORT: the SDK's own library is a whole shared object that is not ONNX Runtime.
  const fs::path sdk = test::binary_dir() / "lib/liblithe_sdk.so";
  try {
    (void)host::OnnxRuntimeSession::load_library(sdk, "LITHE_ONNXRUNTIME");
    FAIL() << "the SDK library was taken for ONNX Runtime";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), sdk::Errc::kInvalidConfig);
    EXPECT_THAT(e.what(), AllOf(HasSubstr("LITHE_ONNXRUNTIME " + sdk.string()),
                                HasSubstr("exports no OrtGetApiBase")));
  }
}

TEST(OnnxRuntimeSessionTest, ALibraryOthersCouldReplaceIsRefusedAsAPluginWouldBe) {
  // A copy of the SDK library that others may write: refused before its bytes are read (the
  // trust rule of plugins), so the message is about the mode, not about OrtGetApiBase.
  const fs::path dir =
      fs::temp_directory_path() / ("lithe_ort_trust_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec);
  const fs::path copy = dir / "libonnxruntime.so";
  fs::copy_file(test::binary_dir() / "lib/liblithe_sdk.so", copy,
                fs::copy_options::overwrite_existing);
  fs::permissions(copy, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                            fs::perms::group_write | fs::perms::others_read |
                            fs::perms::others_write);
  try {
    (void)host::OnnxRuntimeSession::load_library(copy, "--onnxruntime");
    ADD_FAILURE() << "a library writable by others was opened";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), sdk::Errc::kInvalidConfig);
    EXPECT_THAT(e.what(), AllOf(HasSubstr("--onnxruntime " + copy.string()),
                                HasSubstr("writable by others"), HasSubstr("chmod go-w")));
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lithe
