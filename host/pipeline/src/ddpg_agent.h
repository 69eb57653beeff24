#pragma once
// The DDPG agent of AMC (He et al. 2018; NNI's amc/lib/rl/ddpg.py): an actor maps a layer's
// state to an action in [0, 1], a critic scores (state, action), both with target copies that
// follow by soft updates, trained from a replay buffer. Private to the search
// (budget_search.cpp's AMC strategy).
//
// Deterministic by construction, so that a search replays exactly: weights are initialised and
// minibatches drawn from the caller's SplitMix64 draws (not torch's global generator), and every
// computation runs on one intra-op thread (results would otherwise depend on the thread count).

#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

namespace lithe::host::amc {

struct DdpgOptions {
  int hidden = 300;          ///< two hidden layers of this width in both networks
  double actor_lr = 1e-4;
  double critic_lr = 1e-3;
  double tau = 0.01;         ///< soft update: target ← τ·online + (1 − τ)·target
  double discount = 1.0;     ///< AMC's: every step of an episode gets the episode's reward
  int batch = 64;
  int replay = 2000;         ///< transitions kept (oldest dropped)
};

struct Transition {
  std::vector<float> state;
  float action = 0;
  float reward = 0;
  std::vector<float> next_state;
  bool done = false;
};

class DdpgAgent {
 public:
  /// `uniform` draws a number in (0, 1): the weights' initialisation takes its draws from it.
  DdpgAgent(int state_dim, const DdpgOptions& options, const std::function<double()>& uniform);

  /// The actor's action for `state`, in [0, 1], without noise.
  double act(const std::vector<float>& state);
  void observe(Transition transition);
  /// One minibatch step of the critic and the actor, then the soft update of both targets; the
  /// minibatch (`batch` transitions, or all stored while fewer are) is drawn with `uniform`.
  void update(const std::function<double()>& uniform);
  size_t stored() const { return buffer_.size(); }

 private:
  torch::nn::Sequential actor_;
  torch::nn::Sequential critic_;
  torch::nn::Sequential actor_target_;
  torch::nn::Sequential critic_target_;
  std::unique_ptr<torch::optim::Adam> actor_optimizer_;
  std::unique_ptr<torch::optim::Adam> critic_optimizer_;
  DdpgOptions options_;
  int state_dim_;
  std::vector<Transition> buffer_;
  size_t next_ = 0;  // where the next transition goes once the buffer is full
};

}  // namespace lithe::host::amc
