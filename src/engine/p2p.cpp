#include "engine/p2p.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "common/log.hpp"
#include "engine/call.hpp"
#include "engine/core/call_descriptor.hpp"
#include "engine/executor.hpp"
#include "engine/leaving.hpp"
#include "engine/p2p_messages.hpp"
#include "engine/p2p_op.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::engine {

using transport::Clock;
using transport::RequestPtr;

namespace {

constexpr auto kDriverTick = std::chrono::milliseconds(1);
constexpr auto kDriverParksAfter = std::chrono::seconds(1);
// A dead peer's pidfd is polled (a syscall) at most this often per stalled operation.
constexpr auto kLivenessEvery = std::chrono::milliseconds(1);
// An operation that does not move looks at its peer and deadline once per this many steps.
constexpr uint32_t kCheckEvery = 64;
// Finished operations kept for reuse (new_op).
constexpr size_t kSpareOps = 64;

[[noreturn]] void raise_invalid(const std::string& m) {
  throw InvalidArgument(m);
}

}  // namespace

std::string PointToPoint::Op::what() const {
  const bool send = kind == Kind::Send;
  return std::string(send ? "send" : "recv") + " of " + std::to_string(bytes) + " bytes " +
         (send ? "to" : "from") +
         (asked < 0 ? std::string(" any rank") : " rank " + std::to_string(global(asked))) +
         " (tag " + std::to_string(tag) + ", " + GroupState::describe(group, g->members) +
         ", rank " + std::to_string(self) + ")";
}

// What a Work's waiter reaches the driver through: it may outlive the PointToPoint, which
// detaches it (waiting for the waiters inside to leave) before it goes.
struct PointToPoint::Helper final : detail::WorkHelper {
  explicit Helper(PointToPoint* p) : owner(p) {}
  void help(const WorkState& work) override {
    PointToPoint* p;
    {
      std::lock_guard lock(mu);
      if (!owner) return;
      p = owner;
      ++inside;
    }
    p->help(work);
    std::lock_guard lock(mu);
    --inside;
    cv.notify_all();
  }
  void detach() {
    std::unique_lock lock(mu);
    owner = nullptr;
    cv.wait(lock, [&] { return inside == 0; });
  }

  std::mutex mu;
  std::condition_variable cv;
  PointToPoint* owner;
  int inside = 0;
};

PointToPoint::PointToPoint(transport::Transport& transport, SpinPolicy spin)
    : t_(transport),
      spin_(spin),
      driver_spin_{std::chrono::microseconds(0), spin.yield},
      helper_(std::make_shared<Helper>(this)) {}

PointToPoint::~PointToPoint() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  helper_->detach();
  if (driver_.joinable()) driver_.join();
  // Groups abandon their operations before the engine goes; whatever is left fails here.
  std::vector<Finished> done;
  {
    std::lock_guard lock(mu_);
    for (auto& op : ops_) {
      const std::string why = peer_gone(*op, op->peer).value_or("the process group was destroyed");
      fail(*op, std::make_exception_ptr(PeerFailure(op->what() + ": " + why)), done);
    }
    ops_.clear();
    for (auto& [key, r] : refusals_)
      forget_refusals(r);
    for (auto& [sent, message] : refusing_)
      t_.cancel(sent);
  }
  for (auto& [work, error] : done)
    work->finish(error);
}

size_t PointToPoint::inline_limit(const Op& op) const {
  // A message the transport moves with one copy goes as a write after a clear-to-send.
  return std::min(eager_limit(2, 1, t_.max_message_bytes(), op.g->tuning.eager_limit),
                  t_.single_copy_bytes() - 1);
}

size_t PointToPoint::outstanding() {
  std::lock_guard lock(mu_);
  return ops_.size();
}

void PointToPoint::send(GroupState& g, const void* data, size_t bytes, int peer, uint32_t tag,
                        std::shared_ptr<WorkState> work) {
  start(Op::Kind::Send, g, const_cast<void*>(data), bytes, peer, tag, std::move(work));
}

void PointToPoint::recv(GroupState& g, void* data, size_t bytes, int peer, uint32_t tag,
                        std::shared_ptr<WorkState> work) {
  start(Op::Kind::Recv, g, data, bytes, peer, tag, std::move(work));
}

void PointToPoint::start(OpKind kind, GroupState& g, void* data, size_t bytes, int peer,
                         uint32_t tag, std::shared_ptr<WorkState> work) {
  if (kind == Op::Kind::Send || peer >= 0) (void)g.members.at(peer);  // -1: any source
  auto op = new_op();
  op->kind = kind;
  op->data = static_cast<uint8_t*>(data);
  op->bytes = bytes;
  op->peer = peer;
  op->tag = tag;
  op->g = &g;
  op->work = std::move(work);
  op->asked = peer;
  add(std::move(op));
}

