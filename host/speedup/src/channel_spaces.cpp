// Channel spaces: union-find over channel sets, the index maps between them, and the fixed point
// that settles what each keeps (channel_spaces.h).
#include "channel_spaces.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace lithe::host::speedup_detail {

int64_t ChannelSpaces::size(int s) { return at(s).size; }

bool ChannelSpaces::mark_candidates(int s, const Bits& zero) {
  Space& space = at(s);
  if (zero.size() != space.candidates.size()) {
    return false;
  }
  for (size_t i = 0; i < zero.size(); ++i) {
    space.candidates[i] = space.candidates[i] || zero[i];
  }
  return true;
}

void ChannelSpaces::link_flatten(int channels, int flat, int64_t inner) {
  flattens_.push_back({channels, flat, inner});
}

void ChannelSpaces::link_cat(std::vector<int> parts, std::vector<int64_t> sizes, int whole) {
  cats_.push_back({std::move(parts), std::move(sizes), whole});
}

void ChannelSpaces::balance(int s, int64_t groups) { balances_.push_back({s, groups}); }

void ChannelSpaces::settle() {
  settle_links();
  for (;;) {
    const bool balanced = balance_groups();
    const bool kept = keep_one_channel();
    if (!balanced && !kept) {
      break;
    }
    settle_links();
  }
}

std::vector<SpeedupBlock> ChannelSpaces::costly_blocks() {
  std::vector<SpeedupBlock> out;
  std::set<int> roots;
  for (size_t s = 0; s < spaces_.size(); ++s) {
    roots.insert(find(static_cast<int>(s)));
  }
  for (const int r : roots) {
    Space& space = spaces_[static_cast<size_t>(r)];
    const int64_t stuck = std::count(space.candidates.begin(), space.candidates.end(), true);
    if (stuck == 0 || space.blocks.empty()) {
      continue;
    }
    for (SpeedupBlock b : space.blocks) {
      const auto same = std::find_if(out.begin(), out.end(), [&b](const SpeedupBlock& seen) {
        return seen.where == b.where && seen.reason == b.reason;
      });
      if (same != out.end()) {
        same->channels += stuck;  // e.g. several outputs of the model
        continue;
      }
      b.channels = stuck;
      out.push_back(std::move(b));
    }
  }
  return out;
}

int ChannelSpaces::find(int s) {
  while (spaces_[static_cast<size_t>(s)].parent >= 0) {
    s = spaces_[static_cast<size_t>(s)].parent;
  }
  return s;
}


int ChannelSpaces::add(int64_t size) {
  Space space;
  space.size = size;
  space.removable.assign(static_cast<size_t>(size), true);
  space.candidates.assign(static_cast<size_t>(size), false);
  spaces_.push_back(std::move(space));
  return static_cast<int>(spaces_.size() - 1);
}

// Returns false (and changes nothing) when the sizes differ.
bool ChannelSpaces::unite(int a, int b) {
  a = find(a);
  b = find(b);
  if (a == b) {
    return true;
  }
  Space& x = spaces_[static_cast<size_t>(a)];
  Space& y = spaces_[static_cast<size_t>(b)];
  if (x.size != y.size) {
    return false;
  }
  for (size_t i = 0; i < x.removable.size(); ++i) {
    x.removable[i] = x.removable[i] && y.removable[i];
    x.candidates[i] = x.candidates[i] || y.candidates[i];
  }
  x.blocks.insert(x.blocks.end(), y.blocks.begin(), y.blocks.end());
  y.parent = a;
  return true;
}

void ChannelSpaces::block(int s, const std::string& where, const std::string& reason) {
  Space& space = at(s);
  std::fill(space.removable.begin(), space.removable.end(), false);
  for (const SpeedupBlock& b : space.blocks) {
    if (b.where == where && b.reason == reason) {
      return;
    }
  }
  space.blocks.push_back({where, reason, 0});
}

void ChannelSpaces::constrain(int s, const Bits& zero) {
  Space& space = at(s);
  for (size_t i = 0; i < space.removable.size(); ++i) {
    space.removable[i] = space.removable[i] && zero[i];
  }
}

// A space that would lose every channel keeps its first: a layer needs a shape. Returns
// whether anything changed.
bool ChannelSpaces::keep_one_channel() {
  bool changed = false;
  for (size_t i = 0; i < spaces_.size(); ++i) {
    Space& space = spaces_[i];
    if (space.parent >= 0 || space.size == 0) {
      continue;
    }
    bool all = true;
    for (int64_t c = 0; c < space.size && all; ++c) {
      all = space.removable[static_cast<size_t>(c)] && space.candidates[static_cast<size_t>(c)];
    }
    if (all) {
      space.removable[0] = false;
      changed = true;
    }
  }
  return changed;
}

