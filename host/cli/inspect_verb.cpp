// `lithe inspect`: the module names and op types that config_list entries refer to.
#include <cstdio>
#include <iostream>

#include "lithe/host/model/model.h"
#include "lithe/host/io/threads.h"
#include "verbs.h"

namespace lithe::cli {

int run_inspect(const std::vector<std::string>& args) {
  std::string model_path;
  int threads = 0;
  po::options_description desc("options");
  desc.add_options()("model", po::value(&model_path)->required(), "TorchScript model file")(
      "threads", po::value(&threads)->default_value(0), "intra-op threads (0 = all cores)");
  po::positional_options_description positional;
  positional.add("model", 1);
  if (!parse_verb_args("inspect", "--model M.pt", args, desc, &positional)) {
    return 0;
  }
  host::configure_threads(threads);
  const auto model = host::load_torchscript_model(model_path);
  std::printf("%-32s %-18s %-22s %12s\n", "module", "type", "weight shape", "params");
  int64_t total = 0;
  for (const host::ModuleRecord& m : model->modules()) {
    std::string shape = "-";
    int64_t params = 0;
    if (m.weight.has_value()) {
      shape.clear();
      for (int64_t d : m.weight->sizes()) {
        shape += (shape.empty() ? "" : "x") + std::to_string(d);
      }
      params += m.weight->numel();
    }
    if (m.bias.has_value()) {
      params += m.bias->numel();
    }
    total += params;
    std::printf("%-32s %-18s %-22s %12lld\n", m.name.c_str(), m.op_type.c_str(), shape.c_str(),
                static_cast<long long>(params));
  }
  std::printf("%d modules, %lld weight+bias parameters\n", static_cast<int>(model->modules().size()),
              static_cast<long long>(total));
  return 0;
}

}  // namespace lithe::cli
