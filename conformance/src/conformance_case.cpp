// Shared pieces of the NNI golden-case replays (see conformance_case.h).
#include "conformance_case.h"

#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <iterator>
#include <numeric>
#include <set>

#include "lithe/host/io/archive_check.h"
#include "lithe/host/io/file_io.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk/pruner.h"

namespace lithe::host::conformance_detail {
namespace {

// A layer's prunable units as booleans "pruned", with the scores they were ranked by: single
// weights scored by |w| (unstructured pruners), or whole filters/channels scored by NNI's own
// per-filter statistic when the case records one (`stat.<layer>`).
struct UnitView {
  at::Tensor lithe_pruned;
  at::Tensor nni_pruned;
  at::Tensor scores;
};

UnitView unit_view(const at::Tensor& lithe_mask, const at::Tensor& nni_mask,
                   const at::Tensor& weight_before, const at::Tensor* stat) {
  UnitView v;
  if (stat != nullptr && stat->numel() == lithe_mask.size(0) && lithe_mask.dim() > 1) {
    const int64_t units = stat->numel();
    v.lithe_pruned = lithe_mask.reshape({units, -1}).eq(0).all(1);
    v.nni_pruned = nni_mask.reshape({units, -1}).eq(0).all(1);
    v.scores = stat->flatten().to(at::kDouble);
  } else {
    v.lithe_pruned = lithe_mask.flatten().eq(0);
    v.nni_pruned = nni_mask.flatten().eq(0);
    v.scores = weight_before.abs().flatten().to(at::kDouble);
  }
  return v;
}

// Lithe's rule (departure 1): exactly k units pruned (k < 0: not checked here), and no pruned
// unit scores higher than a kept one.
bool follows_exact_k(const UnitView& v, int64_t k, std::string* detail) {
  const int64_t pruned = v.lithe_pruned.sum().item<int64_t>();
  if (k >= 0 && pruned != k) {
    *detail = std::to_string(pruned) + " units pruned instead of exactly k=" + std::to_string(k);
    return false;
  }
  if (pruned == 0 || pruned == v.lithe_pruned.numel()) {
    return true;
  }
  const double pruned_max = v.scores.masked_select(v.lithe_pruned).max().item<double>();
  const double kept_min = v.scores.masked_select(v.lithe_pruned.logical_not()).min().item<double>();
  if (pruned_max > kept_min) {
    *detail = "a pruned unit's score (" + std::to_string(pruned_max) + ") exceeds a kept one (" +
              std::to_string(kept_min) + ")";
    return false;
  }
  return true;
}

// NNI pruned Lithe's units plus units tied with NNI's threshold (N2 over-pruning).
bool explained_by_tie_overpruning(const UnitView& v) {
  if (v.lithe_pruned.logical_and(v.nni_pruned.logical_not()).any().item<bool>()) {
    return false;  // Lithe pruned something NNI kept
  }
  const at::Tensor extra = v.nni_pruned.logical_and(v.lithe_pruned.logical_not());
  if (!extra.any().item<bool>()) {
    return false;
  }
  const double threshold = v.scores.masked_select(v.nni_pruned).max().item<double>();
  return v.scores.masked_select(extra).eq(threshold).all().item<bool>();
}

}  // namespace

void fail(const std::string& reason) { throw Verdict{Outcome::kFail, reason}; }
void unsupported(const std::string& reason) { throw Verdict{Outcome::kUnsupported, reason}; }

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) {
    out += (out.empty() ? "" : ", ") + p;
  }
  return out;
}

std::map<std::string, at::Tensor> load_tensor_dict(const fs::path& file) {
  const std::string bytes = read_file(file);
  check_torch_archive(bytes, "tensor file", file.string());
  const c10::IValue value = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  check_tensor_extents(value, "tensor file", file.string());
  LITHE_CHECK(value.isGenericDict(), sdk::Errc::kInvalidModel, "'", file.string(),
              "' must hold a dict of tensors, got ", value.tagKind());
  std::map<std::string, at::Tensor> out;
  for (const auto& item : value.toGenericDict()) {
    if (item.key().isString() && item.value().isTensor()) {
      out[item.key().toStringRef()] = item.value().toTensor();
    }
  }
  return out;
}

fs::path resolve_model_file(const fs::path& golden_dir, const fs::path& case_dir,
                            const std::string& relative) {
  for (const fs::path& base : {golden_dir.parent_path(), golden_dir, case_dir}) {
    std::error_code ec;
    if (fs::is_regular_file(base / relative, ec)) {
      return base / relative;
    }
  }
  fail("model file '" + relative + "' not found next to " + golden_dir.string());
}

