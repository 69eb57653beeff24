// The only translation unit that sees c10d and Gloo: everything else uses ProcessGroup.
#include "lithe/host/dist/process_group.h"

#include <ATen/ATen.h>
#include <c10/util/Logging.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "lithe/sdk/error.h"

namespace lithe::host {
namespace {

// Joining waits for a key the last rank to arrive sets, so a missing rank ends the rendezvous
// after one timeout with a count of who came (c10d's own wait would take about two).
constexpr const char* kArrivedKey = "lithe/arrived";
constexpr const char* kAllArrivedKey = "lithe/all_arrived";
constexpr const char* kWorldSizeKey = "lithe/world_size";
constexpr const char* kWorldSizeConflictKey = "lithe/world_size_conflict";
constexpr int64_t kBucketBytes = 25 << 20;

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

std::string cause_of(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) {
    return first_line(c10->what_without_backtrace());
  }
  return first_line(e.what());
}

std::optional<long long> integer_variable(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    return std::nullopt;
  }
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text, &end, 10);
  LITHE_CHECK(errno == 0 && end != text && *end == '\0', sdk::Errc::kInvalidConfig,
              "environment variable ", name, " must be an integer, got '", text, "'");
  return value;
}

c10d::ReduceOp reduce_op(sdk::Reduction op) {
  switch (op) {
    case sdk::Reduction::kMin:
      return c10d::ReduceOp::MIN;
    case sdk::Reduction::kMax:
      return c10d::ReduceOp::MAX;
    case sdk::Reduction::kSum:
      break;
  }
  return c10d::ReduceOp::SUM;
}

// FNV-1a over the bytes of every tensor, in order.
int64_t checksum(const std::vector<at::Tensor>& tensors) {
  uint64_t hash = 1469598103934665603ULL;
  for (const at::Tensor& t : tensors) {
    const at::Tensor c = t.detach().to(at::kCPU).contiguous();
    const auto* bytes = static_cast<const unsigned char*>(c.data_ptr());
    for (size_t i = 0; i < c.nbytes(); ++i) {
      hash = (hash ^ bytes[i]) * 1099511628211ULL;
    }
  }
  int64_t out = 0;
  std::memcpy(&out, &hash, sizeof out);
  return out;
}

}  // namespace

std::optional<ProcessGroupOptions> process_group_options_from_environment() {
  const std::optional<long long> world = integer_variable("WORLD_SIZE");
  if (!world || *world == 1) {
    return std::nullopt;
  }
  LITHE_CHECK(*world > 1, sdk::Errc::kInvalidConfig, "WORLD_SIZE must be >= 1, got ", *world);
  const std::optional<long long> rank = integer_variable("RANK");
  LITHE_CHECK(rank.has_value(), sdk::Errc::kInvalidConfig, "WORLD_SIZE is ", *world,
              " but RANK is not set (start every rank with RANK=0..", *world - 1,
              ", as torchrun or `lithe launch` do)");
  LITHE_CHECK(*rank >= 0 && *rank < *world, sdk::Errc::kInvalidConfig,
              "RANK must be in [0, WORLD_SIZE) = [0, ", *world, "), got ", *rank);
  ProcessGroupOptions options;
  options.rank = static_cast<int>(*rank);
  options.world_size = static_cast<int>(*world);
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') {
    options.master_addr = addr;
  }
  if (const std::optional<long long> port = integer_variable("MASTER_PORT")) {
    LITHE_CHECK(*port >= 1 && *port <= 65535, sdk::Errc::kInvalidConfig,
                "MASTER_PORT must be in 1..65535, got ", *port);
    options.master_port = static_cast<int>(*port);
  }
  if (const std::optional<long long> seconds = integer_variable("LITHE_DIST_TIMEOUT")) {
    LITHE_CHECK(*seconds > 0, sdk::Errc::kInvalidConfig,
                "LITHE_DIST_TIMEOUT must be a number of seconds > 0, got ", *seconds);
    options.timeout = std::chrono::seconds(*seconds);
  }
  if (const char* file = std::getenv("LITHE_DIST_FILE_STORE"); file != nullptr && *file != '\0') {
    options.file_store = file;
  }
  // torchrun's static rendezvous: its agent already serves the store on MASTER_PORT, and the
  // keys of each restart live under their own prefix.
  if (const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
      agent != nullptr && std::string(agent) == "True") {
    options.external_store = true;
    const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
    options.key_prefix = std::string("/worker/attempt_") +
                         (restart != nullptr && *restart != '\0' ? restart : "0");
  }
  if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME");
      interface != nullptr && *interface != '\0') {
    options.interface = interface;
  }
  return options;
}

struct ProcessGroup::Impl {
  ProcessGroupOptions options;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;

  [[noreturn]] void fail(const std::string& what, const std::exception& e) const {
    throw sdk::Error(sdk::Errc::kIo,
                     "rank " + std::to_string(options.rank) + " of " +
                         std::to_string(options.world_size) + ": exchanging " + what +
                         " failed: " + cause_of(e) +
                         " (another rank ended, was killed, or stopped answering within " +
                         std::to_string(options.timeout.count() / 1000) + " s)");
  }

