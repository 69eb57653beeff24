// Global sparsity (global_sparsity.h): the keys, the entry's layers, and the exact selection
// across layers.
#include "lithe/sdk/global_sparsity.h"

#include <ATen/ATen.h>

#include <string>

#include "lithe/sdk/error.h"

namespace lithe::sdk {

const OptionSchema& sparsity_or_total_keys() {
  static const OptionSchema schema{
      entry_key("sparsity", OptionType::kNumber,
                "fraction of each selected layer's weights (or filters) to prune")
          .at_least(0)
          .below(1),
      entry_key("total_sparsity", OptionType::kNumber,
                "fraction of all the entry's weights (or filters) to prune, ranked together "
                "across its layers (instead of sparsity)")
          .at_least(0)
          .below(1),
      entry_key("max_sparsity_per_layer", OptionType::kNumber,
                "with total_sparsity: the most any one layer of the entry may lose")
          .defaults_to("1")
          .above(0)
          .at_most(1)};
  return schema;
}

std::optional<GlobalSparsity> read_global_sparsity(const Options& entry) {
  const bool per_layer = entry.has("sparsity");
  const bool total = entry.has("total_sparsity");
  LITHE_CHECK(!(per_layer && total), Errc::kInvalidConfig, entry.path(),
              ": give either \"sparsity\" (each layer) or \"total_sparsity\" (all the entry's "
              "layers ranked together), not both");
  if (!per_layer && !total) {
    try {
      (void)entry.require<double>("sparsity");  // its message names a likely misspelling
    } catch (const Error& e) {
      throw Error(Errc::kInvalidConfig,
                  std::string(e.what()) + "; or give \"total_sparsity\" (all the entry's layers "
                                          "ranked together)");
    }
  }
  const OptionSchema& keys = sparsity_or_total_keys();
  if (per_layer) {
    LITHE_CHECK(!entry.has("max_sparsity_per_layer"), Errc::kInvalidConfig, entry.path(),
                "/max_sparsity_per_layer: only with \"total_sparsity\" (with \"sparsity\" every "
                "layer loses exactly that fraction)");
    (void)keys.read<double>(entry, "sparsity");
    return std::nullopt;
  }
  GlobalSparsity global;
  global.total = keys.read<double>(entry, "total_sparsity");
  global.max_per_layer = keys.read<double>(entry, "max_sparsity_per_layer");
  return global;
}

std::vector<LayerView*> layers_of_entry(CompressionContext& context, const LayerView& layer) {
  std::vector<LayerView*> out;
  for (LayerView* candidate : context.layers()) {
    if (candidate->config().path() == layer.config().path()) {
      out.push_back(candidate);
    }
  }
  return out;
}

std::vector<at::Tensor> select_global(const std::vector<at::Tensor>& scores,
                                      const std::vector<int64_t>& caps, int64_t count) {
  LITHE_CHECK(scores.size() == caps.size(), Errc::kInternal, "select_global: ", scores.size(),
              " score tensors but ", caps.size(), " caps");
  // Each layer's candidates: its caps[l] smallest scores (a stable sort: ties keep the lower
  // index first). Then one stable sort of every candidate, concatenated in layer order, so ties
  // across layers go to the earlier layer.
  std::vector<at::Tensor> values;
  std::vector<at::Tensor> owners;   // layer of each candidate
  std::vector<at::Tensor> indices;  // its flat index in the layer
  int64_t available = 0;
  for (size_t l = 0; l < scores.size(); ++l) {
    const at::Tensor flat = scores[l].detach().reshape({-1}).to(at::kCPU, at::kDouble);
    const int64_t cap = std::min<int64_t>(std::max<int64_t>(caps[l], 0), flat.numel());
    available += cap;
    const auto sorted = at::sort(flat, /*stable=*/true, /*dim=*/0, /*descending=*/false);
    values.push_back(std::get<0>(sorted).narrow(0, 0, cap));
    indices.push_back(std::get<1>(sorted).narrow(0, 0, cap));
    owners.push_back(at::full({cap}, static_cast<int64_t>(l), at::kLong));
  }
  LITHE_CHECK(count >= 0 && count <= available, Errc::kInvalidConfig, "pruning ", count,
              " units across the entry's layers needs more than max_sparsity_per_layer allows: "
              "the layers' caps add up to ",
              available, " units");
  std::vector<at::Tensor> pruned;
  for (const at::Tensor& s : scores) {
    pruned.push_back(at::zeros({s.numel()}, at::kBool));
  }
  if (count > 0) {
    const auto order = std::get<1>(at::sort(at::cat(values), /*stable=*/true, 0, false));
    const at::Tensor chosen = order.narrow(0, 0, count);
    const at::Tensor owner = at::cat(owners).index_select(0, chosen);
    const at::Tensor index = at::cat(indices).index_select(0, chosen);
    for (size_t l = 0; l < scores.size(); ++l) {
      const at::Tensor mine = index.masked_select(owner.eq(static_cast<int64_t>(l)));
      pruned[l].index_fill_(0, mine, true);
    }
  }
  for (size_t l = 0; l < scores.size(); ++l) {
    pruned[l] = pruned[l].reshape(scores[l].sizes());
  }
  return pruned;
}

}  // namespace lithe::sdk
