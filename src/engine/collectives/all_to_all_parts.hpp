#pragma once
// all_to_all's parts (internal to src/engine/collectives): how each rank's splits travel and how
// every pair's sizes are agreed (all_to_all_sizes.cpp), and Bruck's rounds for small equal
// pieces (all_to_all_bruck.cpp). The call itself: all_to_all.cpp.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/call.hpp"
#include "engine/core/call_descriptor.hpp"
#include "engine/group_state.hpp"
#include "transport/transport.hpp"

namespace rdmacoll::engine::all_to_all_parts {

// What all_to_all keeps per group (core/scratch_arena.hpp), reused by each call.
struct AllToAllScratch {
  std::vector<uint64_t> splits;      // our splits as they travel
  std::vector<uint64_t> pair_words;  // the pair rounds: sizes out, in, findings
  std::vector<uint8_t> bruck;        // Bruck's rounds: slots, message out, messages in
  std::vector<size_t> in_offsets;    // where each piece starts, bytes
  std::vector<size_t> out_offsets;
};

constexpr size_t kWord = sizeof(uint64_t);

// How a rank's splits travel in its descriptor; the length of its splits says which (p >= 2):
//  - 2 words: every piece is the same size each way (input piece, output piece), at any p;
//  - 2p words: its p input splits, then its p output splits, while 16p bytes fit the eager
//    room (the room every rank computes alike);
//  - none: the splits do not fit; every member then runs exchange_pairs.
enum class Travel { Uniform, Full, Pairs };

Travel splits_travel(std::span<const int64_t> in_splits, std::span<const int64_t> out_splits,
                     size_t limit);

// One member's splits as its descriptor carries them (Uniform or Full).
struct Splits {
  const CallDescriptor& d;
  int p;

  bool uniform() const { return d.splits.size() == 2 * kWord; }
  uint64_t word(size_t i) const {
    uint64_t v;
    std::memcpy(&v, d.splits.data() + i * kWord, kWord);
    return v;
  }
  // Elements the member sends member j, and expects from member j.
  uint64_t sends_to(int j) const { return uniform() ? word(0) : word(j); }
  uint64_t expects_from(int j) const { return uniform() ? word(1) : word(p + j); }
  // Elements ahead of member k's piece in the member's input, and in its output.
  uint64_t sent_before(int k) const {
    if (uniform()) return static_cast<uint64_t>(k) * word(0);
    uint64_t n = 0;
    for (int j = 0; j < k; ++j)
      n += word(j);
    return n;
  }
  uint64_t expected_before(int k) const {
    if (uniform()) return static_cast<uint64_t>(k) * word(1);
    uint64_t n = 0;
    for (int j = 0; j < k; ++j)
      n += word(p + j);
    return n;
  }
};

// Every member's splits travelled: every pair's sizes, checked alike on every rank.
void check_splits(const Call& call, const std::vector<CallDescriptor>& all, int p);

// What one member tells another in exchange_pairs' first message, in elements: what it sends
// the other, what it expects from it, and where those two pieces start in its input and its
// output.
struct PairSizes {
  uint64_t sends;
  uint64_t expects;
  uint64_t sent_before;
  uint64_t expected_before;
};
constexpr size_t kPairWords = 4;
static_assert(sizeof(PairSizes) == kPairWords * kWord);

// The pair rounds, where the splits did not travel in the descriptors. First every pair swaps
// its sizes (one message each way, tag index p + sender: apart from the pieces', the sender);
// then every member tells every other member what it found (tag index 2p + sender), so all
// raise the same disagreement before anything moves, as when the descriptors carry the
// splits. Two rounds of p - 1 messages of 32 bytes, in place of 16p^2 bytes in descriptors.
// Returns the disagreement ("" if none), the same on every rank; the sizes stay in the group's
// scratch for pair_from().
std::string exchange_pairs(Call& call, std::span<const int64_t> in_splits,
                           std::span<const int64_t> out_splits);
// The first pair round's message from member r.
PairSizes pair_from(GroupState& g, int r);

// Whether this rank offers Bruck's rounds for equal pieces of `piece` bytes: they carry up to
// p/2 pieces per control message. An input that fits inline goes with the descriptors instead:
// their log p rounds alone, where Bruck's add log p more. `forced` (RDMACOLL_ALLTOALL, the
// group's tuning) overrides.
bool offers_bruck(int p, size_t piece, bool fits_inline, int hosts, size_t max_message,
                  const std::optional<schedule::Algorithm>& forced);
// Bruck's rounds (schedule/bruck_all_to_all.hpp) for pieces of `piece` bytes, into `out`.
void bruck_rounds(Call& call, uint8_t* out, const uint8_t* in, size_t piece);

}  // namespace rdmacoll::engine::all_to_all_parts
