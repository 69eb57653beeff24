#pragma once
// The data-parallel side of `lithe train` and `lithe compress`: started once per rank (by
// torchrun or `lithe launch`), the verb joins the group the environment describes, trains in
// data parallel, and only rank 0 prints its summary and writes the outputs.

#include <c10/core/Device.h>

#include <initializer_list>
#include <memory>

#include "lithe/host/dist/process_group.h"
#include "lithe/host/io/staged_file.h"

namespace lithe::cli {

class RankRun {
 public:
  /// Joins the group of RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (none when WORLD_SIZE is unset
  /// or 1). Ranks other than 0 send their standard output to /dev/null (errors still reach
  /// standard error, naming the rank).
  RankRun();
  /// The group for TrainOptions::process_group, or nullptr in a single process.
  host::ProcessGroup* group() const { return group_.get(); }
  /// Whether this process writes the outputs (rank 0, or a single process).
  bool writer() const { return group_ == nullptr || group_->rank() == 0; }
  /// Commits `files` on the writer; other ranks discard what they staged (their temporary files
  /// are removed when the StagedFiles go).
  void commit(std::initializer_list<host::StagedFile*> files) const;
  /// Refuses (sdk::Error(kUnsupported), before any work) a device other than the CPU for a run
  /// of several ranks: their exchanges go over Gloo, with CPU tensors.
  void require_cpu_for_ranks(const c10::Device& device) const;

 private:
  std::unique_ptr<host::ProcessGroup> group_;
};

}  // namespace lithe::cli
