#pragma once
// What a data write's 32-bit immediate says, and which immediates this rank expects. Pure (no
// verbs calls), unit-tested.
//
// A write's signal is the receiver's token and an index (transport.hpp, write_signal); the
// immediate keeps token mod 2^15 and index mod 2^16, with bit 23 left clear for the write
// ring's wake-ups (eager_ring::kImm). The receiver hands out tokens (TokenTable), so two calls
// live at once, of any groups, never share one: a write completes only the call it was meant
// for. A call that failed leaves its token fenced, so its writes that land late are dropped,
// not kept for whichever call takes the token next.

#include <cstdint>
#include <deque>
#include <vector>

#include "transport/transport.hpp"
#include "transport/verbs/eager_ring.hpp"

namespace rdmacoll::transport::verbs_imm {

inline constexpr uint32_t kTokenBits = 15;
inline constexpr uint32_t kTokens = uint32_t{1} << kTokenBits;

// Bits 0-15: the index; 16-22: the token's low 7 bits; 23: clear; 24-31: its high 8 bits.
inline uint32_t immediate(uint64_t signal) {
  const uint32_t t = static_cast<uint32_t>(signal_token(signal) & (kTokens - 1));
  return ((t & 0x7f) << 16) | ((t >> 7) << 24) | (signal_index(signal) & 0xffff);
}
inline uint32_t token_of(uint32_t imm) {
  return ((imm >> 16) & 0x7f) | ((imm >> 24) << 7);
}
static_assert(eager_ring::kImm == 1u << 23,
              "the write ring's wake-up bit is the one immediate() leaves clear");

class TokenTable {
 public:
  TokenTable() : state_(kTokens, State::Free) {}

  // A free token, the next in turn (so a released one rests as long as possible); when every
  // token is live or fenced, the longest-fenced one; 0xffffffff when all are live.
  uint32_t reserve() {
    for (uint32_t i = 0; i < kTokens; ++i) {
      const uint32_t t = (next_ + i) % kTokens;
      if (state_[t] == State::Free) {
        state_[t] = State::Live;
        next_ = (t + 1) % kTokens;
        return t;
      }
    }
    while (!fenced_.empty()) {
      const uint32_t t = fenced_.front();
      fenced_.pop_front();
      if (state_[t] == State::Fenced) {
        state_[t] = State::Live;
        return t;
      }
    }
    return UINT32_MAX;
  }
  void release(uint32_t t, bool failed) {
    if (t >= kTokens || state_[t] != State::Live) return;
    state_[t] = failed ? State::Fenced : State::Free;
    if (failed) fenced_.push_back(t);
  }
  bool live(uint32_t t) const { return t < kTokens && state_[t] == State::Live; }
  size_t live_count() const {
    size_t n = 0;
    for (State s : state_)
      n += s == State::Live;
    return n;
  }

 private:
  enum class State : uint8_t { Free, Live, Fenced };
  std::vector<State> state_;
  std::deque<uint32_t> fenced_;
  uint32_t next_ = 0;
};

}  // namespace rdmacoll::transport::verbs_imm
