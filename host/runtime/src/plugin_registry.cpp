#include "lithe/host/runtime/plugin_registry.h"

#include "lithe/host/runtime/invoke_plugin.h"
#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

// "plugin 'level' (/…/lithe_plugin_level.so)", "plugin 'level' (linked in)" or "the host".
std::string owner_text(const std::string& plugin, const std::string& path) {
  if (plugin.empty()) {
    return "the host";
  }
  return "plugin '" + plugin + "' (" + (path.empty() ? "linked in" : path) + ")";
}

std::string owner_text(const AlgorithmEntry& entry) {
  return owner_text(entry.plugin, entry.plugin_path);
}

// Runs a plugin factory: failures name the algorithm and its plugin.
template <class Fn>
auto invoke_factory(const AlgorithmEntry& entry, Fn&& fn) -> decltype(fn()) {
  const std::string context = std::string(algorithm_kind_name(entry.kind)) + " '" +
                              entry.info.name + "' (" + owner_text(entry) + ")";
  auto result = detail::invoke_plugin(context, std::forward<Fn>(fn));
  LITHE_CHECK(result != nullptr, sdk::Errc::kInternal, context, " returned no object");
  return result;
}

// The declared "options" keys (SDK 1.4), checked before the factory reads them, so a plugin
// that declared a rule cannot be reached with a value breaking it.
void check_declared(const AlgorithmEntry& entry, const sdk::Options& options) {
  if (entry.options.has_value()) {
    entry.options->check(options, sdk::OptionScope::kOptions);
  }
}

}  // namespace

const char* algorithm_kind_name(AlgorithmKind kind) {
  switch (kind) {
    case AlgorithmKind::kMasker: return "masker";
    case AlgorithmKind::kPruner: return "pruner";
    case AlgorithmKind::kQuantizer: return "quantizer";
  }
  return "algorithm";
}

PluginRegistry::PluginRegistry() = default;
PluginRegistry::~PluginRegistry() = default;

void PluginRegistry::set_current_plugin(std::string name, std::string path, int sdk_minor,
                                        bool may_override) {
  current_plugin_ = std::move(name);
  current_path_ = std::move(path);
  current_sdk_minor_ = sdk_minor;
  may_override_ = may_override;
  taken_over_.clear();
}

void PluginRegistry::remove_plugin(const std::string& plugin) {
  for (auto it = slots_.begin(); it != slots_.end();) {
    it = it->second.entry.plugin == plugin ? slots_.erase(it) : std::next(it);
  }
  for (auto it = counterparts_.begin(); it != counterparts_.end();) {
    it = it->second.plugin == plugin ? counterparts_.erase(it) : std::next(it);
  }
}

void PluginRegistry::add(Slot slot) {
  const AlgorithmEntry& entry = slot.entry;
  LITHE_CHECK(!entry.info.name.empty(), sdk::Errc::kPluginLoad, owner_text(entry),
              " registered a ", algorithm_kind_name(entry.kind), " with an empty name");
  const auto key = std::make_pair(entry.kind, entry.info.name);
  const auto existing = slots_.find(key);
  if (existing != slots_.end() && may_override_ && existing->second.entry.plugin != entry.plugin) {
    // An allowed override: the earlier algorithm and the NNI class it declared are withdrawn.
    taken_over_.push_back(std::string(algorithm_kind_name(entry.kind)) + " '" + entry.info.name +
                          "' of " + owner_text(existing->second.entry));
    for (auto it = counterparts_.begin(); it != counterparts_.end();) {
      const bool replaced = it->second.counterpart.algorithm == entry.info.name &&
                            it->second.kind == entry.kind &&
                            it->second.plugin == existing->second.entry.plugin;
      it = replaced ? counterparts_.erase(it) : std::next(it);
    }
    existing->second = std::move(slot);
    return;
  }
  LITHE_CHECK(existing == slots_.end(), sdk::Errc::kPluginLoad, "duplicate ",
              algorithm_kind_name(entry.kind), " '", entry.info.name, "': registered by ",
              existing == slots_.end() ? std::string() : owner_text(existing->second.entry),
              " and again by ", owner_text(entry), "; a plugin cannot take over a name another "
              "plugin owns unless allowed to (--override-plugin ", entry.plugin, ")");
  slots_.emplace(key, std::move(slot));
}

