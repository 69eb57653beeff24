#pragma once
/// \file
/// One adapter over the two kinds of models Lithe compresses: TorchScript (torch::jit::Module)
/// and the C++ frontend (torch::nn::Module). Module names and op types follow NNI: dotted names
/// in named_modules order, the root excluded; op type = class name ("Conv2d", "Linear", ...).

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lithe/host/graph/cut_at.h"
#include "lithe/host/graph/layer_dependencies.h"
#include "lithe/sdk/quantizer.h"

namespace torch::jit {
struct Module;
}
namespace torch::nn {
class Module;
}

namespace lithe::host {

/// One non-root module.
struct ModuleRecord {
  std::string name;     ///< dotted name, e.g. "layer1.conv1"
  std::string op_type;  ///< NNI op type, e.g. "Conv2d": the class name, except that a TorchScript
                        ///< class adding nothing to a convolution (torchvision's Conv3DSimple;
                        ///< scripting drops its base class) has its convolution's type
  std::string class_name;  ///< the module's own class name ("Conv3DSimple"); config op_types
                           ///< match it as well as op_type. Empty: the same as op_type
  /// Live parameter/tensor attribute "weight", if any; for a module without one that has
  /// "in_proj_weight" (nn.MultiheadAttention's fused q, k, v projection [3E, E]), that one.
  std::optional<at::Tensor> weight;
  /// Live "bias" ("in_proj_bias" with in_proj_weight), if any (absent or None -> empty).
  std::optional<at::Tensor> bias;
};

/// Called with a module name and that module's output after each forward through it.
using TapCallback = std::function<void(const std::string& module, const at::Tensor& output)>;

/// Which tensors of one module are replaced on every forward (fake quantization).
struct QuantSite {
  std::string module;   ///< dotted module name
  bool input = false;   ///< the module's (first) input, at the call site in its parent
  bool weight = false;  ///< its "weight", inside its own forward: the module computes with the
                        ///< returned tensor, so gradients reach the float weight through it
  bool output = false;  ///< its output, at the call site (observers see the replaced output)
};

/// Returns the tensor the model uses instead of `x` (same shape).
using QuantCallback =
    std::function<at::Tensor(const std::string& module, sdk::QuantType type, const at::Tensor& x)>;

/// A model's forward cut in two at one layer (Model::cut_forward), for evaluations repeated
/// while only that layer's parameters change. Runs in eval mode, without taps; parameters are
/// read when it runs, so the layer's weights may change between suffix runs (nothing else may:
/// that invalidates prefix results).
class ForwardCut {
 public:
  virtual ~ForwardCut();
  /// What the layer and everything after it read from `input` and from the layers before it.
  virtual c10::IValue prefix(const at::Tensor& input) = 0;
  /// The model's output from a prefix() result, with the layer's weights as they are now.
  /// `cached` is left unchanged, so it serves any number of runs.
  virtual at::Tensor suffix(const c10::IValue& cached) = 0;
  /// A cut after the layer (CutAt::kLayerOutput): where a prefix() result (a tuple) holds the
  /// layer's output. A suffix run may be given a tuple with that element replaced. nullopt for
  /// a cut before the layer.
  virtual std::optional<LayerOutputSlot> layer_output() const { return std::nullopt; }
};

class Model {
 public:
  virtual ~Model();
  /// "torchscript" or "nn".
  virtual std::string kind() const = 0;
  /// Every module except the root, in named_modules order.
  virtual const std::vector<ModuleRecord>& modules() const = 0;
  /// The record named `name`, or nullptr.
  const ModuleRecord* find_module(const std::string& name) const;
  /// Every trainable parameter (live tensors, shared with the model).
  virtual std::vector<at::Tensor> parameters() const = 0;
  /// Every parameter and buffer (e.g. BatchNorm running statistics), live, in a fixed order:
  /// what a saved state must hold to restore the model.
  virtual std::vector<at::Tensor> state_tensors() const = 0;
  /// Channel and group dependencies between the model's convolutions, from its graph. The
  /// default throws sdk::Error(kUnsupported): only TorchScript models expose a graph.
  virtual LayerDependencies dependencies() const;
  /// Runs the model on one input tensor and returns its main output: the output itself when it
  /// is a tensor; for TorchScript models also the first element of a tuple or list (torchvision's
  /// GoogLeNet and Inception return the logits first, their auxiliary heads after) or the "out"
  /// entry of a dict (torchvision's segmentation models). Anything else: sdk::Error(kUnsupported).
  virtual at::Tensor forward(const at::Tensor& input) = 0;
  /// The forward cut at module `layer` (see ForwardCut), before it or after its op (CutAt).
  /// nullptr, with the reason in `*why_not`, where the model cannot be cut: C++-frontend models
  /// (no graph), models being quantized, forwards that assign attributes or write in place
  /// across the cut, a layer that reads only the model's input (before it: nothing to keep),
  /// or a layer that is not one convolution or linear op (after it).
  virtual std::unique_ptr<ForwardCut> cut_forward(const std::string& layer, CutAt at,
                                                  std::string* why_not);
  /// The device of the model's parameters and buffers (the first one's; the CPU for a model
  /// with none).
  c10::Device device() const;
  /// Moves every parameter and buffer to `device`, in place: each keeps its tensor identity
  /// (set_data, as torch.nn.Module.to does), so live tensors handed out before (ModuleRecord,
  /// parameters()) see the moved data. Move a model before a compression session attaches to
  /// it: state a session creates (masks, quantization ranges) stays where it was made. Tensors
  /// a TorchScript forward creates itself (constants in its code) stay on their device. A move
  /// libtorch refuses (a device without in-place moves such as meta, a full GPU) throws
  /// sdk::Error(kUnsupported) naming the device, the tensors already moved moved back as far as
  /// libtorch lets them. The default throws kUnsupported unless the model is on `device`.
  virtual void to(const c10::Device& device);
  /// Switches training / evaluation mode.
  virtual void train(bool on) = 0;
  virtual bool is_training() const = 0;
  /// Switches one module and its children between training and evaluation mode, whatever the
  /// rest of the model's mode (BatchNorm re-estimation runs BatchNorm layers in training mode
  /// inside a model in evaluation mode, so that dropout stays off). The next train() call sets
  /// every module again. sdk::Error(kInvalidConfig) when the model has no module of that name;
  /// the default throws kUnsupported.
  virtual void train_module(const std::string& module, bool on);
  /// The running-statistics momentum m of BatchNorm layer `module` (new = (1 - m) · old +
  /// m · batch statistic, PyTorch's convention), or nullopt when it keeps a cumulative average
  /// (momentum None). sdk::Error(kUnsupported) naming the module when it is not a
  /// BatchNorm1d/2d/3d (the default throws kUnsupported for every module).
  virtual std::optional<double> batchnorm_momentum(const std::string& module) const;
  /// Replaces the set of observed modules: after every forward of a module in `modules`,
  /// `callback(name, output)` runs; an empty list removes all taps (the original graph is
  /// restored; saved models never contain taps). Throws sdk::Error(kUnsupported) naming the
  /// module when it cannot be observed (see the implementations for the rules).
  virtual void set_taps(const std::vector<std::string>& modules, TapCallback callback) = 0;
  /// Replaces the set of quantized tensors (see QuantSite); an empty list removes all (the
  /// original forward is restored; saved models never contain the rewrite). Coexists with
  /// set_taps. Throws sdk::Error(kUnsupported) naming the module when a site cannot be
  /// installed (see the implementations for the rules); on error the previous state stays.
  virtual void set_quantization(const std::vector<QuantSite>& sites, QuantCallback callback) = 0;
  /// The buffers of module `module` (its own, not its children's; live tensors; for
  /// TorchScript every tensor attribute that is not a parameter), in definition order.
  virtual std::vector<std::pair<std::string, at::Tensor>> module_buffers(
      const std::string& module) const = 0;
  /// Registers `value` (the same tensor object, not a copy) as buffer `name` of `module`, or
  /// re-points an existing tensor buffer of that name to it; it is then saved with the model.
  /// TorchScript: the buffer is added to the module's class type, which the module given to
  /// make_torchscript_model shares, and other instances of that type in the model get an
  /// empty tensor under the same name (so they stay loadable); other copies of the module
  /// made outside Lithe before the call (e.g. deepcopy) must not be used afterwards.
  /// Throws sdk::Error(kInvalidModel) when the module has a non-tensor attribute, a parameter
  /// or a submodule of that name.
  virtual void set_module_buffer(const std::string& module, const std::string& name,
                                 const at::Tensor& value) = 0;
  /// Saves the model atomically to `path`: a TorchScript archive (loads with torch.jit.load,
  /// never contains taps), or for C++-frontend models a torch::save archive of its parameters
  /// and buffers (loads with torch::load into the same module class).
  void save(const std::filesystem::path& path) const;
  /// The bytes save() writes. Built in memory so that a failing disk is an ordinary error
  /// (torch's file writer terminates the process when it cannot write); sdk::Error(kIo) when the
  /// model cannot be serialised.
  virtual std::string serialize() const = 0;
  /// Writes the same content as save() directly to `file` (no temporary; see StagedFile).
  void write(const std::filesystem::path& file) const;
};

/// While an instance lives, forwards on this thread call no tap callback: for forwards that must
/// not count as observations of the data a pruner learns from (Lithe's evaluation and input
/// checks use it; so can a host application's own validation loop). Nestable.
class UnobservedForwards {
 public:
  UnobservedForwards();
  ~UnobservedForwards();
  UnobservedForwards(const UnobservedForwards&) = delete;
  UnobservedForwards& operator=(const UnobservedForwards&) = delete;
  /// Whether an instance lives on this thread.
  static bool active();
};

/// Loads a TorchScript file as it is (sdk::Error(kIo) naming the file when it is missing,
/// kInvalidModel when it is not a TorchScript archive).
torch::jit::Module load_torchscript_module(const std::filesystem::path& path);
/// load_torchscript_module, adapted as a Model.
std::unique_ptr<Model> load_torchscript_model(const std::filesystem::path& path);
/// Adapts an in-memory TorchScript module (shares its parameters).
std::unique_ptr<Model> make_torchscript_model(const torch::jit::Module& module);
/// Forward function of a C++-frontend model (torch::nn::Module has no virtual forward).
using NnForward = std::function<at::Tensor(const at::Tensor& input)>;
/// Adapts a C++-frontend module (shares it). `forward` runs the model; it may be empty when the
/// root is a torch::nn::Sequential. Op types drop the "torch::nn::" prefix and "Impl" suffix
/// ("torch::nn::Conv2dImpl" -> "Conv2d"). Taps work on modules inside torch::nn::Sequential
/// whose forward takes and returns one tensor.
std::unique_ptr<Model> make_nn_model(std::shared_ptr<torch::nn::Module> module,
                                     NnForward forward = {});

}  // namespace lithe::host