void PointToPoint::add(std::unique_ptr<Op> op) {
  GroupState& g = *op->g;
  op->group = g.id;
  op->me = g.rank;
  op->self = g.global_rank;
  if (!g.is_member()) raise_invalid(op->what() + ": this rank is not a member of the group");
  if (g.broken)
    raise_invalid(op->what() + ": the group is unusable after an earlier failure: " + *g.broken);
  const Clock::time_point now = Clock::now();
  op->deadline = now + g.timeout.get();
  op->work->set_helper(helper_);
  const bool waiter_helps = op->work->started_by_its_waiter();
  std::vector<Finished> done;
  {
    std::lock_guard lock(mu_);
    Op& o = *op;
    ops_.push_back(std::move(op));
    try {
      step(o, done);
    } catch (...) {
      fail(o, std::current_exception(), done);
    }
    retire_finished();
    if (!ops_.empty() && !driver_.joinable()) driver_ = std::thread([this] { drive(); });
    // A blocking call's own thread helps it next, and wakes the driver when it stops helping;
    // waking it now costs a context switch per call on a host without an idle core. An
    // operation started behind it, which no one may wait for, the ticking driver finds.
    last_add_ = now;
    if (!waiter_helps || parked_) cv_.notify_all();
  }
  // Started from the group's queue, which finishes it once the group is free.
  for (auto& [work, error] : done)
    work->finish_when_started(error);
}

// Operations are reused: a small send or receive allocated its operation, its member list and
// a message buffer each time (a third of an 8-byte exchange's time went to malloc and free).
std::unique_ptr<PointToPoint::Op> PointToPoint::new_op() {
  {
    std::lock_guard lock(mu_);
    if (!spare_.empty()) {
      auto op = std::move(spare_.back());
      spare_.pop_back();
      return op;
    }
  }
  return std::make_unique<Op>();
}

void PointToPoint::retire_finished() {
  for (auto& op : ops_) {
    if (op->work || spare_.size() >= kSpareOps) continue;
    MessageBuffer buffer = std::move(op->buffer);
    buffer.clear();
    *op = Op{};
    op->buffer = std::move(buffer);
    spare_.push_back(std::move(op));
  }
  std::erase_if(ops_, [](const auto& p) { return !p || !p->work; });
}

void PointToPoint::abandon(const GroupState& g, const std::string& why) {
  std::vector<Finished> done;
  {
    std::lock_guard lock(mu_);
    for (auto& op : ops_) {
      if (op->g != &g) continue;
      fail(*op, std::make_exception_ptr(InvalidArgument(op->what() + ": " + why)), done);
    }
    retire_finished();
    std::erase_if(sent_, [&](const auto& kv) { return std::get<0>(kv.first) == g.id; });
    std::erase_if(received_, [&](const auto& kv) { return std::get<0>(kv.first) == g.id; });
    std::erase_if(stash_, [&](const auto& kv) { return std::get<0>(kv.first) == g.id; });
    for (auto it = refusals_.begin(); it != refusals_.end();) {
      if (it->first.first != g.id) {
        ++it;
        continue;
      }
      forget_refusals(it->second);
      it = refusals_.erase(it);
    }
  }
  for (auto& [work, error] : done)
    work->finish(error);
}

// A refusal no later operation raised is logged: the mismatch was already raised on its
// receiver, and this rank's program went on without another call with that peer.
void PointToPoint::forget_refusals(Refusals& r) {
  if (r.recv && r.recv->done()) {
    collect_refusal(r);
  } else if (r.recv && !r.recv->failed()) {
    t_.cancel(r.recv);
  }
  for (const auto& why : r.unreported)
    log::warn("a send of this rank's was refused after it completed: " + why);
}

// The driver: moves every operation on whenever the transport reports something, and blocks in
// the transport (never spins past the spin policy) in between.
void PointToPoint::drive() {
  std::unique_lock lock(mu_);
  Clock::time_point until{};
  while (!stop_) {
    if (ops_.empty() || helping_ > 0) {
      const auto unattended = [&] { return stop_ || (!ops_.empty() && helping_ == 0); };
      if (Clock::now() - last_add_ < kDriverParksAfter) {
        cv_.wait_for(lock, kDriverTick, unattended);
      } else {
        parked_ = true;
        cv_.wait(lock, unattended);
        parked_ = false;
      }
      continue;
    }
    run_ops(lock, driver_spin_, until, [&] { return stop_ || ops_.empty() || helping_ > 0; });
  }
}

void PointToPoint::help(const WorkState& work) {
  // Announced before the lock: a driver whose passes keep moving holds the lock from one to the
  // next, and would otherwise carry the operations (on another thread, fighting this one for
  // the lock and, with no idle core, for the CPU) until they are done.
  helping_.fetch_add(1, std::memory_order_relaxed);
  std::unique_lock lock(mu_);
  Clock::time_point until{};
  // With nothing outstanding, whoever took the work's operation out finishes it.
  run_ops(lock, spin_, until, [&] { return stop_ || ops_.empty() || work.completed(); });
  const bool last = helping_.fetch_sub(1, std::memory_order_relaxed) == 1;
  if (last && !ops_.empty()) cv_.notify_all();  // the driver carries the rest
}

