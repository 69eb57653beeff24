#pragma once
/// \file
/// Writing results (atomically: temp file in the target directory, then rename) and reading
/// them back: NNI's mask.pth layout {layer: {"weight": T, "bias": T or None}} via torch pickles.

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "lithe/host/model.h"
#include "lithe/sdk/layer.h"

namespace lithe::host {

/// Writes `bytes` to `path` atomically; on failure `path` is untouched and sdk::Error(kIo)
/// names the file and the system error.
void write_file_atomic(const std::filesystem::path& path, const std::string& bytes);
/// Writes `bytes` to `path` directly (no temporary; for a StagedFile's temp_path());
/// sdk::Error(kIo) naming the file on failure.
void write_file(const std::filesystem::path& path, const std::string& bytes);
/// Reads a whole file (sdk::Error(kIo) naming it when missing or unreadable).
std::string read_file(const std::filesystem::path& path);

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

/// NNI's apply_compression_results: multiplies each named module's weight (and bias, when the
/// mask has one) by its mask. Every entry is validated (module exists, has a weight, shapes
/// match) before any weight changes, so a bad file leaves the model untouched.
void apply_compression_results(Model& model, const NamedMasks& masks, const std::string& source);
void apply_compression_results(Model& model, const std::filesystem::path& masks_file);

}  // namespace lithe::host
