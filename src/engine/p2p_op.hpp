#pragma once
// One point-to-point operation as the driver (p2p.cpp) and the protocol steps (p2p_steps.cpp)
// see it. Internal to the engine's point-to-point files.

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/p2p.hpp"
#include "transport/transport.hpp"

namespace rdmacoll::engine {

// Message buffers are sized, not zero-filled: a receive's is the inline limit (64 KiB on one
// host), and filling it took a memset of 64 KiB per 8-byte recv. A message overwrites what
// is read of it; a send's is written whole (header, then data).
template <typename T>
struct Uninitialized : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = Uninitialized<U>;
  };
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) {
      ::new (static_cast<void*>(p)) U;
    } else {
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
  }
};
using MessageBuffer = std::vector<uint8_t, Uninitialized<uint8_t>>;

struct PointToPoint::Op {
  using Kind = OpKind;
  Kind kind = Kind::Send;
  GroupState* g = nullptr;
  uint32_t group = 0;
  int me = -1;    // our group rank
  int self = -1;  // our global rank
  int peer = -1;  // group rank; -1: a receive from any source, not yet resolved
  uint32_t tag = 0;
  uint8_t* data = nullptr;
  size_t bytes = 0;
  uint64_t seq = 0;  // on the (sender, receiver, tag) channel, once known
  std::shared_ptr<WorkState> work;
  transport::Clock::time_point deadline;
  int asked = -1;           // the peer as the caller gave it (-1: any source)
  uint32_t idle_steps = 0;  // steps since it last moved
  // When the peer's liveness is looked at next (a syscall: not on every step).
  transport::Clock::time_point next_liveness{};

  // "send of 4096 bytes to rank 3 (tag 0, group 0 (ranks [0, 1, 2, 3]), rank 0)", built only
  // for an error: a call's whole cost at 8 bytes is a few microseconds.
  std::string what() const;

  bool started = false;
  // The data message: sent (a send), or received (a receive; one per member for any source).
  transport::RequestPtr data_msg;
  MessageBuffer buffer;
  std::vector<transport::RequestPtr> any;
  std::vector<MessageBuffer> any_buffers;
  bool data_done = false;  // a receive took in its sender's data message
  // Clear to send: received (a send) or sent (a receive).
  transport::RequestPtr cts;
  std::vector<uint8_t> cts_buffer;
  bool cts_sent = false;
  // The one-sided write (a send) or its expect (a receive).
  transport::RequestPtr transfer;
  std::shared_ptr<transport::MemoryRegion> region;
  std::unique_ptr<transport::RemoteRegion> remote;
  std::optional<uint64_t> token;

  // The group abandons its operations before it goes: `g` outlives them.
  int global(int group_rank) const { return g->members[group_rank]; }
};

}  // namespace rdmacoll::engine