// Copies `state` (and `init.<param>` overrides) into the module's parameters and buffers.
void load_state(torch::jit::Module& module, const std::map<std::string, at::Tensor>& state,
                const std::string& prefix) {
  std::map<std::string, at::Tensor> targets;
  for (const auto& p : module.named_parameters()) {
    targets[p.name] = p.value;
  }
  for (const auto& b : module.named_buffers()) {
    targets[b.name] = b.value;
  }
  at::NoGradGuard no_grad;
  for (const auto& [key, value] : state) {
    if (key.rfind(prefix, 0) != 0) {
      continue;
    }
    const std::string name = key.substr(prefix.size());
    const auto it = targets.find(name);
    if (it == targets.end()) {
      fail("state entry '" + key + "' names no parameter or buffer of the model");
    }
    if (it->second.sizes() != value.sizes()) {
      fail("state entry '" + key + "' has another shape than the model's tensor");
    }
    it->second.copy_(value);
  }
}

bool close_enough(const at::Tensor& actual, const at::Tensor& expected, std::string* detail) {
  if (actual.sizes() != expected.sizes()) {
    *detail = "shape " + c10::str(actual.sizes()) + " vs expected " + c10::str(expected.sizes());
    return false;
  }
  const at::Tensor a = actual.to(at::kDouble);
  const at::Tensor b = expected.to(at::kDouble);
  const at::Tensor excess = (a - b).abs() - 1e-5 * b.abs().clamp_min(1.0);
  const double worst = excess.max().item<double>();
  if (worst > 0) {
    const int64_t at = excess.argmax().item<int64_t>();
    *detail = "max |diff| " + std::to_string((a - b).abs().max().item<double>()) +
              " (worst: " + c10::str(a.flatten()[at].item<double>()) + " vs " +
              c10::str(b.flatten()[at].item<double>()) + ")";
    return false;
  }
  return true;
}

int64_t count_zeros(const at::Tensor& t) { return t.eq(0).sum().item<int64_t>(); }

// Copies of every weight, to check rules against what the pruner saw.
std::map<std::string, at::Tensor> snapshot_weights(const Model& model) {
  std::map<std::string, at::Tensor> out;
  for (const ModuleRecord& m : model.modules()) {
    if (m.weight.has_value()) {
      out[m.name] = m.weight->detach().clone();
    }
  }
  return out;
}


torch::jit::Module load_case_model(const CaseContext& c) {
  const json& files = c.config.at("model_files");
  const fs::path script =
      resolve_model_file(c.golden_dir, c.case_dir, files.at("torchscript").get<std::string>());
  torch::jit::Module module = load_torchscript_module(script);  // validated first
  if (files.contains("state") && files["state"].is_string()) {
    const fs::path state =
        resolve_model_file(c.golden_dir, c.case_dir, files["state"].get<std::string>());
    load_state(module, load_tensor_dict(state), "");
  }
  load_state(module, c.tensors, "init.");
  module.eval();
  return module;
}

const at::Tensor& tensor(const CaseContext& c, const std::string& key) {
  const auto it = c.tensors.find(key);
  if (it == c.tensors.end()) {
    fail("golden tensor '" + key + "' missing from tensors.pt");
  }
  return it->second;
}

CompressionConfig case_compression_config(const CaseContext& c, const std::string& algorithm) {
  json options = c.config.value("kwargs", json::object());
  // The host owns the training loop: NNI's optimizer and scheduler arguments have no Lithe
  // counterpart (Lithe's session drives whatever optimizer the loop uses).
  options.erase("optimizer");
  options.erase("lr_scheduler");
  return make_compression_config(algorithm, c.config.at("config_list").dump(), options.dump(),
                                 (c.case_dir / "config.json").string());
}

bool procedure_mentions(const json& config, const std::string& text) {
  for (const json& line : config.value("procedure", json::array())) {
    if (line.is_string() && line.get<std::string>().find(text) != std::string::npos) {
      return true;
    }
  }
  return false;
}

// Expected-error cases: NNI raises; Lithe must reject too, except where a departure makes
// Lithe accept the config (then Lithe's own rule is checked).

