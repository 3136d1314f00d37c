// The introspection of api/debug.hpp: built into the testing library (rdmacoll_testing) that the
// tests and in-tree tools link, not into the shipped librdmacoll.

#include "api/debug.hpp"

#include <sstream>

#include "api/world.hpp"
#include "engine/group_state.hpp"

namespace rdmacoll {

using api::require_world;
using api::resolve;

namespace detail {
uint64_t memory_registrations() {
  return require_world("memory_registrations").transport->statistics().registrations;
}
std::string transport_counters() {
  const auto c = require_world("transport_counters").transport->statistics().counters;
  std::ostringstream o;
  o << "work_requests=" << c.work_requests << " doorbells=" << c.doorbells
    << " signaled=" << c.signaled << " inline_sends=" << c.inline_sends
    << " completions=" << c.completions << " event_syscalls=" << c.event_syscalls
    << " keepalives=" << c.keepalives << " striped_writes=" << c.striped_writes
    << " eager_writes=" << c.eager_writes << " eager_slot_waits=" << c.eager_slot_waits
    << " eager_credit_writes=" << c.eager_credit_writes << " eager_sleeps=" << c.eager_sleeps
    << " eager_rings=" << c.eager_rings << " eager_late=" << c.eager_late
    << " receive_credit_writes=" << c.receive_credit_writes << " credit_waits=" << c.credit_waits
    << " receive_queue_low=" << c.receive_queue_low << " port_down_events=" << c.port_down_events
    << " ordering_writes=" << c.ordering_writes << " lane_resets=" << c.lane_resets;
  return o.str();
}
uint64_t bytes_written_to(int peer) {
  return require_world("bytes_written_to").transport->statistics().bytes_written_to(peer);
}
uint64_t bytes_read() {
  return require_world("bytes_read").transport->statistics().bytes_read;
}
bool mailbox_active(const Group& group) {
  return resolve(group, "mailbox_active").mailbox.active();
}
uint64_t doorbells_rung() {
  return require_world("doorbells_rung").transport->statistics().doorbells_rung;
}

std::string transport_footprint() {
  const auto f = require_world("transport_footprint").transport->statistics().footprint;
  std::ostringstream os;
  os << "queue_pairs=" << f.queue_pairs << " pinned_control_bytes=" << f.pinned_control_bytes
     << " cq_entries=" << f.cq_entries;
  return os.str();
}

std::string transport_in_flight() {
  const auto f = require_world("transport_in_flight").transport->statistics().footprint;
  return "sends_in_flight=" + std::to_string(f.sends_in_flight) +
         " send_buffers_in_use=" + std::to_string(f.send_buffers_in_use);
}

uint64_t connected_peers() {
  return require_world("connected_peers").transport->statistics().footprint.connected_peers;
}

uint64_t control_messages_sent() {
  return require_world("control_messages_sent").transport->statistics().control_messages_sent;
}
std::string host_of(int rank) {
  return require_world("host_of").placements.at(rank).host;
}
}  // namespace detail

}  // namespace rdmacoll
