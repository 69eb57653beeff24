// The 1.3 header names (host/compat) still compile and still declare what they declared, so an
// embedder's code written against Lithe 1.3 builds unchanged for one minor version.
#include <gtest/gtest.h>

#include <type_traits>

#include "lithe/host/archive_check.h"
#include "lithe/host/compressor.h"
#include "lithe/host/config_list.h"
#include "lithe/host/dataset.h"
#include "lithe/host/dependency.h"
#include "lithe/host/export.h"
#include "lithe/host/flops.h"
#include "lithe/host/json_document.h"
#include "lithe/host/latency.h"
#include "lithe/host/model.h"
#include "lithe/host/onnx_export.h"
#include "lithe/host/output_paths.h"
#include "lithe/host/plugin_loader.h"
#include "lithe/host/plugin_registry.h"
#include "lithe/host/process_group.h"
#include "lithe/host/quantization_session.h"
#include "lithe/host/speedup.h"
#include "lithe/host/staged_file.h"
#include "lithe/host/threads.h"
#include "lithe/host/trainer.h"
#include "lithe/host/training_hooks.h"

namespace lithe::host {
namespace {

TEST(CompatHeadersTest, The13HeaderNamesDeclareTheSameApi) {
  // One declaration per 1.3 header, checked by type so that a forwarder pointing at the wrong
  // area header fails to compile rather than passing silently.
  EXPECT_TRUE((std::is_polymorphic_v<PruningSession>));
  EXPECT_TRUE((std::is_polymorphic_v<QuantizationSession>));
  EXPECT_TRUE((std::is_polymorphic_v<Model>));
  EXPECT_TRUE((std::is_class_v<CompressionConfig>));
  EXPECT_TRUE((std::is_class_v<LayerDependencies>));
  EXPECT_TRUE((std::is_class_v<FlopsReport>));
  EXPECT_TRUE((std::is_class_v<SpeedupResult>));
  EXPECT_TRUE((std::is_class_v<LatencyComparison>));
  EXPECT_TRUE((std::is_class_v<PluginRegistry>));
  EXPECT_TRUE((std::is_class_v<PluginLoader>));
  EXPECT_TRUE((std::is_class_v<ProcessGroup>));
  EXPECT_TRUE((std::is_class_v<StagedFile>));
  EXPECT_TRUE((std::is_class_v<Dataset>));
  EXPECT_TRUE((std::is_class_v<TrainOptions>));
  EXPECT_TRUE((std::is_class_v<TrainingHooks>));
  EXPECT_TRUE((std::is_same_v<decltype(&load_masks), NamedMasks (*)(const std::filesystem::path&)>));
  EXPECT_TRUE((std::is_same_v<decltype(&read_file), std::string (*)(const std::filesystem::path&)>));
  // The forwarders resolve to the area headers: one function from each remaining header.
  EXPECT_NE(&check_output_paths, nullptr);
  EXPECT_NE(&parse_json_document, nullptr);
  EXPECT_NE(&check_tensor_extents, nullptr);
  EXPECT_TRUE((std::is_same_v<decltype(resolve_config_list(std::string(), std::string(),
                                                           std::declval<const Model&>())),
                              ResolvedConfig>));
  EXPECT_NE(&export_onnx, nullptr);
  EXPECT_NE(&configure_threads, nullptr);
}

}  // namespace
}  // namespace lithe::host
