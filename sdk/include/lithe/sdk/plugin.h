#pragma once
/// \file
/// The plugin entry point: one extern "C" function, lithe_get_plugin_info, returning a small
/// versioned struct. The host reads `api_version` first and `abi_tag` second, and touches no C++
/// type of the plugin unless both match. Fields are only ever appended.
///
/// A plugin source ends with
///   LITHE_PLUGIN("level", "1.0.0", lithe::plugins::level::register_algorithms)
/// which defines the entry point when built as a module by lithe_add_plugin(), and nothing when
/// the same source is linked into a test binary (tests call the register function directly).

#include <cstdint>

#include "lithe/sdk/export.h"
#include "lithe/sdk/version.h"

namespace lithe::sdk {
class Registry;
}

extern "C" {

/// Returned by every plugin; static storage, valid while the library is loaded.
struct lithe_plugin_info {
  uint32_t api_version;  ///< LITHE_SDK_API_VERSION the plugin was compiled against. Always first.
  const char* abi_tag;   ///< LITHE_SDK_ABI_TAG (SDK version + toolchain; see version.h).
  const char* name;      ///< Library name, unique among loaded plugins, e.g. "level".
  const char* version;   ///< The plugin's own semantic version, e.g. "1.0.0".
  /// Registers the plugin's algorithms. May throw sdk::Error; the host reports and skips the
  /// plugin (algorithms it registered before throwing are withdrawn).
  void (*register_algorithms)(lithe::sdk::Registry& registry);
};

/// Signature of the entry point.
typedef const lithe_plugin_info* (*lithe_get_plugin_info_fn)();
}

/// Name of the entry point symbol.
#define LITHE_PLUGIN_ENTRY_SYMBOL "lithe_get_plugin_info"

#if defined(LITHE_PLUGIN_BUILD_MODULE)
#define LITHE_PLUGIN(name, version, register_fn)                                          \
  extern "C" LITHE_PLUGIN_EXPORT const lithe_plugin_info* lithe_get_plugin_info() {        \
    static const lithe_plugin_info info{LITHE_SDK_API_VERSION, LITHE_SDK_ABI_TAG, (name),  \
                                        (version), &(register_fn)};                        \
    return &info;                                                                         \
  }
#else
#define LITHE_PLUGIN(name, version, register_fn)
#endif
