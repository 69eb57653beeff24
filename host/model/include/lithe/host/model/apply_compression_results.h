#pragma once
/// \file
/// NNI's apply_compression_results: masks from a mask file multiplied into a model's weights.

#include <filesystem>
#include <string>

#include "lithe/host/io/mask_file.h"
#include "lithe/host/model/model.h"

namespace lithe::host {

/// NNI's apply_compression_results: multiplies each named module's weight (and bias, when the
/// mask has one) by its mask. Every entry is validated (module exists, has a weight, shapes
/// match) before any weight changes, so a bad file leaves the model untouched.
void apply_compression_results(Model& model, const NamedMasks& masks, const std::string& source);
void apply_compression_results(Model& model, const std::filesystem::path& masks_file);

}  // namespace lithe::host
