// C++-frontend models. torch::nn::Module has no virtual forward and no graph to rewrite, so
// observation swaps the AnyModule held by a torch::nn::Sequential for a forwarding wrapper (not
// registered as a child, so names and parameters do not change) and swaps it back on removal.
#include <torch/torch.h>


#include <map>

#include "lithe/host/model.h"
#include "lithe/sdk/error.h"

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
    return forward_(input);
  }

  void train(bool on) override { root_->train(on); }
  bool is_training() const override { return root_->is_training(); }

  void set_taps(const std::vector<std::string>& names, TapCallback callback) override {
    // Validate every name before changing anything.
    struct Plan {
      torch::nn::SequentialImpl* sequential;
      size_t index;
      std::string name;
    };
    std::vector<Plan> plans;
    for (const std::string& name : names) {
      LITHE_CHECK(by_name_.count(name) != 0, sdk::Errc::kInvalidConfig, "cannot observe module '",
                  name, "': the model has no module of that name");
      const size_t dot = name.rfind('.');
      const std::string parent_name = dot == std::string::npos ? "" : name.substr(0, dot);
      const std::string child = dot == std::string::npos ? name : name.substr(dot + 1);
      torch::nn::Module* parent =
          parent_name.empty() ? root_.get() : by_name_.at(parent_name).get();
      auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(parent);
      LITHE_CHECK(sequential != nullptr, sdk::Errc::kUnsupported, "module '", name,
                  "' cannot be observed: activation collectors on C++-frontend models need the ",
                  "module to sit inside a torch::nn::Sequential, but its parent is ",
                  parent->name());
      const size_t index = std::stoul(child);
      LITHE_INTERNAL_ASSERT(index < sequential->size());
      plans.push_back({sequential, index, name});
    }
    restore();
    if (plans.empty()) {
      return;
    }
    auto shared = std::make_shared<TapCallback>(std::move(callback));
    for (const Plan& plan : plans) {
      torch::nn::AnyModule& slot = *(plan.sequential->begin() + static_cast<long>(plan.index));
      swapped_.push_back({plan.sequential, plan.index, slot});
      slot = torch::nn::AnyModule(Tap(slot, plan.name, shared));
    }
  }

  void write(const std::filesystem::path& file) const override {
    try {
      torch::serialize::OutputArchive archive;
      root_->save(archive);
      archive.save_to(file.string());
    } catch (const std::exception& e) {
      const std::string message = e.what();
      throw sdk::Error(sdk::Errc::kIo, "cannot write model to '" + file.string() +
                                           "': " + message.substr(0, message.find('\n')));
    }
  }

 private:
  struct Swapped {
    torch::nn::SequentialImpl* sequential;
    size_t index;
    torch::nn::AnyModule original;
  };

  void restore() {
    for (auto it = swapped_.rbegin(); it != swapped_.rend(); ++it) {
      *(it->sequential->begin() + static_cast<long>(it->index)) = it->original;
    }
    swapped_.clear();
  }

  std::shared_ptr<torch::nn::Module> root_;
  NnForward forward_;
  std::vector<ModuleRecord> modules_;
  std::map<std::string, std::shared_ptr<torch::nn::Module>> by_name_;
  std::vector<Swapped> swapped_;
};

}  // namespace

std::unique_ptr<Model> make_nn_model(std::shared_ptr<torch::nn::Module> module, NnForward forward) {
  return std::make_unique<NnModel>(std::move(module), std::move(forward));
}

}  // namespace lithe::host
