// C++-frontend models. torch::nn::Module has no virtual forward and no graph to rewrite, so
// observation and input/output quantization swap the AnyModule held by a torch::nn::Sequential
// for a forwarding wrapper (not registered as a child, so names and parameters do not change)
// and swap it back on removal. Weight quantization works on the built-in layers listed in
// weight_member() (convolutions, Linear, Bilinear, embeddings, PReLU, normalisations), whose
// forward reads their public `weight` member: Model::forward points
// that member at the quantized weight for the duration of the forward, and back at the float
// parameter afterwards, so gradients reach the parameter through the quantized tensor.
#include <torch/torch.h>


#include <map>
#include <sstream>

#include "lithe/host/model/model.h"
#include "lithe/sdk/error.h"
#include "model_move.h"

namespace lithe::host {
namespace {

std::string nn_op_type(const torch::nn::Module& module) {
  std::string name = module.name();
  const size_t colon = name.rfind("::");
  if (colon != std::string::npos) {
    name = name.substr(colon + 2);
  }
  const std::string suffix = "Impl";
  if (name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    name.resize(name.size() - suffix.size());
  }
  return name;
}

class TapImpl : public torch::nn::Module {
 public:
  TapImpl(torch::nn::AnyModule inner, std::string name, std::shared_ptr<TapCallback> callback)
      : inner_(std::move(inner)), name_(std::move(name)), callback_(std::move(callback)) {}
  at::Tensor forward(const at::Tensor& input) {
    at::Tensor output = inner_.forward(input);
    if (!UnobservedForwards::active()) {
      (*callback_)(name_, output);
    }
    return output;
  }

 private:
  torch::nn::AnyModule inner_;
  std::string name_;
  std::shared_ptr<TapCallback> callback_;
};
TORCH_MODULE(Tap);

class QuantizeImpl : public torch::nn::Module {
 public:
  QuantizeImpl(torch::nn::AnyModule inner, QuantSite site, std::shared_ptr<QuantCallback> callback)
      : inner_(std::move(inner)), site_(std::move(site)), callback_(std::move(callback)) {}
  at::Tensor forward(const at::Tensor& input) {
    const at::Tensor x =
        site_.input ? (*callback_)(site_.module, sdk::QuantType::kInput, input) : input;
    const at::Tensor y = inner_.forward(x);
    return site_.output ? (*callback_)(site_.module, sdk::QuantType::kOutput, y) : y;
  }

 private:
  torch::nn::AnyModule inner_;
  QuantSite site_;
  std::shared_ptr<QuantCallback> callback_;
};
TORCH_MODULE(Quantize);

template <class Impl>
at::Tensor* weight_member_if(torch::nn::Module& module) {
  auto* impl = dynamic_cast<Impl*>(&module);
  return impl == nullptr ? nullptr : &impl->weight;
}

// The public member a built-in layer's forward reads its weight from, or null.
template <class... Impls>
at::Tensor* weight_member_of(torch::nn::Module& module) {
  at::Tensor* found = nullptr;
  ((found = found != nullptr ? found : weight_member_if<Impls>(module)), ...);
  return found;
}

at::Tensor* weight_member(torch::nn::Module& module) {
  using namespace torch::nn;  // NOLINT(google-build-using-namespace)
  return weight_member_of<Conv1dImpl, Conv2dImpl, Conv3dImpl, ConvTranspose1dImpl,
                          ConvTranspose2dImpl, ConvTranspose3dImpl, LinearImpl, BilinearImpl,
                          EmbeddingImpl, EmbeddingBagImpl, PReLUImpl, BatchNorm1dImpl,
                          BatchNorm2dImpl, BatchNorm3dImpl, LayerNormImpl, GroupNormImpl>(module);
}

class NnModel final : public Model {
 public:
  NnModel(std::shared_ptr<torch::nn::Module> root, NnForward forward)
      : root_(std::move(root)), forward_(std::move(forward)) {
    LITHE_CHECK(root_ != nullptr, sdk::Errc::kInvalidModel, "make_nn_model: the module is null");
    if (!forward_) {
      auto sequential = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(root_);
      if (sequential) {
        forward_ = [sequential](const at::Tensor& x) { return sequential->forward(x); };
      }
    }
    for (const auto& item : root_->named_modules("", /*include_self=*/false)) {
      ModuleRecord record;
      record.name = item.key();
      record.op_type = nn_op_type(*item.value());
      const auto params = item.value()->named_parameters(/*recurse=*/false);
      if (const at::Tensor* w = params.find("weight"); w != nullptr && w->defined()) {
        record.weight = *w;
      }
      if (const at::Tensor* b = params.find("bias"); b != nullptr && b->defined()) {
        record.bias = *b;
      }
      if (!record.weight.has_value()) {  // MultiheadAttention: q, k, v in one parameter
        if (const at::Tensor* w = params.find("in_proj_weight"); w != nullptr && w->defined()) {
          record.weight = *w;
          const at::Tensor* b = params.find("in_proj_bias");
          record.bias = b != nullptr && b->defined() ? std::optional<at::Tensor>(*b) : std::nullopt;
        }
      }
      by_name_[record.name] = item.value();
      modules_.push_back(std::move(record));
    }
  }

