// count_flops_params cases (reference §4.3, conformance README behaviour 16): every layer of
// Lithe's count (name, type, input/output sizes, weight shape, FLOPs, params) and the totals
// against NNI's, in both modes. Masked cases count with the masks NNI recorded in tensors.pt:
// whether Lithe's pruners produce those masks is what the pruner cases check; here only the
// counting is under test. Where NNI's count differs only by its depthwise rule, or NNI's
// counting broke the pruned model, the case is a DEVIATION (departure 4) after Lithe's own rule
// is checked.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "conformance_case.h"
#include "lithe/host/model/apply_compression_results.h"
#include "lithe/host/io/mask_file.h"
#include "lithe/host/graph/flops_counter.h"

namespace lithe::host::conformance_detail {
namespace {

// NNI's x: a tuple of ints, from kwargs.x or the count_flops_params line of the procedure.
std::vector<int64_t> case_input_shape(const CaseContext& c) {
  const json kwargs = c.config.value("kwargs", json::object());
  if (kwargs.contains("x") && kwargs["x"].is_array()) {
    return kwargs["x"].get<std::vector<int64_t>>();
  }
  // "count_flops_params(wrapped_model, x=(1, 1, 28, 28), ...)": the ints between "x=(" and ")".
  // (Plain string search: std::regex trips GCC 12's maybe-uninitialized warning under ASan.)
  for (const json& line : c.config.value("procedure", json::array())) {
    const std::string text = line.is_string() ? line.get<std::string>() : "";
    const size_t call = text.find("count_flops_params(");
    const size_t open = call == std::string::npos ? call : text.find("x=(", call);
    const size_t close = open == std::string::npos ? open : text.find(')', open);
    if (close == std::string::npos) {
      continue;
    }
    const std::string sizes = text.substr(open + 3, close - open - 3);
    if (sizes.empty() || sizes.find_first_not_of("0123456789, ") != std::string::npos) {
      continue;
    }
    std::vector<int64_t> shape;
    for (size_t start = 0; start < sizes.size();) {
      const size_t comma = sizes.find(',', start);
      const std::string part = sizes.substr(start, comma - start);
      if (part.find_first_not_of(' ') != std::string::npos) {
        shape.push_back(std::stoll(part));
      }
      start = comma == std::string::npos ? sizes.size() : comma + 1;
    }
    return shape;
  }
  fail("no input shape: neither kwargs.x nor a count_flops_params(..., x=(...)) procedure line");
}

std::vector<int64_t> nni_shape(const json& value) {
  // NNI's weight_shape is 0 for modules without a weight (pools).
  return value.is_array() ? value.get<std::vector<int64_t>>() : std::vector<int64_t>{};
}

std::string shape_str(const std::vector<int64_t>& shape) {
  return c10::str(c10::IntArrayRef(shape));
}

// Every parameter and buffer, by name, as a detached copy.
std::vector<std::pair<std::string, at::Tensor>> state_copy(const torch::jit::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : module.named_parameters()) {
    out.emplace_back(p.name, p.value.detach().clone());
  }
  for (const auto& b : module.named_buffers()) {
    out.emplace_back(b.name, b.value.detach().clone());
  }
  return out;
}

// Lithe's and NNI's count of one masked convolution, from the shapes and the mask alone:
// cout = mask.sum() // (per_channel·kernel) with per_channel = weight.size(1) (Lithe) or
// in_channels (NNI), FLOPs = cout·out_spatial·kernel·in_channels // groups (+ bias).
int64_t masked_conv_rule(double mask_sum, int64_t per_channel, const std::vector<int64_t>& in,
                         const std::vector<int64_t>& out, const std::vector<int64_t>& weight,
                         bool bias_flops) {
  int64_t kernel = 1;
  for (size_t i = 2; i < weight.size(); ++i) {
    kernel *= weight[i];
  }
  int64_t out_spatial = 1;
  for (size_t i = 2; i < out.size(); ++i) {
    out_spatial *= out[i];
  }
  const int64_t groups = in[1] / weight[1];
  const auto cout =
      static_cast<int64_t>(std::floor(mask_sum / static_cast<double>(per_channel * kernel)));
  return cout * out_spatial * kernel * in[1] / groups + (bias_flops ? cout * out_spatial : 0);
}

}  // namespace