std::vector<std::string> compare_masks(const CaseContext& c,
                                       const std::vector<std::pair<std::string, sdk::Masks>>& ours_list,
                                       const json& expected_masks,
                                       const std::map<std::string, at::Tensor>& weights_before,
                                       bool global_k, const SparsityOf& sparsity_of,
                                       std::vector<std::string>* differing) {
  std::map<std::string, sdk::Masks> ours(ours_list.begin(), ours_list.end());
  for (const auto& [name, m] : ours) {
    if (!expected_masks.contains(name)) {
      fail("Lithe pruned layer '" + name + "', which NNI did not select");
    }
  }
  std::vector<std::string> deviations;
  for (const auto& item : expected_masks.items()) {
    const std::string& name = item.key();
    const auto it = ours.find(name);
    if (it == ours.end()) {
      fail("NNI pruned layer '" + name + "', which Lithe did not select");
    }
    const at::Tensor& nni_weight = tensor(c, item.value().at("weight").get<std::string>());
    const at::Tensor& lithe_weight = it->second.weight;
    if (!lithe_weight.equal(nni_weight.to(lithe_weight.dtype()))) {
      const json& layer_config = item.value().at("config");
      const double sparsity = sparsity_of ? sparsity_of(name, layer_config)
                                          : layer_config.value("sparsity", -1.0);
      const auto stat = c.tensors.find("stat." + name);
      const UnitView units =
          unit_view(lithe_weight, nni_weight.to(lithe_weight.dtype()), weights_before.at(name),
                    stat == c.tensors.end() ? nullptr : &stat->second);
      // Slim ranks channels of all layers together: its exact k is global (checked below).
      const int64_t k = global_k ? -1 : sdk::prune_count(units.lithe_pruned.numel(), sparsity);
      std::string detail;
      if (sparsity >= 0 && follows_exact_k(units, k, &detail) &&
          explained_by_tie_overpruning(units)) {
        const int64_t lithe_units = units.lithe_pruned.sum().item<int64_t>();
        deviations.push_back(name + " (NNI pruned " +
                             std::to_string(units.nni_pruned.sum().item<int64_t>()) + " of " +
                             std::to_string(units.lithe_pruned.numel()) + ", Lithe " +
                             std::to_string(lithe_units) + ")");
        continue;
      }
      if (differing != nullptr) {
        differing->push_back(name);
        continue;
      }
      const int64_t positions = lithe_weight.ne(nni_weight).sum().item<int64_t>();
      fail("layer '" + name + "': weight mask differs from NNI in " + std::to_string(positions) +
           " positions (NNI " + std::to_string(count_zeros(nni_weight)) + " zeros, Lithe " +
           std::to_string(count_zeros(lithe_weight)) + ")" +
           (detail.empty() ? "" : "; Lithe rule: " + detail));
    }
    const json& bias_key = item.value().at("bias");
    if (bias_key.is_string()) {
      if (!it->second.bias.has_value()) {
        fail("layer '" + name + "': NNI has a bias mask, Lithe none");
      }
      if (!it->second.bias->equal(tensor(c, bias_key.get<std::string>()))) {
        fail("layer '" + name + "': bias mask differs from NNI");
      }
    } else if (it->second.bias.has_value()) {
      fail("layer '" + name + "': Lithe has a bias mask, NNI none");
    }
  }

  if (global_k && !deviations.empty()) {
    // Exactly k = int(total * config_list[0].sparsity) channels over all selected layers.
    int64_t total = 0;
    int64_t pruned = 0;
    for (const auto& [name, m] : ours) {
      total += m.weight.numel();
      pruned += m.weight.eq(0).sum().item<int64_t>();
    }
    const double first_sparsity = c.config.at("config_list").at(0).value("sparsity", 0.0);
    const int64_t k = sdk::prune_count(total, first_sparsity);
    if (pruned != k) {
      fail("Lithe pruned " + std::to_string(pruned) + " of " + std::to_string(total) +
           " channels; its global rule requires exactly k=" + std::to_string(k));
    }
  }
  return deviations;
}

}  // namespace lithe::host::conformance_detail