  /// Starts an exchange and waits for it; any failure (queuing or waiting) names the rank.
  template <typename Start>
  void run(Start&& start, const std::string& what) const {
    try {
      start()->wait();
    } catch (const sdk::Error&) {
      throw;
    } catch (const std::exception& e) {
      fail(what, e);
    }
  }
};

ProcessGroup::ProcessGroup(const ProcessGroupOptions& options) : impl_(std::make_unique<Impl>()) {
  LITHE_CHECK(options.world_size >= 1 && options.rank >= 0 && options.rank < options.world_size,
              sdk::Errc::kInvalidConfig, "rank ", options.rank, " is not in [0, ",
              options.world_size, ")");
  impl_->options = options;
  // libtorch 2.x's c10d logs every socket poll that times out as a warning on stderr; Lithe
  // reports a failed rendezvous itself, in one line naming the rank and the rule. A user who
  // wants c10d's own log sets TORCH_CPP_LOG_LEVEL, which is then left alone.
  if (std::getenv("TORCH_CPP_LOG_LEVEL") == nullptr && FLAGS_caffe2_log_level < 2) {
    FLAGS_caffe2_log_level = 2;  // ERROR
  }
  const std::string where = options.file_store.empty()
                                ? options.master_addr + ":" + std::to_string(options.master_port)
                                : "file '" + options.file_store + "'";
  const std::string me =
      "rank " + std::to_string(options.rank) + " of " + std::to_string(options.world_size);
  LITHE_CHECK(options.file_store.empty() || !std::filesystem::exists(options.file_store),
              sdk::Errc::kInvalidConfig, me, ": the store file '", options.file_store,
              "' already exists (left by an earlier run?); remove it before starting the ranks");
  try {
    if (!options.file_store.empty()) {
      impl_->store = c10::make_intrusive<c10d::FileStore>(options.file_store, options.world_size);
      impl_->store->setTimeout(options.timeout);
    } else {
      c10d::TCPStoreOptions store;
      store.port = static_cast<uint16_t>(options.master_port);
      store.isServer = options.rank == 0 && !options.external_store;
      store.numWorkers = static_cast<size_t>(options.world_size);
      store.waitWorkers = false;  // the arrival count below reports who is missing
      store.timeout = options.timeout;
      impl_->store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, store);
    }
    if (!options.key_prefix.empty()) {
      impl_->store = c10::make_intrusive<c10d::PrefixStore>(options.key_prefix, impl_->store);
    }
  } catch (const std::exception& e) {
    throw sdk::Error(sdk::Errc::kIo, me + ": cannot reach the rendezvous at " + where + ": " +
                                         cause_of(e));
  }
  // Every rank must agree on WORLD_SIZE; otherwise the arrival count below could never be
  // reached and the run would end in a timeout that hides the cause. The first rank records its
  // value; one that differs says so and leaves its value for the others' messages.
  const std::string mine = std::to_string(options.world_size);
  std::string recorded;
  try {
    const std::vector<uint8_t> previous = impl_->store->compareSet(
        kWorldSizeKey, {}, std::vector<uint8_t>(mine.begin(), mine.end()));
    recorded.assign(previous.begin(), previous.end());
  } catch (const std::exception& e) {
    throw sdk::Error(sdk::Errc::kIo, me + ": cannot reach the rendezvous at " + where + ": " +
                                         cause_of(e));
  }
  if (recorded != mine) {
    try {
      impl_->store->set(kWorldSizeConflictKey, std::vector<uint8_t>(mine.begin(), mine.end()));
    } catch (...) {
    }
    throw sdk::Error(sdk::Errc::kInvalidConfig,
                     me + ": WORLD_SIZE is " + mine + " here but " + sdk::printable(recorded, 20) +
                         " at another rank of the rendezvous at " + where +
                         "; start every rank with the same WORLD_SIZE");
  }
  try {
    if (impl_->store->add(kArrivedKey, 1) == options.world_size) {
      impl_->store->set(kAllArrivedKey, std::vector<uint8_t>{1});
    }
    impl_->store->wait({kAllArrivedKey}, options.timeout);
  } catch (const std::exception& e) {
    int64_t arrived = -1;
    std::string conflict;
    try {
      arrived = impl_->store->add(kArrivedKey, 0);
      if (impl_->store->check({kWorldSizeConflictKey})) {
        const std::vector<uint8_t> other = impl_->store->get(kWorldSizeConflictKey);
        conflict.assign(other.begin(), other.end());
      }
    } catch (...) {
    }
    LITHE_CHECK(conflict.empty(), sdk::Errc::kInvalidConfig, me, ": WORLD_SIZE is ", mine,
                " here but ", sdk::printable(conflict, 20), " at another rank of the rendezvous at ",
                where, "; start every rank with the same WORLD_SIZE");
    throw sdk::Error(sdk::Errc::kIo,
                     me + ": the rendezvous at " + where + " timed out after " +
                         std::to_string(options.timeout.count() / 1000) + " s with " +
                         (arrived < 0 ? std::string("an unknown number of")
                                      : std::to_string(arrived) + " of " +
                                            std::to_string(options.world_size)) +
                         " ranks arrived: " + cause_of(e));
  }
  try {
    auto gloo = c10d::ProcessGroupGloo::Options::create(options.timeout);
    // One machine (a file store, a loopback master): loopback. Several: the interface asked
    // for, else the address this machine's own hostname resolves to (as PyTorch does).
    const bool loopback = !options.file_store.empty() ||
                          options.master_addr.rfind("127.", 0) == 0 ||
                          options.master_addr == "localhost" || options.master_addr == "::1";
    gloo->devices.push_back(
        !options.interface.empty()
            ? c10d::ProcessGroupGloo::createDeviceForInterface(options.interface)
        : loopback ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                   : c10d::ProcessGroupGloo::createDefaultDevice());
    gloo->threads = 1;  // the ranks' compute threads are the bottleneck, not the transport
    impl_->group = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, options.rank,
                                                               options.world_size, gloo);
  } catch (const std::exception& e) {
    throw sdk::Error(sdk::Errc::kIo, me + ": cannot connect to the other ranks: " + cause_of(e));
  }
}

ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::rank() const { return impl_->options.rank; }
int ProcessGroup::world_size() const { return impl_->options.world_size; }
std::string ProcessGroup::describe() const {
  return "rank " + std::to_string(rank()) + " of " + std::to_string(world_size());
}

