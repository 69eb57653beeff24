#include "ddpg_agent.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

namespace lithe::host::amc {
namespace {

// One intra-op thread while it lives (the agent's results must not depend on the thread count).
class OneThread {
 public:
  OneThread() : threads_(at::get_num_threads()) { at::set_num_threads(1); }
  ~OneThread() { at::set_num_threads(threads_); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int threads_;
};

torch::nn::Sequential network(int in, int hidden, int out, bool squash) {
  torch::nn::Sequential net(torch::nn::Linear(in, hidden), torch::nn::ReLU(),
                            torch::nn::Linear(hidden, hidden), torch::nn::ReLU(),
                            torch::nn::Linear(hidden, out));
  if (squash) {
    net->push_back(torch::nn::Sigmoid());
  }
  return net;
}

// DDPG's initialisation: hidden layers uniform in ±1/√fan_in, the last in ±3·10⁻³; the draws
// come from `uniform`, in parameter order.
void initialise(torch::nn::Sequential& net, const std::function<double()>& uniform) {
  torch::NoGradGuard no_grad;
  const auto params = net->named_parameters();
  const size_t last_weight = params.size() - 2;
  size_t k = 0;
  for (const auto& p : params) {
    at::Tensor t = p.value();
    const int64_t fan_in = t.dim() == 2 ? t.size(1) : t.size(0);
    const double bound = k >= last_weight ? 3e-3 : 1.0 / std::sqrt(static_cast<double>(fan_in));
    at::Tensor flat = t.view({-1});
    float* data = flat.data_ptr<float>();
    for (int64_t i = 0; i < flat.numel(); ++i) {
      data[i] = static_cast<float>((2.0 * uniform() - 1.0) * bound);
    }
    ++k;
  }
}

void copy_into(torch::nn::Sequential& target, const torch::nn::Sequential& source) {
  torch::NoGradGuard no_grad;
  const auto to = target->parameters();
  const auto from = source->parameters();
  for (size_t i = 0; i < to.size(); ++i) {
    to[i].copy_(from[i]);
  }
}

void soft_update(torch::nn::Sequential& target, const torch::nn::Sequential& source, double tau) {
  torch::NoGradGuard no_grad;
  const auto to = target->parameters();
  const auto from = source->parameters();
  for (size_t i = 0; i < to.size(); ++i) {
    to[i].mul_(1.0 - tau).add_(from[i], tau);
  }
}

}  // namespace

DdpgAgent::DdpgAgent(int state_dim, const DdpgOptions& options,
                     const std::function<double()>& uniform)
    : actor_(network(state_dim, options.hidden, 1, true)),
      critic_(network(state_dim + 1, options.hidden, 1, false)),
      actor_target_(network(state_dim, options.hidden, 1, true)),
      critic_target_(network(state_dim + 1, options.hidden, 1, false)),
      options_(options),
      state_dim_(state_dim) {
  const OneThread one;
  initialise(actor_, uniform);
  initialise(critic_, uniform);
  copy_into(actor_target_, actor_);
  copy_into(critic_target_, critic_);
  actor_optimizer_ = std::make_unique<torch::optim::Adam>(
      actor_->parameters(), torch::optim::AdamOptions(options.actor_lr));
  critic_optimizer_ = std::make_unique<torch::optim::Adam>(
      critic_->parameters(), torch::optim::AdamOptions(options.critic_lr));
}

double DdpgAgent::act(const std::vector<float>& state) {
  const OneThread one;
  torch::NoGradGuard no_grad;
  const at::Tensor s = torch::tensor(state).view({1, state_dim_});
  return actor_->forward(s).item<double>();
}

void DdpgAgent::observe(Transition transition) {
  if (buffer_.size() < static_cast<size_t>(options_.replay)) {
    buffer_.push_back(std::move(transition));
    return;
  }
  buffer_[next_] = std::move(transition);
  next_ = (next_ + 1) % buffer_.size();
}

void DdpgAgent::update(const std::function<double()>& uniform) {
  if (buffer_.empty()) {
    return;
  }
  const OneThread one;
  // A search runs tens of episodes, not AMC's hundreds: the minibatch is what is stored until
  // there is a whole one.
  const auto n = static_cast<int64_t>(std::min(buffer_.size(), static_cast<size_t>(options_.batch)));
  at::Tensor states = torch::empty({n, state_dim_});
  at::Tensor next_states = torch::empty({n, state_dim_});
  at::Tensor actions = torch::empty({n, 1});
  at::Tensor rewards = torch::empty({n, 1});
  at::Tensor not_done = torch::empty({n, 1});
  for (int64_t i = 0; i < n; ++i) {
    const auto pick = std::min(static_cast<size_t>(uniform() * static_cast<double>(buffer_.size())),
                               buffer_.size() - 1);
    const Transition& t = buffer_[pick];
    states[i].copy_(torch::tensor(t.state));
    next_states[i].copy_(torch::tensor(t.next_state));
    actions[i][0] = t.action;
    rewards[i][0] = t.reward;
    not_done[i][0] = t.done ? 0.0F : 1.0F;
  }
  at::Tensor target;
  {
    torch::NoGradGuard no_grad;
    const at::Tensor next_q =
        critic_target_->forward(torch::cat({next_states, actor_target_->forward(next_states)}, 1));
    target = rewards + options_.discount * not_done * next_q;
  }
  critic_optimizer_->zero_grad();
  const at::Tensor q = critic_->forward(torch::cat({states, actions}, 1));
  torch::mse_loss(q, target).backward();
  critic_optimizer_->step();

  actor_optimizer_->zero_grad();
  const at::Tensor policy_loss =
      -critic_->forward(torch::cat({states, actor_->forward(states)}, 1)).mean();
  policy_loss.backward();
  actor_optimizer_->step();

  soft_update(actor_target_, actor_, options_.tau);
  soft_update(critic_target_, critic_, options_.tau);
}

}  // namespace lithe::host::amc
