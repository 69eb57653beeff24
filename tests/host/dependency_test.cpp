// Channel / group dependency analysis (NNI v2.0 ChannelDependency and GroupDependency, reference
// §2.8): against NNI's recorded results on the conformance models, and on small purpose-built
// models (scripts/make_dependency_models.py) for the rules those models do not exercise.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "lithe/host/graph/graph_trace.h"
#include "lithe/host/graph/layer_dependencies.h"
#include "lithe/host/model/model.h"
#include "lithe/sdk/error.h"
#include "support/conformance_models.h"
#include "support/paths.h"

namespace lithe::host {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

using Sets = std::vector<std::vector<std::string>>;
using SetOfSets = std::set<std::set<std::string>>;

SetOfSets as_set_of_sets(const Sets& sets) {
  SetOfSets out;
  for (const auto& members : sets) {
    out.insert(std::set<std::string>(members.begin(), members.end()));
  }
  return out;
}

LayerDependencies model_dependencies(const std::filesystem::path& path) {
  return load_torchscript_model(path)->dependencies();
}

LayerDependencies test_model_dependencies(const std::string& name) {
  return model_dependencies(test::source_dir() / "tests/data" / (name + ".pt"));
}

struct NniDependencies {
  Sets channel_sets;
  std::map<std::string, int64_t> groups;
};

NniDependencies golden_dependencies(const std::string& case_name) {
  const auto path = test::nni_data_dir() / "golden" / case_name / "summary.json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  const nlohmann::json results = nlohmann::json::parse(in).at("results");
  NniDependencies out;
  out.channel_sets = results.at("channel_dependency").get<Sets>();
  out.groups = results.at("group_dependency").get<std::map<std::string, int64_t>>();
  return out;
}

// NNI v2.0 lists only the sets that hold a Conv2d; Lithe also lists Linear (and Conv1d/3d)
// modules, which filter pruners can prune too. The sets of `deps` restricted to NNI's view.
Sets sets_with_conv2d(const std::filesystem::path& model, const Sets& sets) {
  const auto loaded = load_torchscript_model(model);
  Sets out;
  for (const auto& members : sets) {
    const bool has_conv2d = std::any_of(members.begin(), members.end(), [&](const std::string& m) {
      const ModuleRecord* record = loaded->find_module(m);
      return record != nullptr && record->op_type == "Conv2d";
    });
    if (has_conv2d) {
      out.push_back(members);
    }
  }
  return out;
}

// Every listed module of the model appears in exactly one set.
void expect_partition(const Sets& sets, const std::vector<std::string>& convs) {
  std::multiset<std::string> seen;
  for (const auto& members : sets) {
    seen.insert(members.begin(), members.end());
  }
  EXPECT_EQ(seen, std::multiset<std::string>(convs.begin(), convs.end()));
}

TEST(DependencyAnalysisTest, ResblockMatchesNni) {
  const auto model = test::conformance_model_file("resblock");
  const LayerDependencies deps = model_dependencies(model);
  const NniDependencies nni = golden_dependencies("l1filter_resblock_dep_s0.5");
  // The residual adds couple conv1 with layer1.conv2 (identity shortcut) and layer2.conv2
  // with the 1x1 shortcut conv; BN/ReLU between them are passed through.
  EXPECT_EQ(as_set_of_sets(sets_with_conv2d(model, deps.channel_sets)),
            as_set_of_sets(nni.channel_sets));
  EXPECT_EQ(deps.groups, nni.groups);
  // Our own deterministic order: sets by first member's graph position, members in graph order;
  // the classifier fc1 is a singleton of its own (NNI does not list it).
  EXPECT_THAT(deps.channel_sets,
              ElementsAre(ElementsAre("conv1", "layer1.conv2"), ElementsAre("layer1.conv1"),
                          ElementsAre("layer2.conv1"),
                          ElementsAre("layer2.conv2", "layer2.shortcut.0"), ElementsAre("fc1")));
}

TEST(DependencyAnalysisTest, MobilenetTinyGroupsMatchNni) {
  const auto model = test::conformance_model_file("mobilenet_tiny");
  const LayerDependencies deps = model_dependencies(model);
  const NniDependencies nni = golden_dependencies("l1filter_mobilenet_tiny_dep_s0.5");
  EXPECT_EQ(as_set_of_sets(sets_with_conv2d(model, deps.channel_sets)),
            as_set_of_sets(nni.channel_sets));
  // Depthwise dw1 (16 groups) and dw2 (32) pass their groups to conv1 and pw1, through BN/ReLU.
  EXPECT_EQ(deps.groups, nni.groups);
  EXPECT_THAT(deps.groups, ElementsAre(Pair("conv1", 16), Pair("dw1", 16), Pair("dw2", 32),
                                       Pair("pw1", 32), Pair("pw2", 1)));
  EXPECT_THAT(deps.channel_sets, ElementsAre(ElementsAre("conv1"), ElementsAre("dw1"),
                                             ElementsAre("pw1"), ElementsAre("dw2"),
                                             ElementsAre("pw2"), ElementsAre("fc1")));
}

TEST(DependencyAnalysisTest, PlainChainsHaveOnlySingletonsAndNoGroups) {
  const LayerDependencies lenet = model_dependencies(test::conformance_model_file("lenet"));
  EXPECT_THAT(lenet.channel_sets, ElementsAre(ElementsAre("conv1"), ElementsAre("conv2"),
                                              ElementsAre("fc1"), ElementsAre("fc2"),
                                              ElementsAre("fc3")));
  EXPECT_THAT(lenet.groups, ElementsAre(Pair("conv1", 1), Pair("conv2", 1)));

  const LayerDependencies vgg = model_dependencies(test::conformance_model_file("vgg_bn"));
  EXPECT_THAT(vgg.channel_sets, ElementsAre(ElementsAre("conv1"), ElementsAre("conv2"),
                                            ElementsAre("conv3"), ElementsAre("fc1")));
  EXPECT_THAT(vgg.groups, ElementsAre(Pair("conv1", 1), Pair("conv2", 1), Pair("conv3", 1)));

  // Linear layers are listed too (filter pruners prune their rows), but have no groups.
  const LayerDependencies mlp = model_dependencies(test::conformance_model_file("mlp"));
  EXPECT_THAT(mlp.channel_sets,
              ElementsAre(ElementsAre("fc1"), ElementsAre("fc2"), ElementsAre("fc3")));
  EXPECT_THAT(mlp.groups, IsEmpty());
}

TEST(DependencyAnalysisTest, CatCouplesUnlessAlongChannels) {
  const LayerDependencies deps = test_model_dependencies("dep_cat");
  // cat(dim=1) stacks channels side by side: c1 and c2 stay independent. cat(dim=0) needs equal
  // channel counts: c3/c4 are coupled, and so are c5/c6 whose outputs reach cat through
  // list.append (and a ReLU).
  EXPECT_THAT(deps.channel_sets,
              ElementsAre(ElementsAre("c1"), ElementsAre("c2"), ElementsAre("c3", "c4"),
                          ElementsAre("c5", "c6")));
  expect_partition(deps.channel_sets, {"c1", "c2", "c3", "c4", "c5", "c6"});
}

TEST(DependencyAnalysisTest, AddsCoupleAndMergeSets) {
  const LayerDependencies deps = test_model_dependencies("dep_add");
  // s = c1 + c2; t = s + c3: the second add reaches c1 and c2 through the first one.
  // torch.add(c4, c5) and c6 + c7 form two sets that `m = relu(c5); m += c6` merges; c5 runs
  // before c4, so it comes first. head(t) + c8 couples head.3 with c8 and stops there: neither
  // head.0 (behind head.3) nor c1..c3 (behind head.0) join.
  EXPECT_THAT(deps.channel_sets,
              ElementsAre(ElementsAre("c1", "c2", "c3"), ElementsAre("c5", "c4", "c6", "c7"),
                          ElementsAre("head.0"), ElementsAre("head.3", "c8")));
  expect_partition(deps.channel_sets,
                   {"c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "head.0", "head.3"});
  EXPECT_EQ(deps.groups.size(), 10u);
  for (const auto& [name, groups] : deps.groups) {
    EXPECT_EQ(groups, 1) << name;
  }
}

TEST(DependencyAnalysisTest, TracedModelGivesTheSameResultAsScripted) {
  // Traced, the layers run as aten::_convolution with groups as input 8.
  const LayerDependencies traced = test_model_dependencies("dep_add_traced");
  const LayerDependencies scripted = test_model_dependencies("dep_add");
  EXPECT_EQ(traced.channel_sets, scripted.channel_sets);
  EXPECT_EQ(traced.groups, scripted.groups);
  EXPECT_EQ(traced.channel_sets.size(), 4u);
}

TEST(DependencyAnalysisTest, ModuleCalledTwiceIsOneLayerAndUncalledConvIsListedLast) {
  const LayerDependencies deps = test_model_dependencies("dep_shared");
  // conv_a's second call (on conv_b's output) meets conv_c in the add; conv_b only feeds it.
  // `unused` is never called: a singleton after the called convolutions, with its own groups.
  EXPECT_THAT(deps.channel_sets, ElementsAre(ElementsAre("conv_a", "conv_c"),
                                             ElementsAre("conv_b"), ElementsAre("unused")));
  EXPECT_THAT(deps.groups, ElementsAre(Pair("conv_a", 1), Pair("conv_b", 1), Pair("conv_c", 1),
                                       Pair("unused", 2)));
}

TEST(DependencyAnalysisTest, WalkSeesThroughControlFlowAndTuples) {
  const LayerDependencies deps = test_model_dependencies("dep_control");
  // y comes from c1 or c2 (if/else), z from c3 through a loop: y + z couples all three.
  // pair returns (left(x), right(x)); only the unpacked `p` meets c4, `q` stays alone.
  EXPECT_THAT(deps.channel_sets,
              ElementsAre(ElementsAre("c1", "c2", "c3"), ElementsAre("pair.left", "c4"),
                          ElementsAre("pair.right")));
}

TEST(DependencyAnalysisTest, GroupsPropagateToNearestParentsWithMax) {
  const LayerDependencies deps = test_model_dependencies("dep_groups");
  // stem feeds g4 (groups 4) and g6 (groups 6) through BN and ReLU: max is 6 (lcm would be 12).
  // pw feeds the depthwise dw (12); dw feeds the ConvTranspose2d up (groups 3) and keeps
  // max(12, 3) = 12. Only the nearest parents are raised: stem is not behind dw.
  EXPECT_THAT(deps.groups, ElementsAre(Pair("dw", 12), Pair("g4", 4), Pair("g6", 6),
                                       Pair("pw", 12), Pair("stem", 6), Pair("up", 3)));
  // No adds: all Conv2d modules are singletons; the ConvTranspose2d is in no set.
  EXPECT_THAT(deps.channel_sets, ElementsAre(ElementsAre("stem"), ElementsAre("g4"),
                                             ElementsAre("g6"), ElementsAre("pw"),
                                             ElementsAre("dw")));
}

TEST(DependencyAnalysisTest, Conv1dConv3dAndLinearEndTheWalkAndGetTheirOwnSets) {
  const LayerDependencies deps = test_model_dependencies("dep_layer_types");
  // c1b(c1(s)) + c1c(s): the Conv1d c1b ends the walk, so c1 stays alone (NNI v2.0 would walk
  // through it). The transformer-style residual h + fc2(gelu(fc1(norm(h)))) couples the Linear
  // layers embed and fc2; fc1 (the hidden width) is free. v2(u) + u couples the Conv3d layers.
  // wide(h).reshape(...).sum(2) + narrow(h): the reshape ends the walk, so the 32-wide and the
  // 16-wide Linear are not coupled. The uncalled Linear comes last.
  EXPECT_THAT(deps.channel_sets,
              ElementsAre(ElementsAre("c1"), ElementsAre("c1b", "c1c"), ElementsAre("dw1"),
                          ElementsAre("embed", "fc2"), ElementsAre("fc1"), ElementsAre("wide"),
                          ElementsAre("narrow"), ElementsAre("v1", "v2"), ElementsAre("unused")));
  // The depthwise Conv1d passes its 8 groups to both nearest parents; Linear has no entry.
  EXPECT_THAT(deps.groups, ElementsAre(Pair("c1", 1), Pair("c1b", 8), Pair("c1c", 8),
                                       Pair("dw1", 8), Pair("v1", 1), Pair("v2", 1)));
}

TEST(DependencyAnalysisTest, IsDeterministicAndLeavesTheModuleUsable) {
  torch::jit::Module module = torch::jit::load(test::conformance_model_file("resblock").string());
  const LayerDependencies first = analyze_dependencies(module);
  const LayerDependencies second = analyze_dependencies(module);
  EXPECT_EQ(first.channel_sets, second.channel_sets);
  EXPECT_EQ(first.groups, second.groups);
  // The analysis works on an inlined copy of the graph: the module still runs, and a module
  // that already ran analyses the same.
  module.eval();
  const at::Tensor out = module.forward({torch::zeros({1, 3, 16, 16})}).toTensor();
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{1, 10}));
  const LayerDependencies after_run = analyze_dependencies(module);
  EXPECT_EQ(after_run.channel_sets, first.channel_sets);
  EXPECT_EQ(after_run.groups, first.groups);
}

sdk::Errc error_code_of(const std::function<void()>& run, std::string& message) {
  try {
    run();
  } catch (const sdk::Error& e) {
    message = e.what();
    return e.code();
  }
  ADD_FAILURE() << "no sdk::Error thrown";
  return sdk::Errc::kInternal;
}

TEST(DependencyAnalysisTest, ModelsWithoutAnalysableGraphThrowUnsupported) {
  std::string message;
  auto nn = make_nn_model(
      torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 2, 3))).ptr());
  EXPECT_EQ(error_code_of([&] { nn->dependencies(); }, message), sdk::Errc::kUnsupported);
  EXPECT_THAT(message, HasSubstr("graph"));

  // A TorchScript module without forward: the adapter says what could not be analysed.
  auto no_forward = make_torchscript_model(torch::jit::Module("NoForward"));
  EXPECT_EQ(error_code_of([&] { no_forward->dependencies(); }, message),
            sdk::Errc::kUnsupported);
  EXPECT_THAT(message, HasSubstr("dependencies"));
  EXPECT_THAT(message, HasSubstr("no forward method"));
}

