#pragma once
// A registry holding the in-tree level plugin, linked directly (no dlopen).

#include "lithe/host/runtime/plugin_registry.h"
#include "plugins/level/level.h"

namespace lithe::test {

inline host::PluginRegistry& level_registry() {
  static host::PluginRegistry* registry = [] {
    auto* r = new host::PluginRegistry();
    plugins::level::register_algorithms(*r);
    return r;
  }();
  return *registry;
}

}  // namespace lithe::test
