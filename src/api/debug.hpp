#pragma once
// Introspection for tests; not part of the installed API.

#include <cstdint>
#include <string>

#include "rdmacoll/process_group.hpp"

namespace rdmacoll::detail {

// Memory registrations the transport has made so far (registration-cache misses).
uint64_t memory_registrations();

// The transport's work counters (transport::Transport::Counters), as "name=value ..." text.
std::string transport_counters();

// The transport's footprint (transport::Transport::Footprint), as "name=value ..." text.
std::string transport_footprint();
// What the transport has in flight (verbs: "sends_in_flight=N send_buffers_in_use=M").
std::string transport_in_flight();

// Peers the transport has opened a connection to (Footprint::connected_peers).
uint64_t connected_peers();

// Data bytes this process has written to global rank `peer` (the transport's counter).
uint64_t bytes_written_to(int peer);

// Data bytes this process has copied out of its peers' memory (Transport::read_peer).
uint64_t bytes_read();

// The host identity global rank `rank` reported (RDMACOLL_HOST_ID or its hostname).
std::string host_of(int rank);

// Whether `group`'s small calls go through the mailbox in shared memory
// (engine/control/mailbox).
bool mailbox_active(const Group& group = {});

// Doorbells this process rang to wake a peer blocked on its mailbox.
uint64_t doorbells_rung();

// Control messages (descriptors, acks) this process has sent through the transport.
uint64_t control_messages_sent();

}  // namespace rdmacoll::detail