// ---- control flow the model fixes: folded before any analysis --------------------------------

size_t count_ifs(const torch::jit::Block* block) {
  size_t n = 0;
  for (const torch::jit::Node* node : block->nodes()) {
    n += node->kind() == c10::prim::If ? 1 : 0;
    for (const torch::jit::Block* sub : node->blocks()) {
      n += count_ifs(sub);
    }
  }
  return n;
}

// Whether a condition is computed from a tensor's rank (aten::dim, or aten::len of aten::size),
// looking a few ops back.
bool reads_rank(const torch::jit::Value* value, int depth = 4) {
  const torch::jit::Node* node = value->node();
  if (node->kind() == c10::Symbol::fromQualString("aten::dim") ||
      (node->kind() == c10::Symbol::fromQualString("aten::len") &&
       node->input(0)->node()->kind() == c10::Symbol::fromQualString("aten::size"))) {
    return true;
  }
  if (depth == 0) {
    return false;
  }
  for (const torch::jit::Value* input : node->inputs()) {
    if (reads_rank(input, depth - 1)) {
      return true;
    }
  }
  return false;
}

TEST(ConstantFoldingTest, BranchesOnAttributesFoldAndATraceFoldsTheRankChecksToo) {
  const torch::jit::Module module =
      torch::jit::load((test::source_dir() / "tests/data/constant_branches.pt").string());
  std::shared_ptr<torch::jit::Graph> raw =
      torch::jit::toGraphFunction(module.get_method("forward").function()).graph()->copy();
  torch::jit::Inline(*raw);
  const size_t raw_ifs = count_ifs(raw->block());
  // 3 x (use_res_connect, downsample is not None), the stem's rank check, BatchNorm's.
  EXPECT_GE(raw_ifs, 8u);

  const std::shared_ptr<torch::jit::Graph> folded = graph_trace::inline_forward(module);
  // Without an input only rank checks are left: the stem's `x.dim() == 4` and adaptive
  // pooling's `len(input.size()) > 2`.
  size_t left = 0;
  for (const torch::jit::Node* node : folded->nodes()) {
    if (node->kind() == c10::prim::If) {
      ++left;
      EXPECT_TRUE(reads_rank(node->input())) << *node;
    }
  }
  EXPECT_EQ(left, 2u);
  EXPECT_EQ(count_ifs(folded->block()), 2u);

  const graph_trace::Trace trace = graph_trace::trace_forward(module, torch::randn({1, 3, 8, 8}));
  EXPECT_EQ(count_ifs(trace.graph->block()), 0u);
  // The module's own graph keeps its control flow: folding works on a copy.
  std::shared_ptr<torch::jit::Graph> again =
      torch::jit::toGraphFunction(module.get_method("forward").function()).graph()->copy();
  torch::jit::Inline(*again);
  EXPECT_EQ(count_ifs(again->block()), raw_ifs);
}

