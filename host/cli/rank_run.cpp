#include "rank_run.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "lithe/sdk/error.h"

namespace lithe::cli {

RankRun::RankRun() {
  if (const auto options = host::process_group_options_from_environment()) {
    group_ = std::make_unique<host::ProcessGroup>(*options);
    if (group_->rank() != 0) {
      std::fflush(stdout);
      const int null = ::open("/dev/null", O_WRONLY);
      if (null >= 0) {
        ::dup2(null, STDOUT_FILENO);
        ::close(null);
      }
    }
  }
}

void RankRun::commit(std::initializer_list<host::StagedFile*> files) const {
  if (!writer()) {
    return;
  }
  for (host::StagedFile* file : files) {
    if (file != nullptr) {
      file->commit();
    }
  }
}

void RankRun::require_cpu_for_ranks(const c10::Device& device) const {
  LITHE_CHECK(group_ == nullptr || group_->world_size() <= 1 || device.is_cpu(),
              sdk::Errc::kUnsupported, "--device ", device.str(), ": a data-parallel run (",
              group_ == nullptr ? 1 : group_->world_size(),
              " ranks) computes on the CPU (its exchanges go over Gloo); use --device cpu or "
              "one process");
}

}  // namespace lithe::cli
