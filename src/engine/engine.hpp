#pragma once
// What every call of a world runs on: the transport, how waits poll, and the point-to-point
// engine. The collectives are not its methods: each is one file in src/engine/collectives/ with
// its entry in its own header (barrier.hpp, broadcast.hpp, ...) and its row in registry.hpp.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "engine/core/call_descriptor.hpp"
#include "engine/core/round_args.hpp"
#include "engine/group_state.hpp"
#include "engine/p2p.hpp"
#include "engine/spin.hpp"
#include "rdmacoll/types.hpp"
#include "transport/transport.hpp"

namespace rdmacoll::engine {

class Engine {
 public:
  Engine(transport::Transport& transport, SpinPolicy spin)
      : transport_(transport), spin_(spin), p2p_(std::make_shared<PointToPoint>(transport, spin)) {}

  // Point-to-point (p2p.hpp): a group's sends and receives start here, in its issue order.
  void send(GroupState& group, const void* data, size_t bytes, int peer, uint32_t tag,
            const std::shared_ptr<WorkState>& work);
  // `peer` -1: from any other member.
  void recv(GroupState& group, void* data, size_t bytes, int peer, uint32_t tag,
            const std::shared_ptr<WorkState>& work);

  // For the collectives' files (collectives/*.cpp): the transport every call runs over, and
  // how its waits poll.
  transport::Transport& transport() { return transport_; }
  SpinPolicy spin() const { return spin_; }

 private:
  transport::Transport& transport_;
  SpinPolicy spin_;
  std::shared_ptr<PointToPoint> p2p_;
};

// The algorithm `forced` names (RDMACOLL_ALGO), checked for a group of p ranks, else the
// selector's pick.
schedule::Algorithm choose_algorithm(int p, size_t bytes_per_rank, int hosts,
                                     const std::optional<schedule::Algorithm>& forced);
// The all-gather algorithm for a group with this layout (host_of[group rank] = host index):
// `forced` when set; else the selector's pick, or the two-level schedule where the simulator
// says it sends fewer bytes off the hosts. `order` and `ring_order` as in GroupState.
schedule::Algorithm choose_algorithm(size_t bytes_per_rank, const std::vector<int>& host_of,
                                     const std::vector<int>& order,
                                     const std::vector<int>& ring_order,
                                     const std::optional<schedule::Algorithm>& forced);

}  // namespace rdmacoll::engine