void PluginRegistry::add_masker(sdk::AlgorithmInfo info, sdk::MaskerFactory factory) {
  Slot slot{{AlgorithmKind::kMasker, std::move(info), current_plugin_, current_path_, std::nullopt},
            {}, {}, {}};
  LITHE_CHECK(static_cast<bool>(factory), sdk::Errc::kPluginLoad, owner_text(slot.entry),
              " registered masker '", slot.entry.info.name, "' without a factory");
  slot.masker = std::move(factory);
  add(std::move(slot));
}

void PluginRegistry::add_pruner(sdk::AlgorithmInfo info, sdk::PrunerFactory factory) {
  Slot slot{{AlgorithmKind::kPruner, std::move(info), current_plugin_, current_path_, std::nullopt},
            {}, {}, {}};
  LITHE_CHECK(static_cast<bool>(factory), sdk::Errc::kPluginLoad, owner_text(slot.entry),
              " registered pruner '", slot.entry.info.name, "' without a factory");
  slot.pruner = std::move(factory);
  add(std::move(slot));
}

void PluginRegistry::add_quantizer(sdk::AlgorithmInfo info, sdk::QuantizerFactory factory) {
  Slot slot{{AlgorithmKind::kQuantizer, std::move(info), current_plugin_, current_path_, std::nullopt},
            {}, {}, {}};
  LITHE_CHECK(static_cast<bool>(factory), sdk::Errc::kPluginLoad, owner_text(slot.entry),
              " registered quantizer '", slot.entry.info.name, "' without a factory");
  // SDK 1.0 and 1.1 declared a preview Quantizer with another vtable; no host drove it, so
  // such quantizers cannot be called safely: refuse them rather than crash later.
  LITHE_CHECK(current_sdk_minor_ >= 2, sdk::Errc::kVersionMismatch, owner_text(slot.entry),
              " registered quantizer '", slot.entry.info.name, "' built against Lithe SDK 1.",
              current_sdk_minor_, ", whose Quantizer interface was a preview; rebuild the plugin ",
              "against lithe-sdk 1.2 or newer");
  slot.quantizer = std::move(factory);
  add(std::move(slot));
}

const PluginRegistry::Slot& PluginRegistry::lookup(AlgorithmKind kind,
                                                   const std::string& name) const {
  const auto it = slots_.find(std::make_pair(kind, name));
  if (it == slots_.end()) {
    std::string known;
    for (const auto& [key, slot] : slots_) {
      if (key.first == kind) {
        known += (known.empty() ? "" : ", ") + key.second;
      }
    }
    LITHE_CHECK(false, sdk::Errc::kInvalidConfig, "unknown ", algorithm_kind_name(kind), " '",
                name, "'; known ", algorithm_kind_name(kind), "s: ",
                known.empty() ? std::string("none (were the plugins found? see `lithe plugins`)")
                              : known,
                search_summary_.empty() ? std::string()
                                        : "; plugin folders searched: " + search_summary_);
  }
  return it->second;
}

std::unique_ptr<sdk::WeightMasker> PluginRegistry::make_masker(const std::string& name,
                                                               const sdk::Options& options) const {
  const Slot& slot = lookup(AlgorithmKind::kMasker, name);
  return invoke_factory(slot.entry, [&] {
    check_declared(slot.entry, options);
    return slot.masker(options, *this);
  });
}

std::unique_ptr<sdk::Pruner> PluginRegistry::make_pruner(const std::string& name,
                                                         const sdk::Options& options) const {
  const Slot& slot = lookup(AlgorithmKind::kPruner, name);
  return invoke_factory(slot.entry, [&] {
    check_declared(slot.entry, options);
    return slot.pruner(options, *this);
  });
}

std::unique_ptr<sdk::Quantizer> PluginRegistry::make_quantizer(const std::string& name,
                                                               const sdk::Options& options) const {
  const Slot& slot = lookup(AlgorithmKind::kQuantizer, name);
  return invoke_factory(slot.entry, [&] {
    check_declared(slot.entry, options);
    return slot.quantizer(options, *this);
  });
}

