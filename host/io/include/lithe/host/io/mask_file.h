#pragma once
/// \file
/// Mask files in NNI's mask.pth layout {layer: {"weight": T, "bias": T or None}}, written and
/// read as torch pickles (Python's torch.load reads them; they load back here without Python).

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "lithe/sdk/layer.h"

namespace lithe::host {

using NamedMasks = std::vector<std::pair<std::string, sdk::Masks>>;

/// Serialises masks in NNI's mask.pth layout (loads with Python's torch.load).
std::string serialize_masks(const NamedMasks& masks);
/// Parses NNI's mask.pth layout; sdk::Error(kInvalidModel) naming `source` and the entry for
/// any other structure.
NamedMasks deserialize_masks(const std::string& bytes, const std::string& source);
/// Streams masks in NNI's mask.pth layout straight to `file` (no temporary; see StagedFile).
void write_masks(const NamedMasks& masks, const std::filesystem::path& file);
/// write_masks, atomically.
void save_masks(const NamedMasks& masks, const std::filesystem::path& path);
/// read_file + deserialize_masks.
NamedMasks load_masks(const std::filesystem::path& path);

}  // namespace lithe::host
