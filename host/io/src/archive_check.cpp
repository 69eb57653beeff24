// Validation of torch archives before libtorch reads them. libtorch (miniz with CRC checks off,
// an Unpickler that sizes a storage from the pickle's numel and hands it the record's buffer
// whatever its length) turns a damaged file into tensors that read and write out of bounds.
// The checks treat the file as hostile, one concept per file: the zip layer
// (zip_directory.h), the pickles' storage declarations (pickle_scan.h), the loaded tensors'
// extents (tensor_walker.h); this file puts them together.
#include "lithe/host/io/archive_check.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "lithe/sdk/error.h"
#include "pickle_scan.h"
#include "tensor_walker.h"
#include "zip_directory.h"

namespace lithe::host {
namespace {

using namespace archive;  // NOLINT: this file is the archive checks' front

std::string joined(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

}  // namespace

void check_torch_archive(const std::string& bytes, const std::string& what,
                         const std::string& source) {
  const Reporter report(what, source);
  const std::string_view file(bytes);
  const CentralDirectory directory = read_end_records(file, report);
  const std::vector<ZipEntry> entries = read_central_directory(file, directory, report);

  // Content: exact sizes and CRC-32 of every record (miniz in libtorch skips both).
  std::unordered_map<std::string, uint64_t> record_sizes;  // case-folded names
  record_sizes.reserve(entries.size());
  struct Pickle {
    std::string_view name;
    std::string folder;       ///< where its storages' records live
    std::string_view stored;  ///< the bytes of a stored pickle
    std::string inflated;     ///< the bytes of a deflated one
  };
  std::vector<Pickle> pickles;
  for (const ZipEntry& entry : entries) {
    record_sizes.emplace(folded(entry.name), entry.uncompressed_size);
    const std::string_view data = file.substr(entry.data_offset, entry.compressed_size);
    std::optional<std::string> folder = storage_folder_of(folded(entry.name));
    std::string inflated;
    uint32_t crc = 0;
    if (entry.method == kMethodStored) {
      crc = crc32_of(0, data);
    } else {
      if (folder.has_value() && entry.uncompressed_size > kMaxInflatedPickleBytes) {
        report.fail("pickle " + quote_name(entry.name) + " is deflated to " +
                    std::to_string(entry.uncompressed_size) + " bytes, more than the " +
                    std::to_string(kMaxInflatedPickleBytes) + " this check inflates");
      }
      inflate_record(
          entry, data,
          [&](std::string_view chunk) {
            crc = crc32_of(crc, chunk);
            if (folder.has_value()) {
              inflated.append(chunk);
            }
          },
          report);
    }
    if (crc != entry.crc32) {
      report.fail("record " + quote_name(entry.name) + " fails its CRC-32 check (stored " +
                  hex32(entry.crc32) + ", computed " + hex32(crc) + "); the archive is corrupted");
    }
    if (folder.has_value()) {
      const bool stored = entry.method == kMethodStored;
      pickles.push_back(Pickle{entry.name, std::move(*folder), stored ? data : std::string_view(),
                               std::move(inflated)});
    }
  }

  // Storages: each one a pickle declares needs a record of at least numel x element size bytes,
  // or libtorch builds a storage that claims more memory than it was given.
  for (const Pickle& pickle : pickles) {
    const auto on_storage = [&](const StorageClaim& claim) {
      const std::string type = std::string(claim.type_module) + "." + std::string(claim.type_name);
      const size_t element_size = storage_element_size(claim.type_module, claim.type_name);
      if (element_size == 0) {
        report.fail("pickle " + quote_name(pickle.name) + " declares storage " +
                    quote_name(claim.key) + " of unknown type " + quote_name(type));
      }
      if (claim.numel < 0) {
        report.fail("pickle " + quote_name(pickle.name) + " declares storage " +
                    quote_name(claim.key) + " with a negative element count (" +
                    std::to_string(claim.numel) + ")");
      }
      std::string_view element_name = claim.type_name;
      element_name.remove_suffix(std::string_view("Storage").size());
      const std::string elements =
          std::to_string(claim.numel) + " " + std::string(element_name) + " elements";
      uint64_t needed = 0;
      if (__builtin_mul_overflow(static_cast<uint64_t>(claim.numel), uint64_t{element_size},
                                 &needed)) {
        report.fail("pickle " + quote_name(pickle.name) + " declares storage " +
                    quote_name(claim.key) + " of " + elements + ", more bytes than 64 bits count");
      }
      if (claim.numel == 0) {
        return;  // libtorch reads no record for an empty storage
      }
      const std::string record = pickle.folder + std::string(claim.key);
      const auto found = record_sizes.find(folded(record));
      if (found == record_sizes.end()) {
        report.fail("pickle " + quote_name(pickle.name) + " declares storage " +
                    quote_name(claim.key) + " (" + elements + ") but the archive has no record " +
                    quote_name(record) + "; the archive is truncated or corrupted");
      }
      if (found->second < needed) {
        report.fail("record " + quote_name(record) + " holds " + std::to_string(found->second) +
                    " bytes but its storage needs " + std::to_string(needed) + " (" + elements +
                    "); the archive is truncated or corrupted");
      }
    };
    const std::string_view content = pickle.inflated.empty() ? pickle.stored : pickle.inflated;
    scan_pickle(content, pickle.name, report, on_storage);
  }
}

void check_tensor_extents(const c10::IValue& value, const std::string& what,
                          const std::string& source) {
  const Reporter report(what, source);
  TensorWalker walker(report);
  walker.walk(value, "tensor", "value");
}

void check_module_tensors(const torch::jit::Module& module, const std::string& what,
                          const std::string& source) {
  const Reporter report(what, source);
  TensorWalker walker(report);
  for (const auto& parameter : module.named_parameters(/*recurse=*/true)) {
    walker.check_tensor(parameter.value, "parameter '" + parameter.name + "'");
  }
  for (const auto& buffer : module.named_buffers(/*recurse=*/true)) {
    walker.check_tensor(buffer.value, "buffer '" + buffer.name + "'");
  }
  const auto modules = module.named_modules();
  for (const auto& named : modules) {
    walker.mark_visited(named.value._ivalue());
  }

  // Other attributes (tensors, lists, dicts, objects) of every module; parameters, buffers and
  // submodules are covered above with their proper names.
  for (const auto& named : modules) {
    const c10::intrusive_ptr<c10::ivalue::Object> object = named.value._ivalue();
    const c10::ClassTypePtr type = object->type();
    const size_t attributes = std::min(type->numAttributes(), object->slots().size());
    for (size_t slot = 0; slot < attributes; ++slot) {
      walker.count_visit();
      const c10::IValue& value = object->getSlot(slot);
      if (type->is_parameter(slot) || type->is_buffer(slot) ||
          (value.isObject() && value.toObjectRef().type() != nullptr &&
           value.toObjectRef().type()->is_module())) {
        continue;
      }
      walker.walk(value, "attribute", joined(named.name, type->getAttributeName(slot)));
    }
  }

  // Tensor constants baked into the methods' graphs (traced models keep many).
  std::unordered_set<const torch::jit::Function*> seen_functions;
  for (const auto& named : modules) {
    for (torch::jit::Function* function : named.value.type()->methods()) {
      if (function == nullptr || !seen_functions.insert(function).second) {
        continue;
      }
      std::shared_ptr<torch::jit::Graph> graph;
      try {
        graph = torch::jit::toGraphFunction(*function).graph();
      } catch (const c10::Error&) {
        continue;  // not a graph function (e.g. a builtin): no constants of its own
      }
      const std::string method = function->qualname().qualifiedName();
      std::vector<const torch::jit::Block*> blocks{graph->block()};
      while (!blocks.empty()) {
        const torch::jit::Block* block = blocks.back();
        blocks.pop_back();
        for (const torch::jit::Node* node : block->nodes()) {
          walker.count_visit();
          for (const torch::jit::Block* nested : node->blocks()) {
            blocks.push_back(nested);
          }
          if (node->kind() != c10::prim::Constant || !node->hasAttribute(c10::attr::value)) {
            continue;
          }
          const std::string label = "constant in method '" + method + "'";
          if (node->kindOf(c10::attr::value) == torch::jit::AttributeKind::t) {
            walker.check_tensor(node->t(c10::attr::value), "tensor " + label);
          } else if (node->kindOf(c10::attr::value) == torch::jit::AttributeKind::ival) {
            walker.walk(node->ival(c10::attr::value), "constant", method);
          }
        }
      }
    }
  }
}

}  // namespace lithe::host
