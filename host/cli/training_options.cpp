#include "training_options.h"

#include <filesystem>

#include "lithe/sdk/error.h"

namespace lithe::cli {

namespace po = boost::program_options;

void add_training_options(po::options_description& desc, host::TrainOptions& o,
                          std::string& data, std::string& test_data, std::string& teacher) {
  desc.add_options()
      ("data", po::value(&data)->default_value(data),
       "MNIST-layout directory (train/t10k IDX files, gzip or plain) or a tensor file "
       "{images, labels}")
      ("test-data", po::value(&test_data),
       "held-out tensor file or MNIST-layout directory for accuracy (default: the test split "
       "of a --data directory)")
      ("batch-size", po::value(&o.batch_size)->default_value(o.batch_size), "batch size")
      ("optimizer", po::value(&o.optimizer)->default_value(o.optimizer), "sgd or adam")
      ("lr", po::value(&o.lr)->default_value(o.lr), "learning rate")
      ("momentum", po::value(&o.momentum)->default_value(o.momentum), "SGD momentum")
      ("weight-decay", po::value(&o.weight_decay)->default_value(o.weight_decay), "weight decay")
      ("lr-step", po::value(&o.lr_step)->default_value(0), "decay the lr every N epochs (0 = never)")
      ("lr-gamma", po::value(&o.lr_gamma)->default_value(o.lr_gamma), "lr decay factor")
      ("seed", po::value(&o.seed)->default_value(0), "shuffling seed")
      ("teacher", po::value(&teacher),
       "knowledge distillation: a TorchScript model with the same outputs whose softened "
       "logits the model learns as well as the labels (run in evaluation mode, no gradient)")
      ("kd-temperature", po::value(&o.kd_temperature)->default_value(o.kd_temperature),
       "with --teacher: softmax temperature T (> 0) of both models' logits")
      ("kd-alpha", po::value(&o.kd_alpha)->default_value(o.kd_alpha),
       "with --teacher: weight in [0, 1] of the distillation term (T^2 KL), 1 - alpha that of "
       "the labels' cross-entropy");
}

std::unique_ptr<host::Model> load_teacher(const std::string& teacher,
                                          const po::variables_map& given,
                                          host::TrainOptions& options) {
  if (teacher.empty()) {
    for (const char* flag : {"kd-temperature", "kd-alpha"}) {
      LITHE_CHECK(given.count(flag) == 0 || given[flag].defaulted(), sdk::Errc::kInvalidConfig,
                  "--", flag, " has no effect without --teacher");
    }
    return nullptr;
  }
  std::unique_ptr<host::Model> model = host::load_torchscript_model(teacher);
  options.teacher = model.get();
  return model;
}

const std::vector<std::string>& training_option_names() {
  // Read back from the description itself, so the list cannot drift from the flags.
  static const std::vector<std::string> names = [] {
    host::TrainOptions options;
    std::string data;
    std::string test_data;
    std::string teacher;
    po::options_description desc;
    add_training_options(desc, options, data, test_data, teacher);
    std::vector<std::string> out;
    for (const auto& option : desc.options()) {
      out.push_back(option->long_name());
    }
    return out;
  }();
  return names;
}

nlohmann::ordered_json eval_json(const host::EvalResult& r) {
  return {{"accuracy", r.accuracy}, {"loss", r.loss}, {"samples", r.samples}};
}

}  // namespace lithe::cli
