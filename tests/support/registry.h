#pragma once
// Registries of in-tree plugins linked directly into a test (no dlopen): each list of
// registration functions is registered once per process and kept, as a loaded plugin would be.

#include <map>
#include <memory>
#include <vector>

#include "lithe/host/runtime/plugin_registry.h"
#include "lithe/sdk/registry.h"
#include "plugins/level/level.h"

namespace lithe::test {

using RegisterAlgorithms = void (*)(sdk::Registry&);

/// The registry holding the algorithms of `plugins` (their register_algorithms, in order); the
/// same list gives the same registry.
inline host::PluginRegistry& registry_of(const std::vector<RegisterAlgorithms>& plugins) {
  static std::map<std::vector<RegisterAlgorithms>, std::unique_ptr<host::PluginRegistry>> kept;
  std::unique_ptr<host::PluginRegistry>& registry = kept[plugins];
  if (!registry) {
    registry = std::make_unique<host::PluginRegistry>();
    for (const RegisterAlgorithms add : plugins) {
      add(*registry);
    }
  }
  return *registry;
}

inline host::PluginRegistry& level_registry() {
  return registry_of({&plugins::level::register_algorithms});
}

}  // namespace lithe::test