  ~NnModel() override { restore(); }

  std::string kind() const override { return "nn"; }
  const std::vector<ModuleRecord>& modules() const override { return modules_; }

  std::vector<at::Tensor> parameters() const override { return root_->parameters(); }
  std::vector<at::Tensor> state_tensors() const override {
    std::vector<at::Tensor> out = root_->parameters();
    for (const at::Tensor& b : root_->buffers()) {
      out.push_back(b);
    }
    return out;
  }

  at::Tensor forward(const at::Tensor& input) override {
    LITHE_CHECK(static_cast<bool>(forward_), sdk::Errc::kUnsupported, "C++-frontend model '",
                root_->name(), "' is not a torch::nn::Sequential; pass a forward function to ",
                "make_nn_model");
    if (quantized_weights_.empty()) {
      return forward_(input);
    }
    // Point each quantized layer's weight member at its quantized weight for this forward.
    struct Restore {
      std::vector<QuantizedWeight>& weights;
      ~Restore() {
        for (QuantizedWeight& w : weights) {
          *w.member = w.parameter;
        }
      }
    } restore{quantized_weights_};
    for (QuantizedWeight& w : quantized_weights_) {
      *w.member = (*quant_callback_)(w.module, sdk::QuantType::kWeight, w.parameter);
    }
    return forward_(input);
  }

  void to(const c10::Device& device) override {
    // In place (set_data).
    detail::move_model_tensors(this->device(), device,
                               [&](const c10::Device& d) { root_->to(d); });
  }
  void train(bool on) override { root_->train(on); }
  bool is_training() const override { return root_->is_training(); }

  void train_module(const std::string& module, bool on) override {
    LITHE_CHECK(by_name_.count(module) != 0, sdk::Errc::kInvalidConfig, "the model has no ",
                "module '", module, "'");
    by_name_.at(module)->train(on);
  }

  std::optional<double> batchnorm_momentum(const std::string& module) const override {
    LITHE_CHECK(by_name_.count(module) != 0, sdk::Errc::kInvalidConfig, "the model has no ",
                "module '", module, "'");
    torch::nn::Module* m = by_name_.at(module).get();
    const auto plain = [](const c10::optional<double>& v) {
      return v.has_value() ? std::optional<double>(*v) : std::nullopt;
    };
    std::optional<double> momentum;
    bool batchnorm = false;
    if (auto* bn = dynamic_cast<torch::nn::BatchNorm1dImpl*>(m)) {
      batchnorm = true;
      momentum = plain(bn->options.momentum());
    } else if (auto* bn2 = dynamic_cast<torch::nn::BatchNorm2dImpl*>(m)) {
      batchnorm = true;
      momentum = plain(bn2->options.momentum());
    } else if (auto* bn3 = dynamic_cast<torch::nn::BatchNorm3dImpl*>(m)) {
      batchnorm = true;
      momentum = plain(bn3->options.momentum());
    }
    LITHE_CHECK(batchnorm, sdk::Errc::kUnsupported, "module '", module, "' (", nn_op_type(*m),
                ") is not a torch::nn BatchNorm1d/2d/3d");
    return momentum;
  }

