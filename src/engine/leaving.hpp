#pragma once
// The process-wide "this process is leaving" flag of abort_process_group().

#include <atomic>

namespace rdmacoll::engine {

// Set by abort_process_group(): every wait raises PeerFailure once it goes idle, so queued and
// running work ends within one idle round (the transport's poll cap, 100 ms) of an exit.
inline std::atomic<bool>& process_leaving() {
  static std::atomic<bool> leaving{false};
  return leaving;
}

}  // namespace rdmacoll::engine