TEST(ConstantFoldingTest, AFixedInputShapeFoldsWhatSizesDecideButNeverWhatTheContentsDo) {
  torch::jit::Module module("ShapeProbe");
  module.define(R"(
def forward(self, x):
    pad = [0, 0]
    if x.size(2) % 4 != 0:
        pad[1] = 4 - x.size(2) % 4
    y = x * (float(x.size(1)) ** -0.5)
    if pad[1] > 0:
        y = y + 1.0
    if bool(x.sum() > 0):
        y = y * 2.0
    return y
)");
  const auto count_kind = [](const std::shared_ptr<torch::jit::Graph>& graph, const char* op) {
    size_t count = 0;
    for (const torch::jit::Node* node : graph->nodes()) {
      count += node->kind() == c10::Symbol::fromQualString(op) ? 1 : 0;
    }
    return count;
  };
  const at::Tensor x = torch::randn({1, 2, 6, 6});
  // For any input shape, sizes are not constants: every branch stays.
  const graph_trace::Trace any = graph_trace::trace_forward(module, x);
  EXPECT_EQ(count_ifs(any.graph->block()), 3u);
  // At a fixed shape the two size branches, the list write and the scale fold; the branch on
  // the input's contents stays.
  const graph_trace::Trace fixed =
      graph_trace::trace_forward(module, x, graph_trace::InputShape::kFixed);
  EXPECT_EQ(count_ifs(fixed.graph->block()), 1u);
  EXPECT_EQ(count_kind(fixed.graph, "aten::pow"), 0u);
  EXPECT_EQ(count_kind(fixed.graph, "aten::sum"), 1u);
  // The folded graph computes what the module does on that shape.
  torch::jit::GraphFunction function("folded", fixed.graph->copy(), nullptr);
  std::vector<c10::IValue> stack{module._ivalue(), x};
  function.run(stack);
  EXPECT_TRUE(stack.front().toTensor().allclose(module.forward({x}).toTensor()));
}