void ChannelSpaces::settle_links() {
  bool changed = true;
  const auto restrict_to = [&changed](Space& target, size_t i, bool allowed) {
    if (target.removable[i] && !allowed) {
      target.removable[i] = false;
      changed = true;
    }
  };
  const auto mark = [&changed](Space& target, size_t i, bool candidate) {
    if (candidate && !target.candidates[i]) {
      target.candidates[i] = true;
      changed = true;
    }
  };
  while (changed) {
    changed = false;
    for (const FlattenLink& link : flattens_) {
      Space& c = at(link.channels);
      Space& f = at(link.flat);
      for (int64_t ch = 0; ch < c.size; ++ch) {
        bool all = true;
        for (int64_t i = 0; i < link.inner; ++i) {
          all = all && f.removable[static_cast<size_t>(ch * link.inner + i)];
        }
        restrict_to(c, static_cast<size_t>(ch), all);
        for (int64_t i = 0; i < link.inner; ++i) {
          restrict_to(f, static_cast<size_t>(ch * link.inner + i),
                      c.removable[static_cast<size_t>(ch)]);
        }
        // Removable on both sides: zero on one side is reason enough to remove on both.
        if (c.removable[static_cast<size_t>(ch)]) {
          bool candidate = c.candidates[static_cast<size_t>(ch)];
          for (int64_t i = 0; i < link.inner; ++i) {
            candidate = candidate || f.candidates[static_cast<size_t>(ch * link.inner + i)];
          }
          mark(c, static_cast<size_t>(ch), candidate);
          for (int64_t i = 0; i < link.inner; ++i) {
            mark(f, static_cast<size_t>(ch * link.inner + i), candidate);
          }
        }
      }
    }
    for (const CatLink& link : cats_) {
      Space& whole = at(link.whole);
      int64_t offset = 0;
      for (size_t p = 0; p < link.parts.size(); ++p) {
        Space& part = at(link.parts[p]);
        for (int64_t i = 0; i < link.sizes[p]; ++i) {
          const auto wi = static_cast<size_t>(offset + i);
          const auto pi = static_cast<size_t>(i);
          const bool both = whole.removable[wi] && part.removable[pi];
          restrict_to(whole, wi, both);
          restrict_to(part, pi, both);
          if (both) {
            const bool candidate = whole.candidates[wi] || part.candidates[pi];
            mark(whole, wi, candidate);
            mark(part, pi, candidate);
          }
        }
        offset += link.sizes[p];
      }
    }
  }
}

// Every group of a grouped convolution's side removes as many channels as the group that
// removes fewest: the first ones (lowest index) stay removed, the rest are kept; a group never
// loses all its channels. Returns whether anything changed.
bool ChannelSpaces::balance_groups() {
  bool changed = false;
  for (const GroupBalance& b : balances_) {
    Space& space = at(b.space);
    const int64_t per_group = space.size / b.groups;
    const auto removed = [&space](int64_t i) {
      return space.removable[static_cast<size_t>(i)] && space.candidates[static_cast<size_t>(i)];
    };
    int64_t fewest = per_group - 1;
    for (int64_t g = 0; g < b.groups; ++g) {
      int64_t count = 0;
      for (int64_t i = g * per_group; i < (g + 1) * per_group; ++i) {
        count += removed(i) ? 1 : 0;
      }
      fewest = std::min(fewest, count);
    }
    for (int64_t g = 0; g < b.groups; ++g) {
      int64_t taken = 0;
      for (int64_t i = g * per_group; i < (g + 1) * per_group; ++i) {
        if (!removed(i)) {
          continue;
        }
        if (taken < fewest) {
          ++taken;
        } else {
          space.removable[static_cast<size_t>(i)] = false;
          changed = true;
        }
      }
    }
  }
  return changed;
}

// Channels to remove from a space: zero somewhere, allowed everywhere. Never all of them.
std::vector<int64_t> ChannelSpaces::kept(int s) {
  Space& space = at(s);
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < space.size; ++i) {
    const auto u = static_cast<size_t>(i);
    if (!(space.removable[u] && space.candidates[u])) {
      kept.push_back(i);
    }
  }
  if (kept.empty() && space.size > 0) {
    kept.push_back(0);  // a layer needs at least one channel to have a shape
  }
  if (static_cast<int64_t>(kept.size()) == space.size) {
    kept.clear();  // unchanged
  }
  return kept;
}

}  // namespace lithe::host::speedup_detail
