// How all_to_all's splits travel and how every pair's sizes are agreed (all_to_all_parts.hpp).

#include <string>
#include <vector>

#include "engine/collectives/all_to_all_parts.hpp"
#include "engine/control/agreement.hpp"
#include "engine/control/control_plane.hpp"
#include "engine/message_steps.hpp"

namespace rdmacoll::engine::all_to_all_parts {

namespace {

bool all_equal(std::span<const int64_t> v) {
  for (int64_t x : v)
    if (x != v.front()) return false;
  return true;
}

std::string disagreement(const Call& call, int i, uint64_t sent, int j, uint64_t expected) {
  return "ranks disagree on the all_to_all's splits: rank " + std::to_string(call.global(i)) +
         " sends " + std::to_string(sent) + " elements to rank " + std::to_string(call.global(j)) +
         ", which expects " + std::to_string(expected) +
         "; input_split_sizes[j] on rank i must equal output_split_sizes[i] on rank j";
}

// Its second message: the first disagreement it found (rank `from` sends `sent` elements to
// rank `to`, which expects `expected`), or from = kAgreed.
struct Finding {
  uint64_t from;
  uint64_t sent;
  uint64_t to;
  uint64_t expected;
};
constexpr uint64_t kAgreed = ~uint64_t{0};
static_assert(sizeof(Finding) == kPairWords * kWord);

}  // namespace

Travel splits_travel(std::span<const int64_t> in_splits, std::span<const int64_t> out_splits,
                     size_t limit) {
  if (all_equal(in_splits) && all_equal(out_splits)) return Travel::Uniform;
  return 2 * kWord * in_splits.size() <= limit ? Travel::Full : Travel::Pairs;
}

void check_splits(const Call& call, const std::vector<CallDescriptor>& all, int p) {
  bool every_uniform = true;
  for (int i = 0; i < p; ++i) {
    const size_t got = all[i].splits.size();
    if (got != 2 * kWord && got != 2 * kWord * p) {
      reject(call, "rank " + std::to_string(call.global(i)) + " sent " + std::to_string(got) +
                       " bytes of splits, expected " + std::to_string(2 * kWord) + " or " +
                       std::to_string(2 * kWord * p));
    }
    every_uniform = every_uniform && Splits{all[i], p}.uniform();
  }
  if (every_uniform) {  // every pair agrees iff every member's two sizes match member 0's
    const Splits first{all[0], p};
    for (int i = 0; i < p; ++i) {
      const Splits s{all[i], p};
      if (s.sends_to(0) != first.expects_from(i))
        reject(call, disagreement(call, i, s.sends_to(0), 0, first.expects_from(i)));
      if (first.sends_to(i) != s.expects_from(0))
        reject(call, disagreement(call, 0, first.sends_to(i), i, s.expects_from(0)));
    }
    return;
  }
  for (int i = 0; i < p; ++i) {
    const Splits s{all[i], p};
    for (int j = 0; j < p; ++j) {
      const uint64_t expected = Splits{all[j], p}.expects_from(i);
      if (s.sends_to(j) != expected)
        reject(call, disagreement(call, i, s.sends_to(j), j, expected));
    }
  }
}

std::string exchange_pairs(Call& call, std::span<const int64_t> in_splits,
                           std::span<const int64_t> out_splits) {
  GroupState& g = call.group();
  const int p = g.size();
  const int me = g.rank;
  // Our sizes to each member at [j], each member's to us at [p + r], each member's finding at
  // [2p + r]: one buffer kept per group.
  auto& words = g.scratch.get<AllToAllScratch>().pair_words;
  words.assign(3 * kPairWords * p, 0);
  auto at = [&](int k) { return words.data() + kPairWords * static_cast<size_t>(k); };
  auto read = [&]<typename T>(int k, T& v) { std::memcpy(&v, at(k), sizeof v); };
  // Posts every receive of a round (slots [base + r]), sends what slot(j) holds, waits.
  auto round = [&](int base, auto slot) {
    MessageSteps messages(call, TagKind::Piece, MessageSteps::Carries::Control);
    for (int i = 1; i < p; ++i) {
      const int r = (me + p - i) % p;
      messages.expect(r, static_cast<uint32_t>(base + r), at(base + r), kPairWords * kWord);
    }
    for (int i = 1; i < p; ++i) {
      const int j = (me + i) % p;
      messages.send(j, static_cast<uint32_t>(base + me), slot(j), kPairWords * kWord);
    }
    for (size_t i = 0; i < messages.arrivals(); ++i)
      messages.wait_exactly(i, kPairWords * kWord, "the all_to_all's pair round");
    messages.wait_all();
    messages.release();
  };
  uint64_t sent = 0, expected = 0;
  for (int j = 0; j < p; ++j) {
    const PairSizes s{static_cast<uint64_t>(in_splits[j]), static_cast<uint64_t>(out_splits[j]),
                      sent, expected};
    std::memcpy(at(j), &s, sizeof s);
    sent += s.sends;
    expected += s.expects;
  }
  round(p, [&](int j) { return at(j); });
  Finding mine{kAgreed, 0, 0, 0};
  for (int r = 0; r < p && mine.from == kAgreed; ++r) {
    if (r == me) continue;
    PairSizes ours, theirs;
    read(r, ours);
    read(p + r, theirs);
    // Both ranks of a pair report the same direction first: the lower rank's sends.
    const Finding to_me{uint64_t(r), theirs.sends, uint64_t(me), ours.expects};
    const Finding from_me{uint64_t(me), ours.sends, uint64_t(r), theirs.expects};
    const bool bad_to_me = to_me.sent != to_me.expected;
    const bool bad_from_me = from_me.sent != from_me.expected;
    if (bad_to_me && (r < me || !bad_from_me))
      mine = to_me;
    else if (bad_from_me)
      mine = from_me;
  }
  std::memcpy(at(2 * p + me), &mine, sizeof mine);
  round(2 * p, [&](int) { return at(2 * p + me); });
  for (int r = 0; r < p; ++r) {
    Finding f;
    read(2 * p + r, f);
    if (f.from == kAgreed) continue;
    if (f.from >= static_cast<uint64_t>(p) || f.to >= static_cast<uint64_t>(p)) {
      throw TransportError(call.where() + ": rank " + std::to_string(call.global(r)) +
                           " reported a disagreement between ranks outside the group");
    }
    return disagreement(call, static_cast<int>(f.from), f.sent, static_cast<int>(f.to), f.expected);
  }
  return "";
}

PairSizes pair_from(GroupState& g, int r) {
  PairSizes s;
  std::memcpy(&s,
              g.scratch.get<AllToAllScratch>().pair_words.data() +
                  kPairWords * static_cast<size_t>(g.size() + r),
              sizeof s);
  return s;
}

}  // namespace rdmacoll::engine::all_to_all_parts