TEST(ConstantFoldingTest, AssignedAttributesStayAndTrainingFoldsToTheCurrentMode) {
  torch::jit::Module module("FoldProbe");
  module.register_attribute("training", c10::BoolType::get(), true);
  module.register_attribute("calls", c10::IntType::get(), int64_t{0});
  module.register_attribute("double_it", c10::BoolType::get(), true);
  module.define(R"(
def forward(self, x):
    self.calls = self.calls + 1
    if self.calls > 1:
        x = x + 1
    if self.double_it:
        x = x * 2
    if self.training:
        x = x - 3
    return x
)");
  const auto has = [](const std::shared_ptr<torch::jit::Graph>& graph, const char* op) {
    for (const torch::jit::Node* node : graph->nodes()) {
      if (node->kind() == c10::Symbol::fromQualString(op)) {
        return true;
      }
    }
    return false;
  };
  module.train();
  std::shared_ptr<torch::jit::Graph> graph = graph_trace::inline_forward(module);
  EXPECT_EQ(count_ifs(graph->block()), 1u);  // `calls` is assigned in forward: not a constant
  EXPECT_TRUE(has(graph, "aten::mul"));
  EXPECT_TRUE(has(graph, "aten::sub"));
  module.eval();
  graph = graph_trace::inline_forward(module);
  EXPECT_EQ(count_ifs(graph->block()), 1u);
  EXPECT_TRUE(has(graph, "aten::mul"));
  EXPECT_FALSE(has(graph, "aten::sub"));  // eval: the training branch is gone
}

TEST(DependencyAnalysisTest, BranchesOnConstantAttributesDoNotMergeTheirArms) {
  // blocks.1 has no residual add (use_res_connect = False): its output, from its downsample,
  // meets only blocks.2's add. Without folding, both arms of blocks.1's `if` would be walked
  // and the add it never runs would couple everything into one set.
  const LayerDependencies deps =
      model_dependencies(test::source_dir() / "tests/data/constant_branches.pt");
  EXPECT_EQ(as_set_of_sets(deps.channel_sets),
            (SetOfSets{{"stem", "blocks.0.conv.0"},
                       {"blocks.1.conv.0"},
                       {"blocks.1.downsample", "blocks.2.conv.0"},
                       {"fc"}}));
}

}  // namespace
}  // namespace lithe::host
