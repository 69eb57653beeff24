// `lithe train` and `lithe eval`.
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "lithe/host/train/dataset.h"
#include "lithe/host/model/model.h"
#include "lithe/host/io/device.h"
#include "lithe/host/io/output_paths.h"
#include "lithe/host/io/staged_file.h"
#include "lithe/host/io/threads.h"
#include "lithe/host/train/trainer.h"
#include "lithe/sdk/error.h"
#include "training_options.h"
#include "rank_run.h"
#include "verbs.h"

namespace lithe::cli {
int run_train(const std::vector<std::string>& args) {
  std::string model_path;
  std::string data = host::kDefaultDataDir;
  std::string output_path;
  int threads = 0;
  std::string device_text = "cpu";
  bool json = false;
  host::TrainOptions o;
  po::options_description desc("options");
  desc.add_options()
      ("model", po::value(&model_path)->required(), "TorchScript model to train")
      ("output", po::value(&output_path)->required(),
       "trained TorchScript model to write (its tensors on the CPU, whatever --device)")
      ("epochs", po::value(&o.epochs)->default_value(o.epochs), "epochs (> 0)")
      ("device", po::value(&device_text)->default_value(device_text),
       "where to train: cpu, cuda or cuda:N (the data stays on the CPU, each batch moves)")
      ("threads", po::value(&threads)->default_value(0), "intra-op threads (0 = all cores)")
      ("json", po::bool_switch(&json), "print a JSON summary");
  std::string test_path;
  std::string teacher_path;
  add_training_options(desc, o, data, test_path, teacher_path);
  po::variables_map given;
  if (!parse_verb_args("train",
                       "--model M.pt [--data DIR] --epochs N --output OUT.pt [--teacher T.pt]",
                       args, desc, nullptr, &given)) {
    return 0;
  }
  host::validate_train_options(o);
  const c10::Device device = host::parse_device(device_text);
  host::check_output_paths({{"--model", model_path},
                            {"--data", data},
                            {"--test-data", test_path},
                            {"--teacher", teacher_path}},
                           {{"--output", output_path}});
  host::StagedFile output(output_path, "--output");  // checks the directory before any work
  host::configure_threads(threads);
  const RankRun ranks;  // data parallel when started once per rank (torchrun, lithe launch)
  ranks.require_cpu_for_ranks(device);
  o.process_group = ranks.group();
  o.progress = ranks.writer();
  const auto model = host::load_torchscript_model(model_path);
  const std::unique_ptr<host::Model> teacher = load_teacher(teacher_path, given, o);
  model->to(device);
  if (teacher != nullptr) {
    teacher->to(device);
  }
  const host::Dataset train_data = host::load_dataset(data, "train");
  const host::Dataset test_data = host::load_test_dataset(data, test_path);
  const bool has_test = test_data.size() > 0;
  const auto results = host::train(*model, train_data, has_test ? &test_data : nullptr, o);
  model->to(c10::Device(c10::kCPU));  // a file any machine loads
  if (ranks.writer()) {
    output.write(model->serialize());
    ranks.commit({&output});
  }
  if (json) {
    nlohmann::ordered_json out;
    out["model"] = model_path;
    out["output"] = output_path;
    out["device"] = device.str();
    out["epochs"] = nlohmann::ordered_json::array();
    for (const host::EpochResult& r : results) {
      out["epochs"].push_back({{"epoch", r.epoch},
                               {"train_loss", r.train_loss},
                               {"seconds", r.seconds},
                               {"test", eval_json(r.test)}});
    }
    std::cout << out.dump(2) << "\n";
  } else {
    std::printf("wrote %s\n", output_path.c_str());
  }
  return 0;
}

int run_eval(const std::vector<std::string>& args) {
  std::string model_path;
  std::string data = host::kDefaultDataDir;
  std::string split = "test";
  int threads = 0;
  std::string device_text = "cpu";
  bool json = false;
  po::options_description desc("options");
  desc.add_options()
      ("model", po::value(&model_path)->required(), "TorchScript model")
      ("data", po::value(&data)->default_value(data), "MNIST-layout directory or tensor file")
      ("split", po::value(&split)->default_value(split), "train or test (directories only)")
      ("device", po::value(&device_text)->default_value(device_text),
       "where to evaluate: cpu, cuda or cuda:N")
      ("threads", po::value(&threads)->default_value(0), "intra-op threads (0 = all cores)")
      ("json", po::bool_switch(&json), "print JSON");
  if (!parse_verb_args("eval", "--model M.pt [--data DIR] [--split test]", args, desc)) {
    return 0;
  }
  const c10::Device device = host::parse_device(device_text);
  host::configure_threads(threads);
  const auto model = host::load_torchscript_model(model_path);
  model->to(device);
  const host::Dataset dataset = host::load_dataset(data, split);
  host::check_dataset_fits_model(*model, dataset);
  const host::EvalResult r = host::evaluate(*model, dataset);
  if (json) {
    std::cout << eval_json(r).dump(2) << "\n";
  } else {
    std::printf("accuracy %.4f  loss %.4f  (%lld samples of %s)\n", r.accuracy, r.loss,
                static_cast<long long>(r.samples), dataset.source.c_str());
  }
  return 0;
}

}  // namespace lithe::cli
