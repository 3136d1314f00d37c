#pragma once
// The engine's one wait loop: a call's waits for its requests and for the mailbox
// (engine/call.hpp), and the point-to-point driver and its helpers (engine/p2p.cpp) all run it.
// It polls; after a poll that moved nothing it keeps polling as the spin policy says
// (engine/spin.hpp), and only then looks at what may have failed (a dead peer, a deadline:
// `stalled` throws) and blocks in the transport (`block`) until an event or a deadline.

#include <utility>

#include "engine/spin.hpp"

namespace rdmacoll::engine {

// What one poll found: the wait is over, something moved (poll again at once), or nothing did.
enum class Poll { Done, Moved, Idle };

// Runs the wait. `spun(idle)` runs on each polling round after an idle poll (the driver lets
// its lock go there; the mailbox wait progresses the transport now and then); `until` is the
// caller's, as keep_spinning's.
template <typename PollFn, typename SpunFn, typename StalledFn, typename BlockFn>
void run_wait(const SpinPolicy& spin, transport::Clock::time_point& until, PollFn&& poll,
              SpunFn&& spun, StalledFn&& stalled, BlockFn&& block) {
  int idle = 0;
  for (;;) {
    switch (poll()) {
      case Poll::Done:
        return;
      case Poll::Moved:
        idle = 0;
        continue;
      case Poll::Idle:
        break;
    }
    if (keep_spinning(spin, idle, until)) {
      spun(idle);
      continue;
    }
    stalled();
    block();
  }
}

}  // namespace rdmacoll::engine
