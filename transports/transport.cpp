#include "transports/transport.hpp"

#include "rdmacoll/errors.hpp"
#include "transports/ucx/ucx_transport.hpp"

namespace rdmacoll::transport {

std::unique_ptr<Transport> create_transport(TransportKind kind) {
  switch (kind) {
    case TransportKind::Verbs:
      // The verbs transport (transports/verbs/) is not part of this build yet.
      throw TransportError(
          "RDMACOLL_TRANSPORT=verbs: this build of rdmacoll has no verbs transport yet; use "
          "RDMACOLL_TRANSPORT=auto or ucx");
    case TransportKind::Auto:
    case TransportKind::Ucx:
      return create_ucx_transport();
  }
  throw InvalidArgument("unknown transport kind");
}

}  // namespace rdmacoll::transport
