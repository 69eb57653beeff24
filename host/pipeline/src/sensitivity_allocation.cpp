#include "lithe/host/pipeline/sensitivity_allocation.h"

#include <algorithm>
#include <cmath>

#include "lithe/host/io/field_error.h"
#include "lithe/sdk/error.h"

namespace lithe::host {

double tolerated_sparsity(const SensitivityRow& row, double original, double threshold) {
  double tolerated = 0;
  for (const auto& [sparsity, value] : row.metrics) {
    if (value >= original - threshold) {
      tolerated = std::max(tolerated, sparsity);
    }
  }
  return tolerated;
}

namespace {

void check_allocation(const AllocationOptions& options) {
  LITHE_CHECK(options.target > 0.0 && options.target < 1.0, sdk::Errc::kInvalidConfig,
              field_ref("target"), " must be in (0, 1), got ", options.target);
  LITHE_CHECK(options.threshold >= 0.0 && std::isfinite(options.threshold),
              sdk::Errc::kInvalidConfig, field_ref("threshold"), " must be >= 0, got ",
              options.threshold);
  LITHE_CHECK(options.max_sparsity > 0.0 && options.max_sparsity < 1.0,
              sdk::Errc::kInvalidConfig, field_ref("max_sparsity"), " must be in (0, 1), got ",
              options.max_sparsity);
}

std::vector<LayerAllocation> allocate_layers(const SensitivityResult& result,
                                             const std::map<std::string, int64_t>& weights,
                                             const AllocationOptions& options) {
  check_allocation(options);
  std::vector<LayerAllocation> out;
  double total = 0;
  double tolerated_weights = 0;
  for (const SensitivityRow& row : result.rows) {
    const auto count = weights.find(row.layer);
    LITHE_CHECK(count != weights.end() && count->second > 0, sdk::Errc::kInvalidConfig,
                "layer '", row.layer, "' of the sensitivity table has no weight count");
    LayerAllocation a;
    a.layer = row.layer;
    a.weights = count->second;
    a.tolerated = tolerated_sparsity(row, result.original, options.threshold);
    total += static_cast<double>(a.weights);
    tolerated_weights += a.tolerated * static_cast<double>(a.weights);
    out.push_back(a);
  }
  LITHE_CHECK(tolerated_weights > 0, sdk::Errc::kInvalidConfig,
              "no layer keeps the metric within ", field_ref("threshold"), " ",
              options.threshold, " of the original at any sparsity tried: raise ",
              field_ref("threshold"), " or try smaller ", field_ref("sparsities"));
  double largest = 0;
  for (const LayerAllocation& a : out) {
    largest += (a.tolerated > 0 ? options.max_sparsity : 0.0) * static_cast<double>(a.weights);
  }
  LITHE_CHECK(largest >= options.target * total - 1e-9, sdk::Errc::kInvalidConfig,
              field_ref("target"), " ", options.target, " cannot be reached: the layers that "
              "tolerate pruning hold ", largest / total, " of the weights at ",
              field_ref("max_sparsity"), " ", options.max_sparsity);
  // Water-filling: scale the uncapped layers to what the capped ones leave, until no layer
  // passes the cap.
  std::vector<bool> capped(out.size(), false);
  for (;;) {
    double left = options.target * total;
    double free_weights = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      if (capped[i]) {
        left -= options.max_sparsity * static_cast<double>(out[i].weights);
      } else {
        free_weights += out[i].tolerated * static_cast<double>(out[i].weights);
      }
    }
    const double scale = free_weights > 0 ? left / free_weights : 0.0;
    bool changed = false;
    for (size_t i = 0; i < out.size(); ++i) {
      if (!capped[i]) {
        out[i].sparsity = out[i].tolerated * scale;
        if (out[i].sparsity > options.max_sparsity) {
          capped[i] = true;
          changed = true;
        }
      } else {
        out[i].sparsity = options.max_sparsity;
      }
    }
    if (!changed) {
      break;
    }
  }
  return out;
}

}  // namespace

void check_allocation_options(const AllocationOptions& options) {
  rethrow_with_fields([&] { check_allocation(options); });
}

std::vector<LayerAllocation> allocate_sparsities(const SensitivityResult& result,
                                                 const std::map<std::string, int64_t>& weights,
                                                 const AllocationOptions& options) {
  return rethrow_with_fields([&] { return allocate_layers(result, weights, options); });
}

}  // namespace lithe::host
