#pragma once
// Point-to-point: send, recv, and recv from any source, matched by (sender, tag) in issue order
// as MPI matches them. Only the two ranks talk: no descriptor exchange of the group. The
// messages are p2p_messages.hpp's: small sends travel inline; larger ones are written one-sided
// into the receiver's buffer once its clear-to-send has come.
//
// Each world's engine has one PointToPoint. A group posts its sends and receives in issue order
// (from its queue) and goes on; a driver thread of its own carries them to the end, reacting to
// messages whenever they come, so a rank blocked in a collective (or in another group's call)
// never holds up a peer's transfer: isend then barrier on one rank, recv then barrier on the
// other, completes. The driver blocks in the transport between events; it runs only while
// operations are outstanding and no waiter helps them. Operations a waiter starts are not
// announced to it; it finds any the waiter leaves behind within a tick (1 ms).

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/group_state.hpp"
#include "engine/spin.hpp"
#include "transport/transport.hpp"

namespace rdmacoll::engine {

class PointToPoint {
 public:
  PointToPoint(transport::Transport& transport, SpinPolicy spin);
  ~PointToPoint();
  PointToPoint(const PointToPoint&) = delete;
  PointToPoint& operator=(const PointToPoint&) = delete;

  // Starts a send of data[0, bytes) to group rank `peer` under `tag`; `work` finishes when the
  // bytes have left (or the send failed). The data must stay untouched until then.
  void send(GroupState& g, const void* data, size_t bytes, int peer, uint32_t tag,
            std::shared_ptr<WorkState> work);
  // Starts a receive into data[0, bytes) from group rank `peer` (-1: any other member) under
  // `tag`; the sender's length must be `bytes`. `work` finishes when the bytes are in place;
  // its source is then the sender's group rank.
  void recv(GroupState& g, void* data, size_t bytes, int peer, uint32_t tag,
            std::shared_ptr<WorkState> work);
  // Fails the operations of group `g` still outstanding (it is going away): nothing of theirs
  // is written afterwards.
  void abandon(const GroupState& g, const std::string& why);

  // Sends and receives in flight (tests).
  size_t outstanding();

 private:
  enum class OpKind { Send, Recv };
  struct Op;
  using Finished = std::pair<std::shared_ptr<WorkState>, std::exception_ptr>;
  using Channel = std::tuple<uint32_t, int, uint32_t>;  // group, peer (group rank), tag

  struct Helper;

  // send() and recv(): an operation of `kind`, started in add().
  void start(OpKind kind, GroupState& g, void* data, size_t bytes, int peer, uint32_t tag,
             std::shared_ptr<WorkState> work);
  void add(std::unique_ptr<Op> op);
  void drive();
  // A waiter's thread carries the operations on until `work` has completed (the driver stands
  // aside meanwhile): a thread hand-off per message costs more than a small message.
  void help(const WorkState& work);
  // One pass over the operations (progress, a step each, finishing those done with the lock
  // released); true if anything moved. `check`: every operation looks at its peer and deadline.
  bool pass(std::unique_lock<std::mutex>& lock, bool check);
  // Moves the operations on (the executor's wait) until `over()` holds.
  template <typename Over>
  void run_ops(std::unique_lock<std::mutex>& lock, const SpinPolicy& spin,
               transport::Clock::time_point& until, Over&& over);
  // Moves `op` on as far as it can go, into `done` when it has finished; true if anything
  // changed. Throws to fail it.
  bool step(Op& op, std::vector<Finished>& done, bool check = false);
  std::unique_ptr<Op> new_op();
  // Drops the finished operations from ops_, keeping some for reuse.
  void retire_finished();
  bool step_send(Op& op);
  bool step_recv(Op& op);
  void start_recv(Op& op);
  void post_data_receive(Op& op, int peer);
  void send_clear_to_send(Op& op, int peer, const std::string& refusal);
  bool take_data(Op& op, int peer, std::span<const uint8_t> message);
  // Refusals of this rank's inline sends (p2p_messages.hpp), per group and peer: one receive
  // kept posted once it sent that peer something inline (watch_refusals); the next send to that
  // peer does not start while one is unreported: it raises it (raise_refused).
  struct Refusals;
  void watch_refusals(const Op& op, Refusals& r);
  // Moves the refusal `r.recv` took in to `r.unreported`; false if it was malformed.
  bool collect_refusal(Refusals& r);
  void raise_refused(const Op& op, Refusals& r);
  void send_refusal(const Op& op, int peer, uint64_t seq, const std::string& why);
  void forget_refusals(Refusals& r);
  void check_alive(Op& op);
  // "rank N is gone: why" when the transport knows group rank `peer` of `op` failed.
  std::optional<std::string> peer_gone(const Op& op, int peer);
  // A request of `op` with group rank `peer` failed: the process that exited where the
  // transport knows it, else the request's own words.
  [[noreturn]] void raise_failed(const Op& op, int peer, const transport::Request& request);
  void fail(Op& op, std::exception_ptr error, std::vector<Finished>& done);
  void succeed(Op& op, std::vector<Finished>& done);
  size_t inline_limit(const Op& op) const;

  transport::Transport& t_;
  SpinPolicy spin_;  // a waiter's, as a call's waits
  // The driver's: 64 rounds, then it blocks. It runs beside the rank's own thread, which may be
  // polling in a collective; polling longer would take that thread's core.
  SpinPolicy driver_spin_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Op>> ops_;     // in issue order
  std::vector<std::unique_ptr<Op>> spare_;  // finished, for reuse (new_op)
  std::map<Channel, uint64_t> sent_;        // sends issued per channel
  std::map<Channel, uint64_t> received_;    // receives matched per channel
  // Data messages a receive from any source took in but did not use (two came at once): the
  // next receive from that peer starts with them.
  std::map<Channel, std::deque<std::vector<uint8_t>>> stash_;
  struct Refusals {
    transport::RequestPtr recv;  // posted for the next one; failed once the peer is gone
    std::vector<uint8_t> buffer;
    std::deque<std::string> unreported;
  };
  std::map<std::pair<uint32_t, int>, Refusals> refusals_;  // group, peer (group rank)
  // Refusals this rank sent whose sends have not completed (their buffers).
  std::vector<std::pair<transport::RequestPtr, std::vector<uint8_t>>> refusing_;
  std::thread driver_;
  bool stop_ = false;
  std::atomic<int> helping_{0};  // waiters in help(): the driver stands aside
  // The driver sleeps until told only after a second without operations (parked_); before
  // that it looks every kDriverTick, so an operation a waiter started and left (its own was
  // done first) moves on without a wake-up per call (one costs more than a small message).
  bool parked_ = false;
  transport::Clock::time_point last_add_{};
  std::shared_ptr<Helper> helper_;
};

}  // namespace rdmacoll::engine
