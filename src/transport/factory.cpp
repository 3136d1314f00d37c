// The one place that knows every transport implementation: the rest of the library sees the
// interface (transport.hpp) only.

#include "rdmacoll/errors.hpp"
#include "transport/transport.hpp"
#include "transport/ucx/ucx_transport.hpp"
#include "transport/verbs/verbs_transport.hpp"

namespace rdmacoll::transport {

std::unique_ptr<Transport> create_transport(TransportKind kind, const std::string& preferred_device,
                                            CreateHints hints) {
  switch (kind) {
    case TransportKind::Verbs:
      return create_verbs_transport(preferred_device);
    case TransportKind::Auto:
    case TransportKind::Ucx:
      return create_ucx_transport(hints);
  }
  throw InvalidArgument("unknown transport kind");
}

std::optional<std::string> verbs_unusable_reason() {
  VerbsDeviceChoice c = probe_verbs_device();
  if (c.usable) return std::nullopt;
  return c.reason;
}

void check_settings() {
  check_verbs_settings();
}

}  // namespace rdmacoll::transport
