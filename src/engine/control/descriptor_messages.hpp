#pragma once
// The control plane's messages (descriptor_messages.cpp), shared by its two exchanges: the
// all-gather of descriptors (control_plane.cpp) and the rooted rounds (rooted_exchange.cpp).
// Parsing and checking what peers sent, the service schedules a group runs, and rounds of
// descriptors as tagged messages. Internal to src/engine.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "engine/call.hpp"
#include "engine/control/exchange_scratch.hpp"
#include "engine/core/call_descriptor.hpp"
#include "engine/group_state.hpp"
#include "schedule/service.hpp"
#include "transport/transport.hpp"

namespace rdmacoll::engine {

// Parses and checks one peer's descriptor of this call; views `data`.
CallDescriptor parse_one(Call& call, int peer, const uint8_t* data, size_t length);

// Parses and checks every peer's descriptor of this call (index = group rank; ours is `mine`),
// but `parsed`'s, already in the scratch (the ring step's look at the successor), if >= 0.
// The result lives in the group's scratch and views the buffers the messages arrived in (receive
// buffers or mailbox): valid until the group's next call.
const std::vector<CallDescriptor>& parse_descriptors(Call& call, const CallDescriptor& mine,
                                                     const uint8_t* const* messages,
                                                     const size_t* lengths, int parsed = -1);

// The service schedule of a group's descriptor rounds (schedule/service.hpp), made once.
const schedule::Schedule& service_schedule(GroupState& g, schedule::ServiceRounds rounds);

// A round larger than a control message goes as several (engine/control/descriptor_round.hpp). Tags
// must be unique per receiver and call (UCX matches tags across senders): message j of sender
// r carries index r + j p, below 2^24 while p times the largest round's descriptors (the most
// messages a round can take) is.
constexpr uint64_t kTagIndexLimit = uint64_t{1} << 24;

inline uint32_t piece_index(int sender, uint32_t piece, int p) {
  return static_cast<uint32_t>(sender) + piece * static_cast<uint32_t>(p);
}

// The ring check before the rooted rounds (exchange_rooted) takes the top indices, above every
// piece's while p (largest round + 1) is below 2^24: a peer's ring message and its messages in
// the tree must not meet the same receive. (One descriptor is one message: descriptor_rounds
// runs rounds only where it fits one.)
inline uint32_t ring_index(int sender, uint32_t piece, int p) {
  return static_cast<uint32_t>(kTagIndexLimit - 1) - piece_index(sender, piece, p);
}

// The tag indices a walk's messages take.
enum class RoundTags { Pieces, RingCheck };

// How a call's descriptors travel when no mailbox carries them.
enum class Rounds { Direct, Bruck, RecursiveDoubling };

// How the descriptors travel when no mailbox carries them (descriptor_messages.cpp says why).
// Every rank decides alike (group size, hosts, the slots' agreed state, the message limit).
Rounds descriptor_rounds(const transport::Transport& t, GroupState& g, size_t capacity);

// The chunks (group ranks) a step moves to or from `peer`, in the order both sides pack them.
std::vector<int>& chunks_with(const std::vector<schedule::Transfer>& transfers, int peer,
                              std::vector<int>& out);

// Sends the descriptors of group ranks `chunks` (in scratch.incoming) to `to`, as one message
// or several (engine/control/descriptor_round.hpp); sends not yet done join call.sends().
void send_round(Call& call, int to, const std::vector<int>& chunks, std::vector<uint8_t>& out,
                RoundTags tags = RoundTags::Pieces);

// Receives the descriptors of group ranks `chunks` from `from` into the scratch; a message that
// is not one the sender could have packed fails the call.
void receive_round(Call& call, int from, const std::vector<int>& chunks, size_t capacity,
                   RoundTags tags = RoundTags::Pieces);

// What a walk does between a round's send and its receive (`sent`), and after the receive
// (`received`; false ends the walk there): the ring step's checks. Either may throw.
struct RoundHooks {
  std::function<void(size_t round)> sent;
  std::function<bool(size_t round)> received;
};

// The one walker of descriptor rounds (the all-gather's Bruck or recursive-doubling rounds, the
// ring check, the rooted rounds): runs steps [first, end) of `sched`, each sending to at most
// one peer and receiving from at most one, moving the serialized descriptors in
// scratch.incoming. Sends not yet done stay in call.sends().
void run_rounds(Call& call, const schedule::Schedule& sched, size_t first, size_t end,
                size_t capacity, RoundTags tags = RoundTags::Pieces, const RoundHooks& hooks = {});

// The ring step: Bruck's first round in the group's ring order, our descriptor to the ring
// predecessor and the successor's to us. Where ranks may part after it (a ring all-gather needs
// only the successor's descriptor) or wait in different trees (rooted calls naming different
// roots), every rank checks its successor's descriptor against its own; around the ring every
// pair agreeing is every rank agreeing, and a disagreement raises beside it and spreads along
// the ring (Call::watch_neighbours) to the ranks still waiting.
struct RingStep {
  int pred = -1;
  int succ = -1;
};
// Watches the neighbours (call.watch_neighbours) and returns them.
RingStep watch_ring(Call& call);
// The ring step's checks as a walk's hooks on its round 0. After the send, a rank that rejected
// its arguments leaves, once its predecessor has them, before its own wait, where a neighbour's
// report of the same mistake could come first: it raises its own words. After the receive, the
// successor's descriptor is parsed into scratch.descriptors and checked against ours; then
// `after_check()` says whether the walk goes on. The hooks refer to `call` and `mine`.
RoundHooks ring_step_hooks(Call& call, const CallDescriptor& mine, int succ,
                           std::function<bool()> after_check);

// Readies the scratch for a walk of `sched`: the incoming descriptors empty but ours (already
// serialized into scratch.send), the round receive buffer sized for its largest round.
void ready_rounds(const transport::Transport& t, GroupState& g, const schedule::Schedule& sched,
                  size_t capacity);

// Our descriptor as every member sends it: the group it means stamped in.
CallDescriptor stamped(const GroupState& g, const CallDescriptor& in);

// Sizes the receive buffers for the largest descriptor any member may send (once per group);
// returns that capacity.
size_t ready_receive_buffers(const transport::Transport& t, GroupState& g);

}  // namespace rdmacoll::engine
