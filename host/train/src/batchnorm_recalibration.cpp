#include "lithe/host/train/batchnorm_recalibration.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <optional>

#include "lithe/host/train/trainer.h"
#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

bool is_batchnorm_type(const std::string& op_type) {
  return op_type == "BatchNorm1d" || op_type == "BatchNorm2d" || op_type == "BatchNorm3d";
}

// One BatchNorm layer's live statistics, what they held before, and the running sums.
struct Layer {
  std::string name;
  double momentum = 1;  // a momentum of None averages cumulatively: factor 1 on a fresh count
  at::Tensor mean;
  at::Tensor var;
  at::Tensor count;  // num_batches_tracked
  at::Tensor old_mean;
  at::Tensor old_var;
  at::Tensor old_count;
  at::Tensor sum_mean;  // float64 sums of the batches' statistics
  at::Tensor sum_var;
  int64_t reached = 0;  // batches whose forward called the layer

  void restore() const {
    mean.copy_(old_mean);
    var.copy_(old_var);
    count.copy_(old_count);
  }
};

std::vector<Layer> tracked_layers(const Model& model) {
  std::vector<Layer> layers;
  for (const ModuleRecord& record : model.modules()) {
    if (!is_batchnorm_type(record.op_type)) {
      continue;
    }
    std::map<std::string, at::Tensor> buffers;
    for (const auto& [name, tensor] : model.module_buffers(record.name)) {
      buffers[name] = tensor;
    }
    if (!buffers.count("running_mean") || !buffers.count("running_var") ||
        !buffers.count("num_batches_tracked")) {
      continue;  // track_running_stats=False: it always normalises with the batch's statistics
    }
    Layer layer;
    layer.name = record.name;
    const std::optional<double> momentum = model.batchnorm_momentum(record.name);
    if (momentum.has_value()) {
      LITHE_CHECK(*momentum > 0 && *momentum <= 1, sdk::Errc::kUnsupported, "BatchNorm layer '",
                  record.name, "' has momentum ", *momentum,
                  "; its running statistics cannot be re-estimated (needs (0, 1] or None)");
      layer.momentum = *momentum;
    }
    layer.mean = buffers["running_mean"];
    layer.var = buffers["running_var"];
    layer.count = buffers["num_batches_tracked"];
    layer.old_mean = layer.mean.clone();
    layer.old_var = layer.var.clone();
    layer.old_count = layer.count.clone();
    layer.sum_mean = at::zeros(layer.mean.sizes(), layer.mean.options().dtype(at::kDouble));
    layer.sum_var = at::zeros(layer.var.sizes(), layer.var.options().dtype(at::kDouble));
    layers.push_back(std::move(layer));
  }
  return layers;
}

}  // namespace

BatchNormRecalibration recalibrate_batchnorm(Model& model, const Dataset& data, int64_t batches,
                                             int64_t batch_size) {
  LITHE_CHECK(batches > 0, sdk::Errc::kInvalidConfig,
              "BatchNorm re-estimation batches must be > 0, got ", batches);
  LITHE_CHECK(batch_size > 0, sdk::Errc::kInvalidConfig, "batch size must be > 0, got ",
              batch_size);
  const int64_t available = (data.size() + batch_size - 1) / batch_size;
  LITHE_CHECK(batches <= available, sdk::Errc::kInvalidConfig, batches,
              " BatchNorm re-estimation batches asked for, but dataset '", data.source,
              "' holds only ", available, " batches of ", batch_size, " samples");
  std::vector<Layer> layers = tracked_layers(model);
  LITHE_CHECK(!layers.empty(), sdk::Errc::kInvalidModel,
              "the model has no BatchNorm1d/2d/3d layer with running statistics to re-estimate");
  check_dataset_fits_model(model, data);

  // Evaluation mode restored, and on any error every layer's old statistics.
  struct Restore {
    Model& model;
    std::vector<Layer>& layers;
    bool training;
    bool done = false;
    ~Restore() {
      at::NoGradGuard no_grad;
      if (!done) {
        for (const Layer& layer : layers) {
          layer.restore();
        }
      }
      model.train(training);
    }
  } restore{model, layers, model.is_training()};
  model.train(false);
  for (const Layer& layer : layers) {
    model.train_module(layer.name, true);
  }

  at::NoGradGuard no_grad;
  const UnobservedForwards unobserved;  // not data a pruner may learn from
  BatchNormRecalibration result;
  for (int64_t b = 0; b < batches; ++b) {
    // From zero with a zero count, one training forward leaves m · batch statistic in each
    // layer (momentum None: factor 1 / 1), which is divided out below: the batch's own mean
    // and unbiased variance, whatever momentum the layer keeps.
    for (const Layer& layer : layers) {
      layer.mean.zero_();
      layer.var.zero_();
      layer.count.zero_();
    }
    const int64_t start = b * batch_size;
    const int64_t n = std::min(batch_size, data.size() - start);
    model.forward(data.images.narrow(0, start, n).to(model.device()));
    result.samples += n;
    for (Layer& layer : layers) {
      const int64_t calls = layer.count.item<int64_t>();
      LITHE_CHECK(calls <= 1, sdk::Errc::kUnsupported, "BatchNorm layer '", layer.name,
                  "' runs ", calls,
                  " times in one forward; its statistics per call cannot be separated for "
                  "re-estimation (no layer was changed)");
      if (calls == 1) {
        ++layer.reached;
        layer.sum_mean.add_(layer.mean.to(at::kDouble) / layer.momentum);
        layer.sum_var.add_(layer.var.to(at::kDouble) / layer.momentum);
      }
    }
  }
  for (const Layer& layer : layers) {
    if (layer.reached == 0) {
      layer.restore();
      result.not_reached.push_back(layer.name);
      continue;
    }
    // A layer that only some batches reach (a data-dependent branch) averages over those.
    layer.mean.copy_(layer.sum_mean / static_cast<double>(layer.reached));
    layer.var.copy_(layer.sum_var / static_cast<double>(layer.reached));
    layer.count.fill_(layer.reached);
    result.layers.push_back(layer.name);
  }
  result.batches = batches;
  restore.done = true;
  return result;
}

}  // namespace lithe::host
