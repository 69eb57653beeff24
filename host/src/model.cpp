#include "lithe/host/model.h"

#include "lithe/host/staged_file.h"

namespace lithe::host {

Model::~Model() = default;

void Model::save(const std::filesystem::path& path) const {
  StagedFile staged(path);
  write(staged.temp_path());
  staged.commit();
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
