#pragma once
// The two-sided counterpart of WriteSteps (write_steps.hpp): a call's messages, for what has no
// one-sided path (the direct descriptor round, all_to_all's pair rounds, its Bruck steps, its
// pieces when a member exposed no output). Receives are posted before the sends, so a message
// finds its buffer; every request goes into the call's lists, so its waits watch the peers and
// the call cancels whatever a failure leaves; each message is tagged with this group's call and
// an index (whose message it is), and an arrival's length is checked against what its sender
// must have sent before anything reads it.

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/call.hpp"
#include "engine/core/call_descriptor.hpp"
#include "engine/pending.hpp"
#include "rdmacoll/errors.hpp"
#include "transport/transport.hpp"

namespace rdmacoll::engine {

class MessageSteps {
 public:
  // Control messages are descriptors to the call's errors; data messages carry the chunk of
  // their index (a failure names "chunks r..r").
  enum class Carries { Control, Data };

  MessageSteps(Call& call, TagKind tag, Carries carries)
      : call_(call),
        tag_(tag),
        carries_(carries),
        recv_base_(call.recvs().size()),
        send_base_(call.sends().size()) {}
  MessageSteps(const MessageSteps&) = delete;
  MessageSteps& operator=(const MessageSteps&) = delete;

  // Posts a receive of at most `capacity` bytes from group rank `peer` into `into`: message
  // `index` of this call. Returns its number among this object's arrivals.
  size_t expect(int peer, uint32_t index, void* into, size_t capacity) {
    transport::Transport& t = call_.transport();
    const uint64_t tag = make_tag(tag_, call_.group().id, call_.seq(), index);
    call_.recvs().push_back(
        {call_.guarded([&] { return t.recv(call_.global(peer), tag, into, capacity); }), peer,
         arrival_kind(), first(index), count()});
    return arrivals_++;
  }

  // Sends [data, +bytes) to group rank `peer` as message `index`. A send the transport finished
  // at once (it copied a small message) is not kept; the rest are, so that a rank never leaves
  // the library with a message only its own progress would send.
  void send(int peer, uint32_t index, const void* data, size_t bytes) {
    transport::Transport& t = call_.transport();
    const uint64_t tag = make_tag(tag_, call_.group().id, call_.seq(), index);
    transport::RequestPtr req =
        call_.guarded([&] { return t.send(call_.global(peer), tag, data, bytes); });
    if (!req->done()) {
      call_.sends().push_back({std::move(req), peer, send_kind(), first(index), count()});
    }
  }

  // Our receives are the call's next ones in the order posted: post no other receive between
  // two expect()s (a write plan's arrivals go before the first or after the last).
  size_t arrivals() const { return arrivals_; }
  const Pending& arrival(size_t i) const { return call_.recvs()[recv_base_ + i]; }

  // Waits for arrival i; returns its length.
  size_t wait(size_t i) {
    call_.wait(call_.recvs(), recv_base_ + i, recv_base_ + i + 1);
    return arrival(i).req->length();
  }
  // Waits for arrival i and checks that it is `bytes` long; `what` names the messages in the
  // error ("the all_to_all's Bruck steps": "... in step 2 of the all_to_all's Bruck steps").
  void wait_exactly(size_t i, size_t bytes, const char* what) {
    if (const size_t got = wait(i); got != bytes) {
      throw TransportError(call_.where() + ": rank " +
                           std::to_string(call_.global(arrival(i).peer)) + " sent " +
                           std::to_string(got) + " bytes in message " + std::to_string(i) + " of " +
                           what + ", expected " + std::to_string(bytes));
    }
  }
  // Waits for every arrival, then every send.
  void wait_all() {
    call_.wait(call_.recvs(), recv_base_, recv_base_ + arrivals_);
    call_.wait(call_.sends(), send_base_, call_.sends().size());
  }
  // Forgets the last arrival (complete): a leftover of an earlier call, dropped.
  void forget_last_arrival() {
    call_.recvs().pop_back();
    --arrivals_;
  }
  // Forgets every request this object posted (all complete): the call's lists are as they were
  // before it, for the call's next round.
  void release() {
    call_.recvs().resize(recv_base_);
    call_.sends().resize(send_base_);
  }

 private:
  Pending::Kind arrival_kind() const {
    return carries_ == Carries::Data ? Pending::Kind::Arrival : Pending::Kind::Descriptor;
  }
  Pending::Kind send_kind() const {
    return carries_ == Carries::Data ? Pending::Kind::Write : Pending::Kind::Descriptor;
  }
  int first(uint32_t index) const {
    return carries_ == Carries::Data ? static_cast<int>(index) : 0;
  }
  int count() const { return carries_ == Carries::Data ? 1 : 0; }

  Call& call_;
  TagKind tag_;
  Carries carries_;
  size_t recv_base_;
  size_t send_base_;
  size_t arrivals_ = 0;
};

}  // namespace rdmacoll::engine
