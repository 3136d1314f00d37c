#include "transport/transport.hpp"

#include <algorithm>

namespace rdmacoll::transport {

void Transport::wait_for_event(Clock::time_point deadline) {
  const auto now = Clock::now();
  if (now >= deadline || !prepare_wait()) return;
  std::vector<pollfd> fds;
  wait_fds(fds);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
  ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left.count() + 1, 100)));
  after_wait();
}

}  // namespace rdmacoll::transport
