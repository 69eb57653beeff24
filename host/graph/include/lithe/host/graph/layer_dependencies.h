#pragma once
/// \file
/// Which layers must be pruned alike, read from a model's graph (NNI's ChannelDependency and
/// GroupDependency, reference §2.8): convolutions whose outputs meet in an element-wise add
/// must keep the same output channels, and a convolution feeding a grouped convolution must
/// prune whole groups.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace torch::jit {
struct Module;
}

namespace lithe::host {

struct LayerDependencies {
  /// Every Conv1d, Conv2d, Conv3d and Linear module (the layers filter pruning removes output
  /// channels of) in exactly one set (a singleton when it has no partner); sets ordered by their
  /// first member's position in the graph, members in graph order. Dotted names. A set may also
  /// hold the ConvTranspose2d modules coupled to them; sets of ConvTranspose2d alone are not
  /// listed. Modules that forward never calls come last, as singletons, in named_modules order.
  /// NNI v2.0 lists only the sets holding a Conv2d: restricted to those, the sets are NNI's.
  std::vector<std::vector<std::string>> channel_sets;
  /// For every convolution module (Conv1d/2d/3d, ConvTranspose2d): max(its own groups, groups of
  /// the grouped convolutions that its output reaches directly) — NNI's GroupDependency (max,
  /// not lcm). Linear modules have no entry (one group).
  std::map<std::string, int64_t> groups;
};

/// Reads the channel and group dependencies from `module`'s `forward` graph (a copy, inlined;
/// the module is neither changed nor run). Works on scripted and traced modules; layers are
/// recognised by their op (aten::conv1d/2d/3d, aten::_convolution, aten::convolution,
/// aten::conv_transpose2d, aten::linear, aten::addmm / aten::matmul on a module's weight) and
/// named by the attribute path of that weight. Rules (NNI v2.0, reference §2.8):
///  - channel: every aten::add / aten::add_ with a Tensor result, and every aten::cat whose dim
///    is not the constant 1 (a non-constant dim couples, as NNI's None != 1), couples the
///    nearest Conv1d/2d/3d / Linear / ConvTranspose2d calls found walking back from its inputs
///    (every other op, control flow and list building included, is passed through). Departure
///    from NNI: NNI v2.0 does not know Conv1d/Conv3d and walks through them as if they kept
///    channels; here they end the walk like a Conv2d, and so do the ops after which a channel
///    is not the one before (view/reshape/flatten, chunk/split, select/slice, matmul/bmm,
///    einsum, attention: the op table's reshape and undescribed entries) and those that read
///    only a shape (size, new_zeros);
///  - group: a convolution with groups g > 1 raises to g the entry of each nearest
///    convolution walking back from its input. Departure from NNI: a Linear ends that walk
///    (it mixes channels, so the convolutions before it do not feed the grouped one's groups);
///    NNI walks through it. Only models with a Linear between a convolution and a grouped
///    convolution can differ.
/// Deterministic: the result depends only on the graph. Throws sdk::Error(kUnsupported) naming
/// the module or op when the graph cannot be analysed (no forward method, a convolution whose
/// groups is not a constant or module attribute).
LayerDependencies analyze_dependencies(const torch::jit::Module& module);

}  // namespace lithe::host
