#pragma once
// UCX (UCP) implementation of the transport interface. UCX chooses shared memory between
// processes on one host and TCP (or verbs) across hosts; UCX_TLS / UCX_NET_DEVICES pass through.
//
// Data protocol, chosen per process (RDMACOLL_UCX_PROTOCOL=auto|tag|put):
//  - tag: the writer sends a tagged message whose tag is the signal; the receiver's expect()
//    posts a tagged receive straight into the final output offset. UCX's rendezvous protocol
//    moves large messages zero-copy (CMA on one host), and over TCP this is far faster than
//    UCX's emulated put.
//  - put: ucp_put_nbx into the peer's ucp_mem_map'ed output, an endpoint flush for remote
//    completion, then an 8-byte tagged notification carrying the signal.
//  - auto: put for writes up to 64 KiB to a peer on this host, tag otherwise; tag always in a
//    job on one machine with a CPU per rank (CreateHints), where from 16 KiB UCX's rendezvous
//    reads straight into the output.

#include <memory>

#include "transport/transport.hpp"

namespace rdmacoll::transport {

std::unique_ptr<Transport> create_ucx_transport(CreateHints hints = {});

}  // namespace rdmacoll::transport
