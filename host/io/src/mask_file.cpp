// Mask files (NNI's mask.pth layout). Writes go through StagedFile, so readers never see a
// half-written file and a failed run leaves old files intact; reads validate the archive first.
#include "lithe/host/io/mask_file.h"

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/script.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "lithe/host/io/archive_check.h"
#include "lithe/host/io/staged_file.h"
#include "lithe/host/io/torch_save.h"
#include "lithe/host/io/file_io.h"
#include "lithe/sdk/error.h"
#include "posix_write.h"

namespace lithe::host {

namespace fs = std::filesystem;

namespace {

c10::IValue masks_to_ivalue(const NamedMasks& masks) {
  c10::impl::GenericDict layers(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [name, m] : masks) {
    c10::impl::GenericDict entry(c10::StringType::get(), c10::AnyType::get());
    entry.insert("weight", m.weight.detach().cpu().contiguous());
    if (m.bias.has_value()) {
      entry.insert("bias", m.bias->detach().cpu().contiguous());
    } else {
      entry.insert("bias", c10::IValue());
    }
    layers.insert(name, entry);
  }
  return c10::IValue(layers);
}

// A mask holds 0 and 1 only (bool, integer or floating, finite): anything else would rescale
// the weights or write NaN into them.
void check_mask_values(const at::Tensor& mask, const std::string& source, const std::string& layer,
                       const char* field) {
  LITHE_CHECK(mask.layout() == at::kStrided, sdk::Errc::kInvalidModel, "mask file '", source,
              "', layer '", layer, "': the '", field, "' mask must be a dense tensor, got layout ",
              mask.layout());
  const at::ScalarType type = mask.scalar_type();
  LITHE_CHECK(type == at::kBool || at::isIntegralType(type, /*includeBool=*/false) ||
                  at::isFloatingType(type),
              sdk::Errc::kInvalidModel, "mask file '", source, "', layer '", layer, "': the '",
              field, "' mask must be bool, integer or floating, got ", type);
  if (mask.numel() == 0 || type == at::kBool) {
    return;
  }
  const at::Tensor values = mask.to(at::kDouble).flatten();
  const at::Tensor other = values.ne(0).logical_and(values.ne(1));  // NaN is neither
  const int64_t bad = other.sum().item<int64_t>();
  if (bad > 0) {
    const double example = values[other.nonzero()[0][0].item<int64_t>()].item<double>();
    throw sdk::Error(sdk::Errc::kInvalidModel,
                     "mask file '" + source + "', layer '" + layer + "': the '" + field +
                         "' mask must hold only 0 and 1, but " + std::to_string(bad) + " of " +
                         std::to_string(mask.numel()) + " entries are other values (e.g. " +
                         c10::str(example) + ")");
  }
}

}  // namespace

std::string serialize_masks(const NamedMasks& masks) {
  return torch_save_bytes(masks_to_ivalue(masks));
}

void write_masks(const NamedMasks& masks, const fs::path& file) {
  // Serialised in memory first: torch's stream writer throws from its destructor when a write
  // fails (std::terminate); a full disk must be an ordinary error.
  write_file(file, serialize_masks(masks));
}

NamedMasks deserialize_masks(const std::string& bytes, const std::string& source) {
  check_torch_archive(bytes, "mask file", source);
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const std::exception& e) {
    const std::string message = e.what();
    throw sdk::Error(sdk::Errc::kInvalidModel,
                     "mask file '" + source +
                         "' must hold a dict {layer: {'weight': Tensor, 'bias': Tensor or None}} "
                         "saved with torch.save; libtorch cannot read this one (" +
                         sdk::printable(message.substr(0, message.find('\n')), 120) + ")");
  }
  check_tensor_extents(value, "mask file", source);
  LITHE_CHECK(value.isGenericDict(), sdk::Errc::kInvalidModel, "mask file '", source,
              "' must hold a dict {layer: {'weight': Tensor, 'bias': Tensor or None}}, got ",
              value.tagKind());
  NamedMasks out;
  for (const auto& item : value.toGenericDict()) {
    LITHE_CHECK(item.key().isString(), sdk::Errc::kInvalidModel, "mask file '", source,
                "': keys must be layer names (strings), got ", item.key().tagKind());
    const std::string name = item.key().toStringRef();
    LITHE_CHECK(item.value().isGenericDict(), sdk::Errc::kInvalidModel, "mask file '", source,
                "', layer '", name, "': must map to {'weight': ..., 'bias': ...}, got ",
                item.value().tagKind());
    sdk::Masks masks;
    for (const auto& field : item.value().toGenericDict()) {
      const std::string key = field.key().isString() ? field.key().toStringRef() : "?";
      if (key == "weight") {
        LITHE_CHECK(field.value().isTensor(), sdk::Errc::kInvalidModel, "mask file '", source,
                    "', layer '", name, "': 'weight' must be a tensor, got ",
                    field.value().tagKind());
        masks.weight = field.value().toTensor();
      } else if (key == "bias") {
        if (field.value().isTensor()) {
          masks.bias = field.value().toTensor();
        } else {
          LITHE_CHECK(field.value().isNone(), sdk::Errc::kInvalidModel, "mask file '", source,
                      "', layer '", name, "': 'bias' must be a tensor or None, got ",
                      field.value().tagKind());
        }
      } else {
        LITHE_CHECK(false, sdk::Errc::kInvalidModel, "mask file '", source, "', layer '", name,
                    "': unexpected key '", key, "' (expected 'weight' and 'bias')");
      }
    }
    LITHE_CHECK(masks.weight.defined(), sdk::Errc::kInvalidModel, "mask file '", source,
                "', layer '", name, "': missing 'weight' mask");
    check_mask_values(masks.weight, source, name, "weight");
    if (masks.bias.has_value()) {
      check_mask_values(*masks.bias, source, name, "bias");
    }
    out.emplace_back(name, std::move(masks));
  }
  LITHE_CHECK(!out.empty(), sdk::Errc::kInvalidModel, "mask file '", source,
              "' holds no layers (an empty dict); a mask file names at least one layer");
  return out;
}

void save_masks(const NamedMasks& masks, const fs::path& path) {
  StagedFile staged(path, "mask file");
  staged.write(serialize_masks(masks));
  staged.commit();
}

NamedMasks load_masks(const fs::path& path) {
  return deserialize_masks(read_file(path), path.string());
}

}  // namespace lithe::host
