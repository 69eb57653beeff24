#pragma once
// NNI's SimulatedAnnealingPruner (v2.0). Declared for unit tests, which link this plugin's object
// library and register it into their own registry.

#include <lithe/sdk/registry.h>

#include <cstdint>
#include <random>

namespace lithe::plugins::simulated_annealing {

/// Registers pruner "simulated_annealing".
void register_algorithms(sdk::Registry& registry);

/// NumPy's legacy generator (np.random.seed(int), then np.random.uniform): MT19937 seeded as
/// NumPy seeds it, doubles from two draws as NumPy makes them. A seeded search therefore draws
/// exactly the numbers NNI's draws after np.random.seed(seed).
class NumpyRandom {
 public:
  /// std::mt19937's seeding is MT19937's init_genrand, which NumPy's legacy seeding calls.
  explicit NumpyRandom(uint32_t seed) : engine_(seed) {}
  /// np.random.uniform(low, high): low + (high − low) · u, u in [0, 1) from 53 random bits.
  double uniform(double low, double high);

 private:
  std::mt19937 engine_;
};

}  // namespace lithe::plugins::simulated_annealing