void PluginRegistry::add_nni_counterpart(sdk::NniCounterpart counterpart) {
  const std::string owner = owner_text(current_plugin_, current_path_);
  LITHE_CHECK(!counterpart.algorithm.empty() && !counterpart.nni_class.empty() &&
                  !counterpart.replay.empty(),
              sdk::Errc::kPluginLoad, owner,
              " declared an NNI counterpart with an empty field (algorithm '",
              counterpart.algorithm, "', nni_class '", counterpart.nni_class, "', replay '",
              counterpart.replay, "')");
  // The algorithm must be one this plugin registered: a counterpart may not point at another
  // plugin's algorithm, whose behaviour it does not control.
  const AlgorithmEntry* entry = nullptr;
  for (const AlgorithmKind kind : {AlgorithmKind::kPruner, AlgorithmKind::kQuantizer}) {
    const AlgorithmEntry* found = find(kind, counterpart.algorithm);
    if (found != nullptr && found->plugin == current_plugin_) {
      entry = found;
      break;
    }
  }
  LITHE_CHECK(entry != nullptr, sdk::Errc::kPluginLoad, owner, " declared NNI class '",
              counterpart.nni_class, "' for '", counterpart.algorithm,
              "', which is not a pruner or quantizer it registered (register it first)");
  const auto existing = counterparts_.find(counterpart.nni_class);
  LITHE_CHECK(existing == counterparts_.end(), sdk::Errc::kPluginLoad, "NNI class '",
              counterpart.nni_class, "' declared twice: for '",
              existing == counterparts_.end() ? std::string()
                                              : existing->second.counterpart.algorithm,
              "' by ",
              existing == counterparts_.end()
                  ? std::string()
                  : owner_text(existing->second.plugin, existing->second.plugin_path),
              " and for '", counterpart.algorithm, "' by ", owner);
  const std::string key = counterpart.nni_class;
  counterparts_.emplace(key, NniCounterpartEntry{std::move(counterpart), entry->kind,
                                                 current_plugin_, current_path_});
}

void PluginRegistry::describe_options(const std::string& algorithm,
                                      const sdk::OptionSchema& schema) {
  const std::string owner = owner_text(current_plugin_, current_path_);
  bool found = false;
  for (auto& [key, slot] : slots_) {
    if (key.second != algorithm || slot.entry.plugin != current_plugin_) {
      continue;
    }
    LITHE_CHECK(!slot.entry.options.has_value(), sdk::Errc::kPluginLoad, owner,
                " declared the option keys of '", algorithm, "' twice");
    slot.entry.options = schema;
    found = true;
  }
  LITHE_CHECK(found, sdk::Errc::kPluginLoad, owner, " declared option keys for '", algorithm,
              "', which is not an algorithm it registered (register it first)");
}

const sdk::OptionSchema* PluginRegistry::declared_options(AlgorithmKind kind,
                                                          const std::string& name) const {
  const AlgorithmEntry* entry = find(kind, name);
  return entry == nullptr || !entry->options.has_value() ? nullptr : &*entry->options;
}

const NniCounterpartEntry* PluginRegistry::find_nni_counterpart(
    const std::string& nni_class) const {
  const auto it = counterparts_.find(nni_class);
  return it == counterparts_.end() ? nullptr : &it->second;
}

std::vector<NniCounterpartEntry> PluginRegistry::nni_counterparts() const {
  std::vector<NniCounterpartEntry> out;
  for (const auto& [nni_class, entry] : counterparts_) {
    out.push_back(entry);
  }
  return out;
}

std::vector<AlgorithmEntry> PluginRegistry::algorithms() const {
  std::vector<AlgorithmEntry> out;
  for (const auto& [key, slot] : slots_) {
    out.push_back(slot.entry);
  }
  return out;
}

const AlgorithmEntry* PluginRegistry::find(AlgorithmKind kind, const std::string& name) const {
  const auto it = slots_.find(std::make_pair(kind, name));
  return it == slots_.end() ? nullptr : &it->second.entry;
}

}  // namespace lithe::host
