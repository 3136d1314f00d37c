#pragma once
// The descriptor exchange's buffers, kept by each group in its scratch arena
// (core/scratch_arena.hpp) and reused by every call: the serialized descriptors going out and
// coming in, the parsed ones, the rounds across hosts, and where this rank stands in the
// group's orders.

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "engine/core/call_descriptor.hpp"
#include "schedule/schedule.hpp"
#include "schedule/service.hpp"

namespace rdmacoll::engine {

struct ExchangeScratch {
  std::vector<std::vector<uint8_t>> receive;  // descriptor buffers, one per member
  size_t receive_capacity = 0;
  std::vector<uint8_t> send;                    // our serialized descriptor
  std::vector<std::vector<uint8_t>> send_each;  // and each peer's, where inline data is in pieces
  std::vector<CallDescriptor> descriptors;      // this call's, index = group rank
  std::vector<const uint8_t*> incoming;         // where each member's descriptor is this call
  std::vector<size_t> incoming_lengths;
  std::vector<std::vector<uint8_t>> round_send;  // across hosts: each round's messages
  std::vector<uint8_t> round_receive;            // and the one being received
  std::vector<size_t> round_pieces;              // where each message of a round starts
  std::vector<int> round_chunks;                 // the group ranks a round moves
  // The descriptor rounds' service schedules (schedule/service.hpp), made once per group.
  std::map<schedule::ServiceRounds, schedule::Schedule> service_schedules;
  int order_position = -1;  // this rank's place in GroupState::order
  int ring_position = -1;   // and in GroupState::ring_order
  // A ring call saw only its successor's descriptor (group rank), else -1: all of them.
  int seen_only = -1;
  std::vector<uint8_t> neighbour_error[2];  // errors spread by the ring neighbours
};

}  // namespace rdmacoll::engine
