#pragma once
/// \file
/// Data-parallel runs on libtorch's c10d (Gloo on CPU): one process per rank, joined through the
/// variables torchrun sets (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; LOCAL_RANK is accepted)
/// over a TCPStore, or through a FileStore on one machine. Every collective is bounded by the
/// group's timeout, and any failure (a rank that died, was killed or stopped answering) throws
/// sdk::Error(kIo) naming this rank, what was being exchanged and the cause: a group is not
/// usable after that, so end the run.
///
/// Results are the same bytes on every rank (Gloo reduces in a fixed order), which is what
/// keeps the ranks' weights, masks and quantization state identical.

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lithe/sdk/context.h"

namespace lithe::host {

struct ProcessGroupOptions {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  /// When set, the ranks meet through this file instead of TCP (one machine). It must not
  /// exist from an earlier run (refused: its keys would mislead the rendezvous).
  std::string file_store;
  /// Every rank is a client of a store someone else serves on master_addr:master_port
  /// (torchrun's agent, TORCHELASTIC_USE_AGENT_STORE=True); otherwise rank 0 serves it.
  bool external_store = false;
  /// Prepended to every store key (torchrun: /worker/attempt_<TORCHELASTIC_RESTART_COUNT>).
  std::string key_prefix;
  /// The network interface Gloo uses (GLOO_SOCKET_IFNAME); empty: loopback when master_addr is
  /// a loopback address, else the address this machine's hostname resolves to.
  std::string interface;
  /// Bounds the rendezvous and every collective.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

/// The group torchrun's variables describe: nullopt when WORLD_SIZE is unset or 1 (a single
/// process). LITHE_DIST_TIMEOUT (seconds, > 0) sets the timeout; LITHE_DIST_FILE_STORE a file
/// store; torchrun's agent store and GLOO_SOCKET_IFNAME are honoured. Throws sdk::Error
/// (kInvalidConfig) naming the variable, the rule and the value for malformed or inconsistent
/// values (RANK missing or outside [0, WORLD_SIZE), a port outside 1..65535).
std::optional<ProcessGroupOptions> process_group_options_from_environment();

class ProcessGroup {
 public:
  /// Joins the group; every rank must. Throws sdk::Error(kIo) naming this rank, the address
  /// and how many ranks arrived when they do not all arrive within the timeout.
  explicit ProcessGroup(const ProcessGroupOptions& options);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int world_size() const;
  /// "rank 1 of 2", for messages.
  std::string describe() const;

  /// Combines `tensors` (CPU, dense) element-wise over all ranks, in place: one flattened
  /// exchange per dtype and bucket of at most 25 MB. `what` names the exchange in errors
  /// ("gradients at epoch 2 step 17").
  void all_reduce(std::vector<at::Tensor>& tensors, sdk::Reduction op, const std::string& what);
  /// Overwrites `tensors` with rank `root`'s.
  void broadcast(std::vector<at::Tensor>& tensors, int root, const std::string& what);
  /// Throws sdk::Error(kInternal) naming `what` when `tensors` do not hold the same bytes on
  /// every rank (a checksum compared with one all-reduce).
  void check_identical(const std::vector<at::Tensor>& tensors, const std::string& what);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lithe::host