// The executor's wait (engine/executor.hpp) over the operations until `over()`. The lock is
// let go on every polling round: a thread starting an operation needs it.
template <typename Over>
void PointToPoint::run_ops(std::unique_lock<std::mutex>& lock, const SpinPolicy& spin,
                           Clock::time_point& until, Over&& over) {
  bool checked_moved = false;
  run_wait(
      spin, until,
      [&] {
        if (over()) return Poll::Done;
        return pass(lock, false) ? Poll::Moved : Poll::Idle;
      },
      [&](int) {
        lock.unlock();
        lock.lock();
      },
      // Every operation's peer and deadline, before blocking; that pass may end the wait.
      [&] { checked_moved = pass(lock, true); },
      [&] {
        if (checked_moved) return;
        // Until the first deadline (a timeout to raise), or 100 ms at most.
        Clock::time_point next = Clock::now() + std::chrono::milliseconds(100);
        for (const auto& op : ops_)
          next = std::min(next, op->deadline);
        lock.unlock();
        t_.wait_for_event(next);
        lock.lock();
      });
}

bool PointToPoint::pass(std::unique_lock<std::mutex>& lock, bool check) {
  bool moved = false;
  try {
    moved = t_.progress();
  } catch (const std::exception&) {
    // A transport failure shows in the requests it failed; each operation reports its own.
  }
  std::vector<Finished> done;
  for (auto& op : ops_) {
    if (!op->work) continue;
    try {
      moved = step(*op, done, check) || moved;
    } catch (...) {
      fail(*op, std::current_exception(), done);
      moved = true;
    }
  }
  retire_finished();
  std::erase_if(refusing_, [](const auto& r) { return r.first->done() || r.first->failed(); });
  if (!done.empty()) {
    lock.unlock();
    for (auto& [work, error] : done)
      work->finish(error);
    done.clear();
    lock.lock();
  }
  return moved;
}

void PointToPoint::check_alive(Op& op) {
  if (process_leaving().load(std::memory_order_relaxed)) {
    throw PeerFailure(op.what() + ": this process is leaving (abort_process_group)");
  }
  const auto now = Clock::now();
  if (now >= op.next_liveness) {
    op.next_liveness = now + kLivenessEvery;
    if (auto gone = peer_gone(op, op.peer)) throw PeerFailure(op.what() + ": " + *gone);
  }
  if (now >= op.deadline) {
    const bool waiting_peer = op.kind == Op::Kind::Send ? !op.cts && !op.transfer : !op.data_done;
    throw Timeout(
        op.what() + ": timed out after " + std::to_string(op.g->timeout.count()) + " ms" +
        (waiting_peer ? (op.kind == Op::Kind::Send ? "; the receiver has not posted a matching recv"
                                                   : "; no matching send has come")
                      : ""));
  }
}

std::optional<std::string> PointToPoint::peer_gone(const Op& op, int peer) {
  if (peer < 0 || peer == op.me) return std::nullopt;
  const int rank = op.global(peer);
  auto why = t_.peer_failure(rank);
  if (!why) return std::nullopt;
  return "rank " + std::to_string(rank) + " is gone: " + *why;
}

void PointToPoint::raise_failed(const Op& op, int peer, const transport::Request& request) {
  throw PeerFailure(op.what() + ": " + peer_gone(op, peer).value_or(request.error()));
}

bool PointToPoint::step(Op& op, std::vector<Finished>& done, bool check) {
  const bool moved = op.kind == Op::Kind::Send ? step_send(op) : step_recv(op);
  const bool finished =
      op.kind == Op::Kind::Send
          ? op.data_msg && op.data_msg->done() && (!op.cts || (op.transfer && op.transfer->done()))
          : op.data_done && (!op.cts_sent || (op.cts->done() && op.transfer->done()));
  if (finished) {
    succeed(op, done);
    return true;
  }
  if (moved) {
    op.idle_steps = 0;
    return true;
  }
  // Checked when the wait stalls, and every kCheckEvery idle steps of its own (others may keep
  // moving): a clock read per step was a tenth of an 8-byte exchange.
  if (check || ++op.idle_steps % kCheckEvery == 0) check_alive(op);
  return false;
}

void PointToPoint::succeed(Op& op, std::vector<Finished>& done) {
  if (op.token) t_.release_token(*op.token, false);
  done.emplace_back(std::move(op.work), nullptr);
}

void PointToPoint::fail(Op& op, std::exception_ptr error, std::vector<Finished>& done) {
  if (!op.work) return;
  for (RequestPtr* r : {&op.data_msg, &op.cts, &op.transfer}) {
    if (*r && !(*r)->done()) t_.cancel(*r);
  }
  for (auto& r : op.any) {
    if (r && !r->done()) t_.cancel(r);
  }
  // Fenced: a write still on its way lands nowhere; the buffer's registration is not reused.
  if (op.token) t_.release_token(*op.token, true);
  if (op.region && op.kind == Op::Kind::Recv) t_.forget_registration(*op.region);
  done.emplace_back(std::move(op.work), error);
}

}  // namespace rdmacoll::engine