  void set_taps(const std::vector<std::string>& names, TapCallback callback) override {
    for (const std::string& name : names) {
      sequential_slot(name, "cannot be observed: activation collectors");  // validates
    }
    tap_names_ = names;
    tap_callback_ = names.empty() ? nullptr : std::make_shared<TapCallback>(std::move(callback));
    rewrap();
  }

  void set_quantization(const std::vector<QuantSite>& sites, QuantCallback callback) override {
    // Validate every site before changing anything.
    std::vector<QuantizedWeight> weights;
    for (const QuantSite& site : sites) {
      LITHE_CHECK(by_name_.count(site.module) != 0, sdk::Errc::kInvalidConfig,
                  "cannot quantize module '", site.module,
                  "': the model has no module of that name");
      if (site.input || site.output) {
        sequential_slot(site.module, "cannot have its input or output quantized: C++-frontend "
                                     "input/output quantization");
      }
      if (site.weight) {
        torch::nn::Module& module = *by_name_.at(site.module);
        at::Tensor* member = weight_member(module);
        LITHE_CHECK(member != nullptr && member->defined(), sdk::Errc::kUnsupported,
                    "the weight of module '", site.module, "' (", nn_op_type(module),
                    ") cannot be quantized: C++-frontend weight quantization needs a built-in "
                    "torch::nn layer whose forward reads its public `weight` member");
        weights.push_back({site.module, member, *member});
      }
    }
    quant_sites_ = sites;
    quant_callback_ = sites.empty() ? nullptr : std::make_shared<QuantCallback>(std::move(callback));
    quantized_weights_ = std::move(weights);
    rewrap();
  }

  std::vector<std::pair<std::string, at::Tensor>> module_buffers(
      const std::string& module) const override {
    LITHE_CHECK(by_name_.count(module) != 0, sdk::Errc::kInvalidConfig, "the model has no ",
                "module '", module, "'");
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& item : by_name_.at(module)->named_buffers(/*recurse=*/false)) {
      out.emplace_back(item.key(), item.value());
    }
    return out;
  }

  void set_module_buffer(const std::string& module, const std::string& name,
                         const at::Tensor& value) override {
    LITHE_CHECK(by_name_.count(module) != 0, sdk::Errc::kInvalidConfig, "the model has no ",
                "module '", module, "'");
    torch::nn::Module& m = *by_name_.at(module);
    LITHE_CHECK(m.named_parameters(/*recurse=*/false).find(name) == nullptr &&
                    m.named_children().find(name) == nullptr,
                sdk::Errc::kInvalidModel, "module '", module, "' already has a parameter or ",
                "submodule named '", name, "'; it cannot hold the quantization state of that name");
    auto buffers = m.named_buffers(/*recurse=*/false);  // handles sharing the module's tensors
    if (at::Tensor* existing = buffers.find(name)) {
      if (!existing->is_same(value)) {
        // A registered buffer cannot be replaced; make it share the state's storage instead.
        at::NoGradGuard no_grad;
        existing->set_(value);
      }
      return;
    }
    m.register_buffer(name, value);
  }

  std::string serialize() const override {
    try {
      torch::serialize::OutputArchive archive;
      root_->save(archive);
      std::ostringstream out(std::ios::binary);
      archive.save_to(out);
      return std::move(out).str();
    } catch (const std::exception& e) {
      const std::string message = e.what();
      throw sdk::Error(sdk::Errc::kIo, "cannot serialise the model: " +
                                           message.substr(0, message.find('\n')));
    }
  }

