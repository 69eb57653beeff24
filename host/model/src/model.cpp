#include "lithe/host/model/model.h"

#include "lithe/host/io/file_io.h"
#include "lithe/host/io/staged_file.h"
#include "lithe/sdk/error.h"

namespace lithe::host {

Model::~Model() = default;
ForwardCut::~ForwardCut() = default;

std::unique_ptr<ForwardCut> Model::cut_forward(const std::string& /*layer*/, CutAt /*at*/,
                                               std::string* why_not) {
  *why_not = kind() + " models expose no graph to cut";
  return nullptr;
}

namespace {
thread_local int unobserved_depth = 0;
}  // namespace

UnobservedForwards::UnobservedForwards() { ++unobserved_depth; }
UnobservedForwards::~UnobservedForwards() { --unobserved_depth; }
bool UnobservedForwards::active() { return unobserved_depth > 0; }

void Model::save(const std::filesystem::path& path) const {
  StagedFile staged(path, "model file");
  staged.write(serialize());
  staged.commit();
}

void Model::write(const std::filesystem::path& file) const { write_file(file, serialize()); }

LayerDependencies Model::dependencies() const {
  throw sdk::Error(sdk::Errc::kUnsupported,
                   "dependency analysis needs the model's graph, which " + kind() +
                       " models do not expose; use a TorchScript model (torch.jit.script) or "
                       "turn dependency_aware off");
}

c10::Device Model::device() const {
  for (const at::Tensor& t : state_tensors()) {
    if (t.defined()) {
      return t.device();
    }
  }
  return c10::Device(c10::kCPU);
}

void Model::to(const c10::Device& device) {
  LITHE_CHECK(this->device() == device, sdk::Errc::kUnsupported, kind(),
              " models cannot move to ", device.str(), " (they are on ", this->device().str(), ")");
}

void Model::train_module(const std::string& module, bool /*on*/) {
  throw sdk::Error(sdk::Errc::kUnsupported, "module '" + module + "': " + kind() +
                                                " models cannot switch one module's mode");
}

std::optional<double> Model::batchnorm_momentum(const std::string& module) const {
  throw sdk::Error(sdk::Errc::kUnsupported, "module '" + module + "': " + kind() +
                                                " models do not expose BatchNorm momentum");
}

const ModuleRecord* Model::find_module(const std::string& name) const {
  for (const ModuleRecord& record : modules()) {
    if (record.name == name) {
      return &record;
    }
  }
  return nullptr;
}

}  // namespace lithe::host
