// Prune, quantize and convert LeNet in memory with Lithe's jobs: the three steps
//   lithe compress --config level (50%)  ->  lithe compress --config qat --calibration-batches 2
//   ->  lithe convert (int8, with its certificate)
// each a request, a function call and a result, with the model passed from one to the next as
// bytes in memory. The three models are then written to OUT_DIR (pruned.pt, quantized.pt,
// int8.pt): the same bytes the CLI writes for the same steps.
//
//   compress_and_convert MODEL.pt DATA OUT_DIR
#include <lithe/host/io/file_io.h>
#include <lithe/host/jobs/compression_job.h>
#include <lithe/host/jobs/conversion_job.h>
#include <lithe/host/runtime/plugin_loader.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

namespace host = lithe::host;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s MODEL.pt DATA OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path out_dir = argv[3];
  try {
    host::PluginRegistry registry;
    host::PluginLoader loader(registry);
    loader.load_search_path({});
    torch::jit::Module model = torch::jit::load(argv[1]);

    // 1. Prune half of every Conv2d and Linear weight (level), in memory.
    std::string pruned;
    host::CompressionRequest prune;
    prune.model = host::ModelSource::in_memory(model, "LeNet");
    prune.config = host::parse_compression_config(
        R"({"algorithm": "level", "config_list": [{"sparsity": 0.5, "op_types": ["default"]}]})",
        "<prune config>");
    prune.output = host::Output::to_memory(&pruned);
    const host::CompressionResult pruning = host::run_compression(prune, registry);

    // 2. Quantize the pruned model to 8 bits (qat), calibrated on two batches of DATA.
    std::string quantized;
    host::CompressionRequest quantize;
    quantize.model = host::ModelSource::in_memory(host::module_from_bytes(pruned), "pruned LeNet");
    quantize.config = host::parse_compression_config(
        R"({"algorithm": "qat", "config_list": [{"quant_types": ["input", "weight", "output"],
            "quant_bits": 8, "op_types": ["Conv2d", "Linear"]}]})",
        "<quantize config>");
    quantize.output = host::Output::to_memory(&quantized);
    quantize.data_path = argv[2];
    quantize.calibration_batches = 2;
    const host::CompressionResult quantization = host::run_compression(quantize, registry);

    // 3. Convert to native int8 and certify it against the fake-quantized model.
    std::string int8;
    host::ConversionRequest convert;
    convert.model =
        host::ModelSource::in_memory(host::module_from_bytes(quantized), "quantized LeNet");
    convert.input_shape = {4, 1, 28, 28};
    convert.int8 = host::Output::to_memory(&int8);
    convert.samples = 8;
    convert.latency_runs = 3;
    const host::ConversionResult certificate = host::run_conversion(convert);

    host::write_file(out_dir / "pruned.pt", pruned);
    host::write_file(out_dir / "quantized.pt", quantized);
    host::write_file(out_dir / "int8.pt", int8);
    std::printf("pruned %zu layers; quantized %zu layers; int8 layers %zu, float layers %zu\n",
                pruning.pruning.size(), quantization.quantization.size(),
                certificate.report.int8_layers.size(), certificate.report.float_layers.size());
    std::printf("certificate: max |int8 - fake-quantized| = %.4g, top-1 agreement %.4f, "
                "int8/float latency %.3f\n",
                certificate.against_fake_quantized.max_abs,
                certificate.against_fake_quantized.top1(),
                certificate.int8_latency_ms / certificate.float_latency_ms);
  } catch (const host::FieldError& e) {
    std::fprintf(stderr, "compress_and_convert: request error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compress_and_convert: %s\n", e.what());
    return 1;
  }
  return 0;
}
