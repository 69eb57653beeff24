#include "rank_run.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

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

}  // namespace lithe::cli