void ProcessGroup::all_reduce(std::vector<at::Tensor>& tensors, sdk::Reduction op,
                              const std::string& what) {
  // Buckets of one dtype, in order, each at most kBucketBytes (a larger tensor alone).
  std::map<at::ScalarType, std::vector<size_t>> open;
  std::map<at::ScalarType, int64_t> open_bytes;
  const auto flush = [&](at::ScalarType type) {
    std::vector<size_t>& members = open[type];
    if (members.empty()) {
      return;
    }
    std::vector<at::Tensor> parts;
    for (const size_t i : members) {
      parts.push_back(tensors[i].detach().contiguous());
    }
    std::vector<at::Tensor> flat = {at::flatten_dense_tensors(parts)};
    c10d::AllreduceOptions options;
    options.reduceOp = reduce_op(op);
    impl_->run([&] { return impl_->group->allreduce(flat, options); }, what);
    const std::vector<at::Tensor> results = at::unflatten_dense_tensors(flat[0], parts);
    for (size_t k = 0; k < members.size(); ++k) {
      tensors[members[k]].detach().copy_(results[k]);
    }
    members.clear();
    open_bytes[type] = 0;
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    LITHE_CHECK(t.defined() && t.device().is_cpu() && t.layout() == at::kStrided,
                sdk::Errc::kInternal, "exchanging ", what, ": tensor ", i,
                " is not a dense CPU tensor");
    const at::ScalarType type = t.scalar_type();
    if (open_bytes[type] + static_cast<int64_t>(t.nbytes()) > kBucketBytes) {
      flush(type);
    }
    open[type].push_back(i);
    open_bytes[type] += static_cast<int64_t>(t.nbytes());
  }
  for (auto& [type, members] : open) {
    flush(type);
  }
}

void ProcessGroup::broadcast(std::vector<at::Tensor>& tensors, int root,
                             const std::string& what) {
  for (at::Tensor& t : tensors) {
    std::vector<at::Tensor> one = {t.detach().contiguous()};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    options.rootTensor = 0;
    impl_->run([&] { return impl_->group->broadcast(one, options); }, what);
    if (!one[0].is_same(t)) {
      t.detach().copy_(one[0]);
    }
  }
}

void ProcessGroup::check_identical(const std::vector<at::Tensor>& tensors,
                                   const std::string& what) {
  const int64_t mine = checksum(tensors);
  // The two 32-bit halves h and their negations, maximised in one exchange: every rank holds
  // the same hash iff max(h) == −max(−h) = min(h) for both halves (no overflow at 32 bits).
  const int64_t low = mine & 0xffffffffLL;
  const int64_t high = (mine >> 32) & 0xffffffffLL;
  at::Tensor bounds = at::tensor({low, high, -low, -high}, at::kLong);
  std::vector<at::Tensor> exchange = {bounds};
  all_reduce(exchange, sdk::Reduction::kMax, what + " checksum");
  const int64_t* b = bounds.data_ptr<int64_t>();
  LITHE_CHECK(b[0] == -b[2] && b[1] == -b[3], sdk::Errc::kInternal, describe(), ": ", what,
              " differ between ranks (their checksums differ); the ranks no longer compute the "
              "same model");
}

}  // namespace lithe::host
