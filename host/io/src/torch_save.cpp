#include "lithe/host/io/torch_save.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

namespace lithe::host {

void write_torch_save_archive(const c10::IValue& value,
                              const std::function<size_t(const void*, size_t)>& sink) {
  std::string pickled;
  // No type tags: libtorch 2.x tags typed dicts and lists with restore_type_tag by default, and
  // torch.load(weights_only=True) refuses that global.
  torch::jit::Pickler pickler([&](const char* bytes, size_t size) { pickled.append(bytes, size); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr,
                              /*memoized_class_types=*/nullptr, /*get_tensor_id=*/nullptr,
                              /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  caffe2::serialize::PyTorchStreamWriter writer(sink);
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(),
                                     pickler.tensorData(), writer);
  writer.writeEndOfFile();
}

std::string torch_save_bytes(const c10::IValue& value) {
  std::string out;
  write_torch_save_archive(value, [&](const void* bytes, size_t size) {
    out.append(static_cast<const char*>(bytes), size);
    return size;
  });
  return out;
}

}  // namespace lithe::host
