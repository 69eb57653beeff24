#pragma once
/// \file
/// Which plugin call was running when the process died. Every call into plugin code goes
/// through detail::invoke_plugin, which records what it runs ("pruner 'snip' on layer
/// 'conv1'") for its duration; install_crash_reporter() makes a fatal signal (SIGSEGV, SIGBUS,
/// SIGFPE, SIGILL, SIGABRT) print that record, and the file holding the faulting code, as one
/// line on stderr before the process dies of the same signal (exit status 128 + signal, a core
/// dump where enabled). The handler is async-signal-safe but for dladdr() (the loader's symbol
/// lookup, used by every crash reporter; it only reads the loaded-object list).

#include <string>

namespace lithe::host {

/// Installs the handler on an alternate signal stack (so a stack overflow inside a plugin is
/// reported too); idempotent. The `lithe` CLI installs it at start; an embedding program may
/// (it replaces the program's own handlers for those signals, so it is not done for it).
void install_crash_reporter();

namespace detail {

/// Records `context` (and ", in <call>()" when `call` is given) as the running plugin call
/// until destroyed (nests: the previous record comes back). Cheap enough for every plugin call
/// on the training hot path: bounded copies into a static buffer, no allocation.
class PluginCallRecord {
 public:
  static constexpr size_t kSize = 1024;  ///< longer records are cut
  explicit PluginCallRecord(const std::string& context, const char* call = nullptr);
  ~PluginCallRecord();
  PluginCallRecord(const PluginCallRecord&) = delete;
  PluginCallRecord& operator=(const PluginCallRecord&) = delete;

 private:
  char previous_[kSize];
  bool had_previous_ = false;
};

}  // namespace detail
}  // namespace lithe::host