 private:
  struct Swapped {
    torch::nn::SequentialImpl* sequential;
    size_t index;
    torch::nn::AnyModule original;
  };

  struct QuantizedWeight {
    std::string module;
    at::Tensor* member;    // the layer's public `weight` member
    at::Tensor parameter;  // the float parameter it normally holds
  };

  void restore() {
    for (auto it = swapped_.rbegin(); it != swapped_.rend(); ++it) {
      *(it->sequential->begin() + static_cast<long>(it->index)) = it->original;
    }
    swapped_.clear();
  }

  // The Sequential holding module `name` and its index there; throws kUnsupported otherwise.
  std::pair<torch::nn::SequentialImpl*, size_t> sequential_slot(const std::string& name,
                                                               const std::string& what) const {
    LITHE_CHECK(by_name_.count(name) != 0, sdk::Errc::kInvalidConfig, "module '", name,
                "' does not exist in the model");
    const size_t dot = name.rfind('.');
    const std::string parent_name = dot == std::string::npos ? "" : name.substr(0, dot);
    const std::string child = dot == std::string::npos ? name : name.substr(dot + 1);
    torch::nn::Module* parent = parent_name.empty() ? root_.get() : by_name_.at(parent_name).get();
    auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(parent);
    LITHE_CHECK(sequential != nullptr, sdk::Errc::kUnsupported, "module '", name, "' ", what,
                " on C++-frontend models need the module to sit inside a torch::nn::Sequential, "
                "but its parent is ", parent->name());
    // Children of a Sequential are named by position ("0", "1", ...) unless the user named
    // them; either way the position in named_children() is the slot.
    const auto children = sequential->named_children();
    for (size_t index = 0; index < children.size(); ++index) {
      if (children[index].key() == child) {
        LITHE_INTERNAL_ASSERT(index < sequential->size());
        return {sequential, index};
      }
    }
    throw sdk::Error(sdk::Errc::kInternal,
                     "module '" + name + "' is not a child of its torch::nn::Sequential parent");
  }

  // Puts back the original modules, then wraps: quantization innermost, taps around it, so an
  // observer sees the quantized output.
  void rewrap() {
    restore();
    for (const QuantSite& site : quant_sites_) {
      if (site.input || site.output) {
        const auto [sequential, index] = sequential_slot(site.module, "");
        torch::nn::AnyModule& slot = *(sequential->begin() + static_cast<long>(index));
        swapped_.push_back({sequential, index, slot});
        slot = torch::nn::AnyModule(Quantize(slot, site, quant_callback_));
      }
    }
    for (const std::string& name : tap_names_) {
      const auto [sequential, index] = sequential_slot(name, "");
      torch::nn::AnyModule& slot = *(sequential->begin() + static_cast<long>(index));
      swapped_.push_back({sequential, index, slot});
      slot = torch::nn::AnyModule(Tap(slot, name, tap_callback_));
    }
  }

  std::shared_ptr<torch::nn::Module> root_;
  NnForward forward_;
  std::vector<ModuleRecord> modules_;
  std::map<std::string, std::shared_ptr<torch::nn::Module>> by_name_;
  std::vector<Swapped> swapped_;  // in wrapping order; restore() undoes them in reverse
  std::vector<std::string> tap_names_;
  std::shared_ptr<TapCallback> tap_callback_;
  std::vector<QuantSite> quant_sites_;
  std::shared_ptr<QuantCallback> quant_callback_;
  std::vector<QuantizedWeight> quantized_weights_;
};

}  // namespace

std::unique_ptr<Model> make_nn_model(std::shared_ptr<torch::nn::Module> module, NnForward forward) {
  return std::make_unique<NnModel>(std::move(module), std::move(forward));
}

}  // namespace lithe::host
