#pragma once
// The control plane (control_plane.cpp): a call's descriptors, all-gathered on a service
// schedule over control messages, or through the group's mailbox on one host.

#include <functional>
#include <vector>

#include "engine/call.hpp"
#include "engine/control/exchange_scratch.hpp"
#include "engine/core/call_descriptor.hpp"
#include "engine/group_state.hpp"
#include "transport/transport.hpp"

namespace rdmacoll::engine {

// Which descriptors a call needs: a ring all-gather writes only to its ring successor.
enum class DescriptorsNeeded { All, Successor };

// Sends our descriptor to every other member and collects theirs (index = group rank): through
// the mailbox once the group has it, else as messages on the group's service schedule (which
// also carry the mailbox's set-up). With DescriptorsNeeded::Successor, where the group's
// descriptors take Bruck's rounds in ring order and its mailbox is off (across hosts), only the
// first round runs: one message to the ring predecessor, one from the successor
// (scratch.seen_only says so; check_descriptors then checks that pair). The result lives in
// the group's scratch: valid until its next call.
const std::vector<CallDescriptor>& exchange_descriptors(
    Call& call, const CallDescriptor& mine, DescriptorsNeeded needed = DescriptorsNeeded::All);

// Whether descriptors reach every member in one hop (the mailbox's slots, or the direct round
// of messages), where inline data in pieces (CallDescriptor::inline_piece) takes each member
// only its own piece. Descriptor rounds (recursive doubling, Bruck) relay whole descriptors.
// The same on every member of a call.
bool descriptors_go_direct(const transport::Transport& t, GroupState& g);

// The checks a rooted call's root runs on every descriptor before anyone writes: it throws
// (InvalidArgument through reject(), or TransportError) to refuse the call.
using Verdict = std::function<void(const std::vector<CallDescriptor>&)>;

// gather, scatter and reduce, where only the root needs every descriptor: where descriptors
// travel as messages in log-p rounds (across hosts, or without the mailbox), they take the
// rooted rounds (schedule/service.hpp: a binomial gather to `root`, then the root's descriptor
// back down), the root runs `verdict` on them all, and a refusal travels down in place of its
// descriptor, so every member raises the root's words (a member that rejected its own arguments
// raises its own). Ring neighbours check each other first, so ranks that name different roots
// (different trees) raise rather than wait (rooted_exchange.cpp). Elsewhere
// the descriptors are all-gathered and every rank runs `verdict`.
// Either way a rank that rejected its arguments raises that first, and on return the entries of
// `root` and this rank are valid (every entry on the root).
const std::vector<CallDescriptor>& exchange_rooted(Call& call, const CallDescriptor& mine, int root,
                                                   const Verdict& verdict);

}  // namespace rdmacoll::engine
