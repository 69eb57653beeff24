#pragma once
/// \file
/// PluginRegistry: the host's implementation of sdk::Registry. Records which plugin registered
/// each algorithm, rejects duplicate names (naming both owners), and wraps every factory call so
/// that any failure surfaces as one sdk::Error with the algorithm and plugin named.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lithe/sdk/registry.h"
#include "lithe/sdk/version.h"

namespace lithe::host {

enum class AlgorithmKind { kMasker, kPruner, kQuantizer };

/// "masker", "pruner" or "quantizer".
const char* algorithm_kind_name(AlgorithmKind kind);

/// One registered algorithm.
struct AlgorithmEntry {
  AlgorithmKind kind;
  sdk::AlgorithmInfo info;
  std::string plugin;       ///< plugin name ("" for algorithms registered by the host itself)
  std::string plugin_path;  ///< file the plugin came from ("" when linked in)
  /// The keys it declared (SDK 1.4 describe_options); nullopt when its plugin declared none.
  std::optional<sdk::OptionSchema> options;
};

/// One declared NNI counterpart (SDK 1.4), with the kind of the algorithm it names.
struct NniCounterpartEntry {
  sdk::NniCounterpart counterpart;
  AlgorithmKind kind;       ///< kPruner or kQuantizer
  std::string plugin;       ///< plugin that declared it ("" when the host did)
  std::string plugin_path;  ///< file the plugin came from ("" when linked in)
};

class PluginRegistry final : public sdk::Registry {
 public:
  static constexpr int kHostSdkMinor = LITHE_SDK_MINOR_VERSION;
  PluginRegistry();
  ~PluginRegistry() override;

  /// Algorithms registered from now on are attributed to this plugin (host use, loader).
  /// `sdk_minor` is the SDK minor version the plugin was built against: quantizers need 1.2,
  /// the first SDK whose Quantizer interface a host drives (1.0/1.1 declared a preview).
  /// `may_override`: the plugin may take over algorithm names (and NNI classes) registered
  /// before it instead of failing on them (PluginLoader::allow_override).
  void set_current_plugin(std::string name, std::string path, int sdk_minor = kHostSdkMinor,
                          bool may_override = false);
  /// What the loader searched ("<folder> (2 loaded)", ...), added to the message for an
  /// unknown algorithm name so a user sees where plugins were looked for.
  void set_search_summary(std::string summary) { search_summary_ = std::move(summary); }
  /// Algorithms taken over by the current plugin's registration so far ("pruner 'level' of
  /// plugin 'level' (<file>)"), for the loader's report.
  const std::vector<std::string>& taken_over() const { return taken_over_; }
  /// Withdraws every algorithm and NNI counterpart attributed to `plugin` (used when its
  /// registration throws).
  void remove_plugin(const std::string& plugin);

  void add_masker(sdk::AlgorithmInfo info, sdk::MaskerFactory factory) override;
  void add_pruner(sdk::AlgorithmInfo info, sdk::PrunerFactory factory) override;
  void add_quantizer(sdk::AlgorithmInfo info, sdk::QuantizerFactory factory) override;
  std::unique_ptr<sdk::WeightMasker> make_masker(const std::string& name,
                                                 const sdk::Options& options) const override;
  std::unique_ptr<sdk::Pruner> make_pruner(const std::string& name,
                                           const sdk::Options& options) const override;
  std::unique_ptr<sdk::Quantizer> make_quantizer(const std::string& name,
                                                 const sdk::Options& options) const override;
  void add_nni_counterpart(sdk::NniCounterpart counterpart) override;
  void describe_options(const std::string& algorithm, const sdk::OptionSchema& schema) override;

  /// Every algorithm, sorted by kind then name.
  std::vector<AlgorithmEntry> algorithms() const;
  /// The keys (kind, name) declared, or nullptr when it declared none or is unknown.
  const sdk::OptionSchema* declared_options(AlgorithmKind kind, const std::string& name) const;
  /// The entry for (kind, name), or nullptr.
  const AlgorithmEntry* find(AlgorithmKind kind, const std::string& name) const;
  /// The counterpart declared for an NNI class ("AGPPruner"), or nullptr.
  const NniCounterpartEntry* find_nni_counterpart(const std::string& nni_class) const;
  /// Every declared counterpart, sorted by NNI class.
  std::vector<NniCounterpartEntry> nni_counterparts() const;

 private:
  struct Slot {
    AlgorithmEntry entry;
    sdk::MaskerFactory masker;
    sdk::PrunerFactory pruner;
    sdk::QuantizerFactory quantizer;
  };
  void add(Slot slot);
  const Slot& lookup(AlgorithmKind kind, const std::string& name) const;

  std::map<std::pair<AlgorithmKind, std::string>, Slot> slots_;
  std::map<std::string, NniCounterpartEntry> counterparts_;  // by NNI class
  std::string current_plugin_;
  std::string current_path_;
  int current_sdk_minor_ = kHostSdkMinor;
  bool may_override_ = false;
  std::vector<std::string> taken_over_;
  std::string search_summary_;
};

}  // namespace lithe::host