Verdict replay_flops(const CaseContext& c, const PluginRegistry& /*registry*/) {
  const json& results = c.summary.at("results");
  const std::vector<int64_t> input_shape = case_input_shape(c);
  torch::jit::Module module = load_case_model(c);

  // Masked cases: NNI's recorded masks, applied to the model as NNI's wrappers apply them (so
  // the forward after counting can be compared with the golden masked output).
  NamedMasks masks;
  const bool masked = results.contains("masks");
  if (masked) {
    for (const auto& [layer, entry] : results.at("masks").items()) {
      sdk::Masks m;
      m.weight = tensor(c, entry.at("weight").get<std::string>());
      if (entry.contains("bias") && entry["bias"].is_string()) {
        m.bias = tensor(c, entry["bias"].get<std::string>());
      }
      masks.emplace_back(layer, std::move(m));
    }
    auto model = make_torchscript_model(module);
    apply_compression_results(*model, masks, "golden masks");
  }
  const auto state_before = state_copy(module);

  std::vector<std::string> passes;
  std::vector<std::string> departures;
  for (const FlopsMode mode : {FlopsMode::kDefault, FlopsMode::kFull}) {
    const std::string mode_name = flops_mode_name(mode);
    const std::string key = results.contains(mode_name) ? mode_name : "flops_" + mode_name;
    if (!results.contains(key)) {
      fail("results hold neither '" + mode_name + "' nor 'flops_" + mode_name + "'");
    }
    const json& nni = results.at(key);
    const FlopsReport ours =
        count_flops(module, input_shape, mode, masked ? &masks : nullptr, "golden masks");
    const json& layers = nni.at("layers");
    if (layers.size() != ours.layers.size()) {
      std::vector<std::string> names;
      for (const LayerFlops& l : ours.layers) {
        names.push_back(l.name);
      }
      fail(mode_name + ": NNI counts " + std::to_string(layers.size()) + " layers, Lithe " +
           std::to_string(ours.layers.size()) + " (" + join(names) + ")");
    }
    int64_t explained = 0;  // NNI total − Lithe total accounted for by departure 4
    for (size_t i = 0; i < layers.size(); ++i) {
      const json& theirs = layers[i];
      const LayerFlops& mine = ours.layers[i];
      std::string name = theirs.at("name").get<std::string>();
      // A pruned layer is NNI's PrunerModuleWrapper child "<layer>.module".
      const std::string suffix = ".module";
      if (masked && name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
          results["masks"].contains(name.substr(0, name.size() - suffix.size()))) {
        name.resize(name.size() - suffix.size());
      }
      const std::string where = mode_name + " layer " + std::to_string(i) + " '" + name + "'";
      if (mine.name != name) {
        fail(where + ": Lithe has '" + mine.name + "' here");
      }
      if (mine.op_type != theirs.at("module_type").get<std::string>()) {
        fail(where + ": type " + mine.op_type + ", NNI " + theirs["module_type"].dump());
      }
      const std::pair<const char*, std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes[] =
          {{"input size", {mine.input_shape, nni_shape(theirs.at("input_size"))}},
           {"output size", {mine.output_shape, nni_shape(theirs.at("output_size"))}},
           {"weight shape", {mine.weight_shape, nni_shape(theirs.at("weight_shape"))}}};
      for (const auto& [field, pair] : shapes) {
        if (pair.first != pair.second) {
          fail(where + ": " + field + " " + shape_str(pair.first) + ", NNI " +
               shape_str(pair.second));
        }
      }
      if (mine.params != theirs.at("params").get<int64_t>()) {
        fail(where + ": params " + std::to_string(mine.params) + ", NNI " +
             theirs["params"].dump());
      }
      // NNI's FLOPs of a masked layer are a float tensor holding a whole number.
      const double nni_flops = theirs.at("flops").get<double>();
      if (static_cast<double>(mine.flops) == nni_flops) {
        continue;
      }
      const auto mask =
          std::find_if(masks.begin(), masks.end(), [&](const auto& m) { return m.first == name; });
      const bool grouped_conv = mine.op_type.rfind("Conv", 0) == 0 &&
                                mine.op_type.find("Transpose") == std::string::npos &&
                                mine.weight_shape.size() >= 3 &&
                                mine.input_shape.at(1) != mine.weight_shape[1];
      if (mask == masks.end() || !grouped_conv) {
        fail(where + ": FLOPs " + std::to_string(mine.flops) + ", NNI " + theirs["flops"].dump());
      }
      // Departure 4: check both values against their rules, so only the divisor differs.
      int64_t weight_numel = 1;
      for (const int64_t d : mine.weight_shape) {
        weight_numel *= d;
      }
      const bool bias_flops = mode == FlopsMode::kFull && mine.params > weight_numel;
      const double kept = mask->second.weight.to(at::kDouble).sum().item<double>();
      const int64_t nni_rule = masked_conv_rule(kept, mine.input_shape[1], mine.input_shape,
                                                mine.output_shape, mine.weight_shape, bias_flops);
      const int64_t lithe_rule = masked_conv_rule(kept, mine.weight_shape[1], mine.input_shape,
                                                  mine.output_shape, mine.weight_shape, bias_flops);
      if (static_cast<double>(nni_rule) != nni_flops) {
        fail(where + ": FLOPs " + std::to_string(mine.flops) + ", NNI " + theirs["flops"].dump() +
             ", which is not NNI's in_channels rule either (" + std::to_string(nni_rule) + ")");
      }
      if (mine.flops != lithe_rule) {
        fail(where + ": FLOPs " + std::to_string(mine.flops) +
             " break Lithe's rule cout = mask.sum() // (weight.size(1)·kernel), which gives " +
             std::to_string(lithe_rule));
      }
      explained += nni_rule - lithe_rule;
      departures.push_back(mode_name + " " + name + " (groups " +
                           std::to_string(mine.input_shape[1] / mine.weight_shape[1]) + "): NNI " +
                           std::to_string(nni_rule) + ", Lithe " + std::to_string(lithe_rule));
    }
    const double nni_total = nni.at("flops").get<double>();
    if (static_cast<double>(ours.total_flops + explained) != nni_total) {
      fail(mode_name + ": total FLOPs " + std::to_string(ours.total_flops) + ", NNI " +
           nni["flops"].dump());
    }
    if (ours.total_params != nni.at("params").get<int64_t>()) {
      fail(mode_name + ": total params " + std::to_string(ours.total_params) + ", NNI " +
           nni["params"].dump());
    }
    passes.push_back(mode_name + " " + std::to_string(ours.layers.size()) + " layers " +
                     std::to_string(ours.total_flops) + " FLOPs " +
                     std::to_string(ours.total_params) + " params");
  }

  // Departure 4: counting never changes the model.
  const auto state_after = state_copy(module);
  for (size_t i = 0; i < state_before.size(); ++i) {
    if (state_after.at(i).first != state_before[i].first ||
        !state_after[i].second.equal(state_before[i].second)) {
      fail("counting changed the model: '" + state_before[i].first + "' differs afterwards");
    }
  }
  if (!masked) {
    return {Outcome::kPass, join(passes) + " match NNI"};
  }
  // NNI deleted its wrappers' weight_mask buffers while counting, so its pruned model could no
  // longer run (results.forward_after_count); Lithe's still runs and gives the masked output.
  module.eval();
  at::NoGradGuard no_grad;
  const at::Tensor output = module.forward({tensor(c, "input")}).toTensor();
  std::string detail;
  if (!close_enough(output, tensor(c, "output"), &detail)) {
    fail("forward of the masked model after counting differs from NNI's masked output: " + detail);
  }
  std::string reason = "departure 4: ";
  if (!departures.empty()) {
    reason +=
        "depthwise/grouped convs counted with cout = mask.sum() // (weight.size(1)·k·k), "
        "NNI divides by in_channels: " +
        join(departures) + "; ";
  }
  // "AttributeError: 'PrunerModuleWrapper' object has no attribute 'weight_mask'" -> its type.
  const json after = results.value("forward_after_count", json());
  const std::string nni_error = after.is_string() ? after.get<std::string>() : after.dump();
  reason += "NNI's count deleted the wrappers' weight_mask (its forward afterwards: " +
            nni_error.substr(0, nni_error.find(':')) +
            "), Lithe leaves the model bit-identical and its forward matches NNI's masked "
            "output; " +
            join(passes);
  return {Outcome::kDeviation, reason};
}

}  // namespace lithe::host::conformance_detail