namespace lithe::host::conformance_detail {
namespace {

// Filters whose weight mask is entirely zero.
std::set<int64_t> pruned_filters(const at::Tensor& weight_mask) {
  const at::Tensor pruned = weight_mask.reshape({weight_mask.size(0), -1}).eq(0).all(1);
  std::set<int64_t> out;
  for (int64_t i = 0; i < pruned.numel(); ++i) {
    if (pruned[i].item<bool>()) {
      out.insert(i);
    }
  }
  return out;
}

// Lithe's dependency-aware rule (departure 5): every layer prunes exactly its own num_prune
// filters, and the layers of one coupled set (all compressed) share at least the common
// channels of the set's minimum sparsity, rounded down to whole groups.
std::string check_dependency_rule(const CaseContext& c,
                                  const std::vector<std::pair<std::string, sdk::Masks>>& ours) {
  const json& results = c.summary.at("results");
  std::map<std::string, std::set<int64_t>> pruned;
  std::map<std::string, double> sparsity;
  for (const auto& [name, masks] : ours) {
    pruned[name] = pruned_filters(masks.weight);
    const json& config = results.at("masks").at(name).at("config");
    sparsity[name] = config.value("sparsity", 0.0);
    const int64_t want = sdk::prune_count(masks.weight.size(0), sparsity[name]);
    if (static_cast<int64_t>(pruned[name].size()) != want) {
      fail("layer '" + name + "' prunes " + std::to_string(pruned[name].size()) +
           " filters; Lithe's rule requires exactly " + std::to_string(want));
    }
    if (masks.bias.has_value() && !masks.bias->eq(0).equal(
                                      masks.weight.reshape({masks.weight.size(0), -1}).eq(0).all(1))) {
      fail("layer '" + name + "': the bias mask does not prune exactly the pruned filters");
    }
  }
  int coupled = 0;
  for (const json& set : results.at("channel_dependency")) {
    if (set.size() < 2) {
      continue;
    }
    double min_s = 1.0;
    bool all_compressed = true;
    int64_t groups = 1;
    std::set<int64_t> common;
    bool first = true;
    for (const json& member : set) {
      const std::string name = member.get<std::string>();
      if (pruned.count(name) == 0) {
        all_compressed = false;
        continue;
      }
      min_s = std::min(min_s, sparsity[name]);
      const auto member_groups = results.at("group_dependency").value(name, int64_t{1});
      if (member_groups < 1) {
        fail("results.group_dependency['" + name + "'] must be >= 1, got " +
             std::to_string(member_groups));
      }
      groups = std::lcm(groups, member_groups);
      if (first) {
        common = pruned[name];
        first = false;
      } else {
        std::set<int64_t> both;
        std::set_intersection(common.begin(), common.end(), pruned[name].begin(),
                              pruned[name].end(), std::inserter(both, both.begin()));
        common = both;
      }
    }
    if (!all_compressed || first) {
      continue;
    }
    const std::string name0 = set.at(0).get<std::string>();
    const auto layer0 = std::find_if(ours.begin(), ours.end(),
                                     [&](const auto& entry) { return entry.first == name0; });
    const int64_t channels = layer0->second.weight.size(0);
    const int64_t want = (sdk::prune_count(channels, min_s) / groups) * groups;
    if (static_cast<int64_t>(common.size()) < want) {
      fail("coupled layers " + set.dump() + " share " + std::to_string(common.size()) +
           " pruned channels; Lithe's rule requires at least " + std::to_string(want));
    }
    ++coupled;
  }
  return "departure 5: every layer prunes exactly its num_prune filters and the " +
         std::to_string(coupled) + " coupled sets prune the same channels";
}

}  // namespace

std::vector<std::string> compare_masks_dependency_aware(
    const CaseContext& c, const std::vector<std::pair<std::string, sdk::Masks>>& ours,
    const std::map<std::string, at::Tensor>& weights_before) {
  std::vector<std::string> differing;
  std::vector<std::string> notes = compare_masks(c, ours, c.summary.at("results").at("masks"),
                                                 weights_before, /*global_k=*/false, {},
                                                 &differing);
  if (!notes.empty()) {
    notes.front() = "departure 1: NNI over-prunes tied filters; Lithe prunes exactly k: " +
                    notes.front();
  }
  if (differing.empty()) {
    return notes;
  }
  std::string nni_note;
  for (const json& set : c.summary.at("results").value("dependency_consistency", json::array())) {
    if (!set.value("same_pruned_channels", true)) {
      nni_note += " NNI itself prunes different channels in " + set.at("layers").dump() + ".";
    }
  }
  notes.push_back(check_dependency_rule(c, ours) + " (weight masks differ from NNI's in " +
                  join(differing) + ")." + nni_note);
  return notes;
}

std::string final_masks_deviation(const CaseContext& c,
                                  const std::vector<std::pair<std::string, sdk::Masks>>& ours,
                                  const std::map<std::string, at::Tensor>& weights_before,
                                  bool global_k) {
  if (c.config.value("kwargs", json::object()).value("dependency_aware", false)) {
    return join(compare_masks_dependency_aware(c, ours, weights_before));  // notes name departures
  }
  const std::vector<std::string> notes =
      compare_masks(c, ours, c.summary.at("results").at("masks"), weights_before, global_k);
  return notes.empty() ? std::string()
                       : "departure 1: NNI over-prunes units tied at its threshold; Lithe prunes "
                         "exactly k with ties broken by index: " + join(notes);
}

}  // namespace lithe::host::conformance_detail
