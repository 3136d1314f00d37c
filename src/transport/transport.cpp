#include "transports/transport.hpp"

#include <algorithm>

#include "rdmacoll/errors.hpp"
#include "transports/ucx/ucx_transport.hpp"
#include "transports/verbs/verbs_transport.hpp"

namespace rdmacoll::transport {

std::unique_ptr<Transport> create_transport(TransportKind kind,
                                            const std::string& preferred_device) {
  switch (kind) {
    case TransportKind::Verbs:
      return create_verbs_transport(preferred_device);
    case TransportKind::Auto:
    case TransportKind::Ucx:
      return create_ucx_transport();
  }
  throw InvalidArgument("unknown transport kind");
}

void Transport::wait_for_event(Clock::time_point deadline) {
  const auto now = Clock::now();
  if (now >= deadline || !prepare_wait()) return;
  std::vector<pollfd> fds;
  wait_fds(fds);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
  ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left.count() + 1, 100)));
  after_wait();
}

std::optional<std::string> verbs_unusable_reason() {
  VerbsDeviceChoice c = probe_verbs_device();
  if (c.usable) return std::nullopt;
  return c.reason;
}

}  // namespace rdmacoll::transport
