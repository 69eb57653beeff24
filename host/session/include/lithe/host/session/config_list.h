#pragma once
/// \file
/// NNI's config_list resolution (reference §1.1) with Lithe's departures: which modules are
/// compressed, and with which config entry.
///
/// Rules: each entry is an object with `op_types` and/or `op_names` (lists of strings; both
/// must match when both are given) and optionally `exclude` (bool). "default" in op_types
/// stands for NNI's weighted module types. For each module (root excluded) the LAST matching
/// entry wins as a whole; if that entry has `exclude: true` the module is not compressed
/// (`exclude: false` means "not excluded"). A selected module without a weight tensor is an
/// error naming it; so is an op_names entry that names no module.

#include <functional>
#include <string>
#include <vector>

#include "lithe/host/model/model.h"
#include "lithe/host/session/compression_config.h"
#include "lithe/sdk/options.h"

namespace lithe::host {

/// NNI's default_layers.weighted_modules, in NNI's order.
const std::vector<std::string>& default_op_types();

/// A module chosen for compression with the entry that selected it.
struct SelectedLayer {
  size_t module_index;  ///< index into Model::modules()
  size_t entry_index;   ///< index into the parsed entries
};

struct ResolvedConfig {
  std::vector<ConfigEntry> entries;
  std::vector<SelectedLayer> layers;  ///< in named_modules order
};

/// Matches parsed config_list `entries` (JSON Pointer `path`, e.g. "/config_list") against
/// `model`'s modules. Throws sdk::Error(kInvalidConfig) with the path, the rule and the value
/// seen (an op_names entry naming no module, a selected module without a weight). Each
/// resolved entry's options are a fresh copy with their own record of read keys.
/// `needs_weight(entry)` says whether a module the entry selects must have a weight (empty:
/// always, as for pruners; quantizers need one only to quantize it); `what_needs_weight`
/// completes "which has no weight tensor to ..." in that error.
ResolvedConfig resolve_config_list(
    const std::vector<ConfigEntry>& entries, const std::string& path, const Model& model,
    const std::function<bool(const ConfigEntry&)>& needs_weight = {},
    const std::string& what_needs_weight = "compress");

/// The same from the JSON text of the list (parsed with parse_json_document's limits).
ResolvedConfig resolve_config_list(
    const std::string& config_list_json, const std::string& path, const Model& model,
    const std::function<bool(const ConfigEntry&)>& needs_weight = {},
    const std::string& what_needs_weight = "compress");

}  // namespace lithe::host
