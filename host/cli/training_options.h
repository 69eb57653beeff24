#pragma once
// Training flags shared by `lithe train` and `lithe compress` (fine-tuning while compressing),
// so both verbs spell and check them identically.

#include <memory>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "lithe/host/model/model.h"
#include "lithe/host/train/dataset.h"
#include "lithe/host/train/trainer.h"

namespace lithe::cli {

/// Adds --data, --test-data, --batch-size, --optimizer, --lr, --momentum, --weight-decay, --lr-step,
/// --lr-gamma, --seed, --teacher, --kd-temperature and --kd-alpha to `desc`, bound to `options`,
/// `data`, `test_data` and `teacher` (--epochs is the verb's own: required for train, optional
/// for compress).
void add_training_options(boost::program_options::options_description& desc,
                          host::TrainOptions& options, std::string& data,
                          std::string& test_data, std::string& teacher);

/// Loads the --teacher model (when given) and points options.teacher at it: the caller keeps
/// the result alive while training. --kd-temperature / --kd-alpha without --teacher are errors.
std::unique_ptr<host::Model> load_teacher(const std::string& teacher,
                                          const boost::program_options::variables_map& given,
                                          host::TrainOptions& options);

/// The flags add_training_options adds, for checks such as "given without --epochs".
const std::vector<std::string>& training_option_names();

/// {"accuracy", "loss", "samples"} of an evaluation, for --json summaries.
nlohmann::ordered_json eval_json(const host::EvalResult& r);

}  // namespace lithe::cli
