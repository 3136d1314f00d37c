#pragma once
// How a wait of the engine polls before it blocks: one rule for a call's waits and for the
// point-to-point driver and its helpers. Polling first saves a wake-up from poll() (tens of us),
// and on UCX's shared memory the peer's syscall to wake us. When ranks outnumber cores every
// round yields, since the rank we wait for may be queued behind us on this core.

#include <sched.h>

#include <chrono>

#include "transport/transport.hpp"

namespace rdmacoll::engine {

// How a wait polls before it blocks: for `duration`, yielding the core at each poll when ranks
// outnumber cores (MPI's yield-when-idle), so the peer being waited for can run.
struct SpinPolicy {
  std::chrono::microseconds duration{0};
  bool yield = false;
};

// One idle round: true while the wait should keep polling (64 rounds, then for the policy's
// duration, timed from the 65th). `idle` counts the rounds since anything moved (the caller
// sets it to 0 then); `until` is the caller's own. The clock is read every 16th round only: a
// read every round was a tenth of an 8-byte all-gather's time on 2 ranks (perf); a spent
// budget sets `until` to the epoch, so it stays spent without reading it again.
inline bool keep_spinning(const SpinPolicy& spin, int& idle, transport::Clock::time_point& until) {
  if (++idle <= 64) {
    if (spin.yield) sched_yield();
    return true;
  }
  if (idle == 65) {
    until = transport::Clock::now() + spin.duration;
  } else if (until == transport::Clock::time_point{}) {
    return false;  // spent
  } else if (idle % 16 != 0) {
    if (spin.yield) sched_yield();
    return true;
  }
  if (transport::Clock::now() < until) {
    if (spin.yield) sched_yield();
    return true;
  }
  until = transport::Clock::time_point{};
  return false;
}

}  // namespace rdmacoll::engine
