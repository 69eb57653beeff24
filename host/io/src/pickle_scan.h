#pragma once
// The pickles of a torch archive, scanned as hostile input by a bounded pickle machine that
// tracks only what storage declarations need: which storages (type, key, element count) each
// pickle declares, so that the archive check can compare them with the records present.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "archive_reading.h"

namespace lithe::host::archive {

/// A storage a pickle declares through persistent id ('storage', type, key, location, numel).
struct StorageClaim {
  std::string_view type_module;  ///< "torch" or, for Python's UntypedStorage, "torch.storage"
  std::string_view type_name;    ///< e.g. "FloatStorage"
  std::string_view key;
  int64_t numel = 0;
};

/// Element size of a torch storage class ("FloatStorage" → 4); 0 when unknown.
size_t storage_element_size(std::string_view type_module, std::string_view type_name);

/// Runs the pickle `pickle` (record `name`), calling `on_storage` for every storage it declares;
/// fails through `report` on a malformed or oversized pickle.
void scan_pickle(std::string_view pickle, std::string_view name, const Reporter& report,
                 const std::function<void(const StorageClaim&)>& on_storage);

/// The folder holding the storages of pickle `name`, or nothing when the pickle is not one
/// libtorch reads (see pickle_scan.cpp).
std::optional<std::string> storage_folder_of(std::string_view name);

}  // namespace lithe::host::archive
