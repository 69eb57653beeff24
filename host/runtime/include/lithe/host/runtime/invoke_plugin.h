#pragma once
// Every call into plugin code goes through invoke_plugin: whatever the plugin throws comes back
// as one sdk::Error that says which algorithm failed where, keeping the plugin's own message
// (which states where, the rule and the value); a crash inside it is reported naming the call
// (crash_report.h).

#include <c10/util/Exception.h>

#include <string>

#include "lithe/host/runtime/crash_report.h"
#include "lithe/sdk/error.h"

namespace lithe::host::detail {

/// Runs `fn` (plugin code). `call`, when given, names the plugin function for the crash
/// report only ("calc_mask"); errors keep `context` alone.
template <class Fn>
auto invoke_plugin(const std::string& context, Fn&& fn, const char* call = nullptr)
    -> decltype(fn()) {
  // What a fatal signal inside the call reports.
  const PluginCallRecord record(context, call);
  try {
    return fn();
  } catch (const sdk::Error& e) {
    // A host call nested in a plugin call (e.g. update_masks_now) already said who failed.
    if (std::string(e.what()).rfind(context, 0) == 0) {
      throw;
    }
    throw sdk::Error(e.code(), context + ": " + e.what());
  } catch (const c10::Error& e) {
    throw sdk::Error(sdk::Errc::kInternal, context + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw sdk::Error(sdk::Errc::kInternal, context + ": " + e.what());
  }
}

}  // namespace lithe::host::detail
