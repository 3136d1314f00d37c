#pragma once
// The eager channel as one object: control messages written into the peer's ring of slots, the
// credits for them, the receive credits and sleep epochs written into the peers' blocks, and the
// rings that wake a sleeping peer (eager_ring.hpp has the protocol and the block's layout). It
// owns what the ring peers share (which peers have rings, our sleep epoch); each peer's block and
// counts are the peer's (Peer::Eager). Its writes go through the transport (EagerChannel::Owner),
// on the control QP's urgent queue.

#include <infiniband/verbs.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "transport/verbs/eager_ring.hpp"
#include "transport/verbs/peer.hpp"

namespace rdmacoll::transport::verbs_impl {

class EagerChannel {
 public:
  // What the channel asks of the transport that wires it.
  class Owner {
   public:
    virtual ~Owner() = default;
    // Posts a write on `peer`'s control QP that no caller waits for (`fill` sets its opcode and
    // what it writes); when it writes one of our words, `word` says which, and the channel
    // hears of its landing (word_landed).
    virtual void post_own_write(int peer, std::function<void(Staged&)> fill,
                                std::optional<Word> word) = 0;
    // Takes a credit for a receive-taking work request to `peer` (a ring); false without one.
    virtual bool take_receive_credit(int peer) = 0;
    // A message taken from `peer`'s ring.
    virtual void on_message(int peer, uint64_t tag, std::span<const uint8_t> payload) = 0;
    // `peer` wrote garbage into its ring.
    virtual void ring_broken(int peer, std::string why) = 0;
  };

  // `slots`: RDMACOLL_IB_EAGER_SLOTS (0: a block of the credit and epoch lines alone).
  EagerChannel(Owner& owner, std::vector<Peer>& peers, Transport::Counters& counters, int slots);
  EagerChannel(const EagerChannel&) = delete;
  EagerChannel& operator=(const EagerChannel&) = delete;

  int slots() const { return slots_; }

  // Our block for `peer`, registered on `pd` for its writes: every connected peer has one (its
  // receive credits come through it, with or without slots).
  void make_block(int peer, ibv_pd* pd);
  // `peer` published its block (at `ring`, `rkey`, with `their_slots`): messages to it go into
  // its slots when both sides have some.
  void joined(int peer, uint64_t ring, uint32_t rkey, int their_slots);
  bool uses_slots(int peer) const { return peers_[peer].eager.their_slots > 0; }

  // Whether the peer has given back the credit for the slot the next message would take.
  bool slot_free(int peer);
  // The next message to `peer`, framed for its slot with the credits it carries for us.
  Bytes frame(int peer, uint64_t tag, std::span<const uint8_t> payload) const;
  // Aims `st` at the peer's next slot and takes it: the message framed last goes there.
  void take_slot(int peer, Staged& st);

  // Takes the messages that have landed whole in each ring peer's slots, in order; true if any.
  bool poll();
  // Before a sleep: false when the ring peers must first hear of it (announce_sleep).
  bool may_sleep() const { return ring_peers_.empty() || announced_; }
  // A new sleep epoch into every ring peer's block.
  void announce_sleep();
  // A peer rang for our epoch: it will not ring again for it, so the next sleep announces anew.
  void rung() { announced_ = false; }
  // The last sleep ended by poll()'s timeout: a message found after it counts as late.
  void slept(bool to_timeout) { slept_to_timeout_ = to_timeout; }

  // Sets our `word` line for `peer` to `value` and writes it into the peer's block: now, or
  // once the write of it in flight has landed (WordWriter).
  void write_word(int peer, Word word, uint64_t value);
  // A write of `word` has landed: the next one if the word changed meanwhile, and a ring if the
  // peer sleeps (a credit it may wait for is there now).
  void word_landed(int peer, Word word);
  // A message written into `peer`'s slots has landed: ring the peer if it announced a sleep
  // we have not rung for (a zero-byte write whose immediate completes there and wakes it).
  void wake_if_asleep(int peer);

 private:
  bool poll(int peer);
  void post_word(int peer, Word word);

  Owner& owner_;
  std::vector<Peer>& peers_;
  Transport::Counters& counters_;
  int slots_;
  uint64_t credit_every_;        // messages taken per credit write
  std::vector<int> ring_peers_;  // peers whose messages come by eager slots
  uint64_t epoch_ = 0;           // our last sleep epoch announced to the ring peers
  bool announced_ = false;       // and no peer has rung for it since
  bool slept_to_timeout_ = false;
};

}  // namespace rdmacoll::transport::verbs_impl
