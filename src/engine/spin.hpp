#pragma once
// How a wait of the engine polls before it blocks: one rule for a call's waits and for the
// point-to-point driver and its helpers. Polling first saves a wake-up from poll() (tens of us),
// and on UCX's shared memory the peer's syscall to wake us. When ranks outnumber cores every
// round yields, since the rank we wait for may be queued behind us on this core.

#include <sched.h>

#include "engine/call_args.hpp"
#include "transport/transport.hpp"

namespace rdmacoll::engine {

// One idle round: true while the wait should keep polling (64 rounds, then for the policy's
// duration, timed from the 65th). `idle` counts the rounds since anything moved (the caller
// sets it to 0 then); `until` is the caller's own.
inline bool keep_spinning(const SpinPolicy& spin, int& idle, transport::Clock::time_point& until) {
  if (++idle <= 64) {
    if (spin.yield) sched_yield();
    return true;
  }
  if (idle == 65) until = transport::Clock::now() + spin.duration;
  if (transport::Clock::now() < until) {
    if (spin.yield) sched_yield();
    return true;
  }
  return false;
}

}  // namespace rdmacoll::engine
