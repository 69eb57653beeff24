#pragma once
// Internal to speedup: channel spaces, the bookkeeping under the channel flow.
//
// A space is a set of channels that every tensor in it shares: removing channel c removes it from
// all of them at once. Spaces join (a residual add makes both sides one space), carry what is
// known about each channel (removable: every reader allows it; candidate: zero somewhere), and
// are related by index maps: a flatten (channel c is the run of `inner` flat features c·inner...)
// and a channel-wise cat (the parts side by side in the whole). A grouped convolution's side must
// lose as many channels in every group. settle() propagates all of that to a fixed point; kept()
// then says what each space keeps. The rules that decide which tensors share a space are in
// channel_flow.cpp; this file knows nothing of graphs.

#include <cstdint>
#include <string>
#include <vector>

#include "lithe/host/speedup/speedup.h"

namespace lithe::host::speedup_detail {

using Bits = std::vector<bool>;

class ChannelSpaces {
 public:
  /// A new space of `size` channels, every one removable and none zero yet.
  int add(int64_t size);
  /// The representative of the space `s` was joined into.
  int find(int s);
  int64_t size(int s);
  /// Joins two spaces of equal size (removable where both allow, zero where either is); false
  /// (and nothing changed) when the sizes differ.
  bool unite(int a, int b);
  /// Keeps every channel of `s`, recording where and why (once per where and reason).
  void block(int s, const std::string& where, const std::string& reason);
  /// A reader that can only lose the channels that are zero in `zero`.
  void constrain(int s, const Bits& zero);
  /// Records channels known to be zero in a tensor of `s`; false when `zero` is not of its size.
  bool mark_candidates(int s, const Bits& zero);
  /// [N, C, ...] flattened into [N, C·inner]: channel c of `channels` is features
  /// c·inner .. c·inner + inner − 1 of `flat`.
  void link_flatten(int channels, int flat, int64_t inner);
  /// `whole` is `parts` (of `sizes` channels) side by side.
  void link_cat(std::vector<int> parts, std::vector<int64_t> sizes, int whole);
  /// Every one of `groups` contiguous groups of `s` must lose as many channels.
  void balance(int s, int64_t groups);

  /// Propagates the links, balances the groups and keeps one channel of any space that would
  /// lose them all, until nothing changes.
  void settle();
  /// The channels `s` keeps (after settle); empty when it keeps every one.
  std::vector<int64_t> kept(int s);
  /// Every block that keeps zero channels, with how many it keeps (blocks of the same place
  /// and reason added up).
  std::vector<SpeedupBlock> costly_blocks();

 private:
  struct Space {
    int64_t size = 0;
    int parent = -1;
    Bits removable;   // constraints so far
    Bits candidates;  // zero somewhere in the space
    std::vector<SpeedupBlock> blocks;
  };
  struct FlattenLink {
    int channels;
    int flat;
    int64_t inner;
  };
  struct CatLink {
    std::vector<int> parts;
    std::vector<int64_t> sizes;
    int whole;
  };
  struct GroupBalance {
    int space;
    int64_t groups;
  };

  Space& at(int s) { return spaces_[static_cast<size_t>(find(s))]; }
  void settle_links();
  bool balance_groups();
  bool keep_one_channel();

  std::vector<Space> spaces_;
  std::vector<FlattenLink> flattens_;
  std::vector<CatLink> cats_;
  std::vector<GroupBalance> balances_;
};

}  // namespace lithe::host::speedup_detail
