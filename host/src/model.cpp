#include "lithe/host/model.h"

namespace lithe::host {

Model::~Model() = default;

const ModuleRecord* Model::find_module(const std::string& name) const {
  for (const ModuleRecord& record : modules()) {
    if (record.name == name) {
      return &record;
    }
  }
  return nullptr;
}

}  // namespace lithe::host
