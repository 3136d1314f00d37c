#include "engine/p2p.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "engine/call.hpp"
#include "engine/call_descriptor.hpp"
#include "engine/leaving.hpp"
#include "engine/p2p_messages.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::engine {

using transport::Clock;
using transport::RequestPtr;

namespace {

constexpr auto kDriverTick = std::chrono::milliseconds(1);
constexpr auto kDriverParksAfter = std::chrono::seconds(1);
// A dead peer's pidfd is polled (a syscall) at most this often per stalled operation.
constexpr auto kLivenessEvery = std::chrono::milliseconds(1);

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

}  // namespace

struct PointToPoint::Op {
  enum class Kind { Send, Recv } kind = Kind::Send;
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
  Clock::time_point deadline;
  int asked = -1;  // the peer as the caller gave it (-1: any source)
  std::vector<int> members;
  // When the peer's liveness is looked at next (a syscall: not on every step).
  Clock::time_point next_liveness{};

  // "send of 4096 bytes to rank 3 (tag 0, group 0 (ranks [0, 1, 2, 3]), rank 0)", built only
  // for an error: a call's whole cost at 8 bytes is a few microseconds.
  std::string what() const;

  bool started = false;
  // The data message: sent (a send), or received (a receive; one per member for any source).
  RequestPtr data_msg;
  MessageBuffer buffer;
  std::vector<RequestPtr> any;
  std::vector<MessageBuffer> any_buffers;
  bool data_done = false;  // a receive took in its sender's data message
  // Clear to send: received (a send) or sent (a receive).
  RequestPtr cts;
  std::vector<uint8_t> cts_buffer;
  bool cts_sent = false;
  // The one-sided write (a send) or its expect (a receive).
  RequestPtr transfer;
  std::shared_ptr<transport::MemoryRegion> region;
  std::unique_ptr<transport::RemoteRegion> remote;
  std::optional<uint64_t> token;

  int global(int group_rank) const { return members[group_rank]; }
};

namespace {

[[noreturn]] void raise_invalid(const std::string& m) {
  throw InvalidArgument(m);
}

}  // namespace

std::string PointToPoint::Op::what() const {
  const bool send = kind == Kind::Send;
  return std::string(send ? "send" : "recv") + " of " + std::to_string(bytes) + " bytes " +
         (send ? "to" : "from") +
         (asked < 0 ? std::string(" any rank") : " rank " + std::to_string(global(asked))) +
         " (tag " + std::to_string(tag) + ", " + GroupState::describe(group, members) + ", rank " +
         std::to_string(self) + ")";
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
      fail(*op,
           std::make_exception_ptr(PeerFailure(op->what() + ": the process group was destroyed")),
           done);
    }
    ops_.clear();
  }
  for (auto& [work, error] : done)
    work->finish(error);
}

size_t PointToPoint::inline_limit() const {
  return eager_limit(2, 1, t_.max_message_bytes());
}

size_t PointToPoint::outstanding() {
  std::lock_guard lock(mu_);
  return ops_.size();
}

void PointToPoint::send(GroupState& g, const void* data, size_t bytes, int peer, uint32_t tag,
                        std::shared_ptr<WorkState> work) {
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::Send;
  op->data = static_cast<uint8_t*>(const_cast<void*>(data));
  op->bytes = bytes;
  op->peer = peer;
  op->tag = tag;
  op->g = &g;
  op->work = std::move(work);
  op->asked = peer;
  (void)g.members.at(peer);
  add(std::move(op));
}

void PointToPoint::recv(GroupState& g, void* data, size_t bytes, int peer, uint32_t tag,
                        std::shared_ptr<WorkState> work) {
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::Recv;
  op->data = static_cast<uint8_t*>(data);
  op->bytes = bytes;
  op->peer = peer;
  op->tag = tag;
  op->g = &g;
  op->work = std::move(work);
  op->asked = peer;
  if (peer >= 0) (void)g.members.at(peer);
  add(std::move(op));
}

void PointToPoint::add(std::unique_ptr<Op> op) {
  GroupState& g = *op->g;
  op->group = g.id;
  op->me = g.rank;
  op->self = g.global_rank;
  op->members = g.members;
  if (!g.is_member()) raise_invalid(op->what() + ": this rank is not a member of the group");
  if (g.broken)
    raise_invalid(op->what() + ": the group is unusable after an earlier failure: " + *g.broken);
  const Clock::time_point now = Clock::now();
  op->deadline = now + g.timeout;
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
    std::erase_if(ops_, [](const auto& p) { return !p->work; });
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

void PointToPoint::abandon(const GroupState& g, const std::string& why) {
  std::vector<Finished> done;
  {
    std::lock_guard lock(mu_);
    for (auto& op : ops_) {
      if (op->g != &g) continue;
      fail(*op, std::make_exception_ptr(InvalidArgument(op->what() + ": " + why)), done);
    }
    std::erase_if(ops_, [](const auto& p) { return !p->work; });
    std::erase_if(sent_, [&](const auto& kv) { return std::get<0>(kv.first) == g.id; });
    std::erase_if(received_, [&](const auto& kv) { return std::get<0>(kv.first) == g.id; });
    std::erase_if(stash_, [&](const auto& kv) { return std::get<0>(kv.first) == g.id; });
  }
  for (auto& [work, error] : done)
    work->finish(error);
}

// The driver: moves every operation on whenever the transport reports something, and blocks in
// the transport (never spins past the spin policy) in between.
void PointToPoint::drive() {
  std::unique_lock lock(mu_);
  int idle = 0;
  Clock::time_point until{};
  while (!stop_) {
    if (ops_.empty() || helping_ > 0) {
      idle = 0;
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
    Clock::time_point next;
    if (pass(lock, next)) {
      idle = 0;
      continue;
    }
    idle_wait(lock, driver_spin_, idle, until, next);
  }
}

void PointToPoint::help(const WorkState& work) {
  std::unique_lock lock(mu_);
  ++helping_;
  int idle = 0;
  Clock::time_point until{};
  // With nothing outstanding, whoever took the work's operation out finishes it.
  while (!stop_ && !ops_.empty() && !work.completed()) {
    Clock::time_point next;
    if (pass(lock, next)) {
      idle = 0;
      continue;
    }
    idle_wait(lock, spin_, idle, until, next);
  }
  --helping_;
  if (helping_ == 0 && !ops_.empty()) cv_.notify_all();  // the driver carries the rest
}

bool PointToPoint::pass(std::unique_lock<std::mutex>& lock, Clock::time_point& next) {
  bool moved = false;
  try {
    moved = t_.progress();
  } catch (const std::exception&) {
    // A transport failure shows in the requests it failed; each operation reports its own.
  }
  std::vector<Finished> done;
  next = Clock::now() + std::chrono::milliseconds(100);
  for (auto& op : ops_) {
    if (!op->work) continue;
    try {
      moved = step(*op, done) || moved;
    } catch (...) {
      fail(*op, std::current_exception(), done);
      moved = true;
    }
    if (op->work) next = std::min(next, op->deadline);
  }
  std::erase_if(ops_, [](const auto& p) { return !p->work; });
  if (!done.empty()) {
    lock.unlock();
    for (auto& [work, error] : done)
      work->finish(error);
    done.clear();
    lock.lock();
  }
  return moved;
}

void PointToPoint::idle_wait(std::unique_lock<std::mutex>& lock, const SpinPolicy& spin, int& idle,
                             Clock::time_point& until, Clock::time_point next) {
  // The lock is let go on each round: a thread starting an operation needs it.
  const bool polling = keep_spinning(spin, idle, until);
  lock.unlock();
  if (!polling) t_.wait_for_event(next);
  lock.lock();
}

void PointToPoint::check_alive(Op& op) {
  if (process_leaving().load(std::memory_order_relaxed)) {
    throw PeerFailure(op.what() + ": this process is leaving (abort_process_group)");
  }
  const auto now = Clock::now();
  if (op.peer >= 0 && op.peer != op.me && now >= op.next_liveness) {
    op.next_liveness = now + kLivenessEvery;
    if (auto why = t_.peer_failure(op.global(op.peer))) {
      throw PeerFailure(op.what() + ": rank " + std::to_string(op.global(op.peer)) +
                        " is gone: " + *why);
    }
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

bool PointToPoint::step(Op& op, std::vector<Finished>& done) {
  const bool moved = op.kind == Op::Kind::Send ? step_send(op) : step_recv(op);
  const bool finished =
      op.kind == Op::Kind::Send
          ? op.data_msg && op.data_msg->done() && (!op.cts || (op.transfer && op.transfer->done()))
          : op.data_done && (!op.cts_sent || (op.cts->done() && op.transfer->done()));
  if (finished) {
    succeed(op, done);
    return true;
  }
  if (moved) return true;  // checked when it stalls
  check_alive(op);
  return false;
}

bool PointToPoint::step_send(Op& op) {
  const int me = op.me;
  if (!op.started) {
    op.started = true;
    const Channel ch{op.group, op.peer, op.tag};
    op.seq = sent_[ch]++;
    const bool inline_send = op.bytes <= inline_limit();
    op.buffer.resize(p2p::kDataHeaderBytes + (inline_send ? op.bytes : 0));
    p2p::encode(p2p::DataHeader{inline_send ? p2p::DataKind::Inline : p2p::DataKind::RequestToSend,
                                op.bytes, op.seq},
                op.buffer.data());
    if (inline_send && op.bytes) {
      std::memcpy(op.buffer.data() + p2p::kDataHeaderBytes, op.data, op.bytes);
    }
    op.data_msg =
        t_.send(op.global(op.peer),
                p2p::tag(op.group, op.tag, p2p::Direction::Data, static_cast<uint32_t>(me)),
                op.buffer.data(), op.buffer.size());
    if (!inline_send) {
      op.cts_buffer.resize(p2p::kMaxClearToSendBytes);
      op.cts = t_.recv(
          op.global(op.peer),
          p2p::tag(op.group, op.tag, p2p::Direction::ClearToSend, static_cast<uint32_t>(op.peer)),
          op.cts_buffer.data(), op.cts_buffer.size());
    }
    return true;
  }
  bool moved = false;
  if (op.data_msg->failed()) throw PeerFailure(op.what() + ": " + op.data_msg->error());
  if (op.cts && !op.transfer) {
    if (op.cts->failed()) throw PeerFailure(op.what() + ": " + op.cts->error());
    if (!op.cts->done()) return false;
    const auto c = p2p::parse_clear_to_send({op.cts_buffer.data(), op.cts->length()});
    if (!c) throw TransportError(op.what() + ": malformed clear-to-send from the receiver");
    if (c->seq < op.seq) {  // left over from a receive that failed: drop it, wait for ours
      op.cts = t_.recv(
          op.global(op.peer),
          p2p::tag(op.group, op.tag, p2p::Direction::ClearToSend, static_cast<uint32_t>(op.peer)),
          op.cts_buffer.data(), op.cts_buffer.size());
      return true;
    }
    if (c->seq != op.seq) {
      throw TransportError(op.what() + ": clear-to-send #" + std::to_string(c->seq) +
                           " came for send #" + std::to_string(op.seq));
    }
    if (!c->ok)
      throw InvalidArgument(op.what() + ": the receiver refused it: " + std::string(c->error));
    if (c->bytes != op.bytes) {
      throw InvalidArgument(op.what() + ": the matching recv on rank " +
                            std::to_string(op.global(op.peer)) + " takes " +
                            std::to_string(c->bytes) + " bytes; sizes must agree");
    }
    op.region = t_.needs_registered_source() ? t_.register_memory(op.data, op.bytes)
                                             : std::make_shared<SourceView>(op.data, op.bytes);
    op.remote = t_.unpack_remote(op.global(op.peer), c->addr, c->bytes, c->key);
    op.transfer =
        t_.write(*op.region, 0, *op.remote, 0, op.bytes, transport::write_signal(c->token, 0));
    moved = true;
  }
  if (op.transfer && op.transfer->failed()) {
    throw PeerFailure(op.what() + ": " + op.transfer->error());
  }
  return moved;
}

void PointToPoint::post_data_receive(Op& op, int peer) {
  const uint64_t tag =
      p2p::tag(op.group, op.tag, p2p::Direction::Data, static_cast<uint32_t>(peer));
  if (op.peer >= 0) {
    op.buffer.resize(p2p::kDataHeaderBytes + inline_limit());
    op.data_msg = t_.recv(op.global(peer), tag, op.buffer.data(), op.buffer.size());
    return;
  }
  op.any_buffers[peer].resize(p2p::kDataHeaderBytes + inline_limit());
  op.any[peer] =
      t_.recv(op.global(peer), tag, op.any_buffers[peer].data(), op.any_buffers[peer].size());
}

// A receive past the inline limit tells its sender where to write; with `refusal`, that it must
// not (the sizes differ).
void PointToPoint::send_clear_to_send(Op& op, int peer, const std::string& refusal) {
  p2p::ClearToSend c;
  c.seq = op.seq;
  c.bytes = op.bytes;
  transport::Bytes key;
  if (refusal.empty()) {
    op.region = t_.register_memory(op.data, op.bytes);
    op.token = t_.reserve_token();
    key = op.region->packed_key();
    c.addr = reinterpret_cast<uint64_t>(op.data);
    c.token = *op.token;
    c.key = key;
    op.transfer =
        t_.expect(op.global(peer), *op.region, 0, op.bytes, transport::write_signal(*op.token, 0));
  } else {
    c.ok = false;
    c.error = refusal;
  }
  op.cts_buffer = p2p::encode(c);
  op.cts =
      t_.send(op.global(peer),
              p2p::tag(op.group, op.tag, p2p::Direction::ClearToSend, static_cast<uint32_t>(op.me)),
              op.cts_buffer.data(), op.cts_buffer.size());
  op.cts_sent = true;
}

void PointToPoint::start_recv(Op& op) {
  op.started = true;
  if (op.peer < 0) {
    // From any source: whichever member's data message comes first (a stashed one first).
    const int p = static_cast<int>(op.members.size());
    for (int r = 0; r < p; ++r) {
      if (r == op.me) continue;
      auto it = stash_.find({op.group, r, op.tag});
      if (it != stash_.end() && !it->second.empty()) {
        std::vector<uint8_t> message = std::move(it->second.front());
        it->second.pop_front();
        if (it->second.empty()) stash_.erase(it);
        op.peer = r;
        op.seq = received_[{op.group, r, op.tag}]++;
        op.work->set_source(op.global(r));
        if (!take_data(op, r, message)) post_data_receive(op, r);
        return;
      }
    }
    op.any.resize(p);
    op.any_buffers.resize(p);
    for (int r = 0; r < p; ++r) {
      if (r != op.me) post_data_receive(op, r);
    }
    return;
  }
  op.seq = received_[{op.group, op.peer, op.tag}]++;
  op.work->set_source(op.global(op.peer));
  if (op.bytes > inline_limit()) send_clear_to_send(op, op.peer, "");
  auto it = stash_.find({op.group, op.peer, op.tag});
  if (it != stash_.end() && !it->second.empty()) {
    std::vector<uint8_t> message = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) stash_.erase(it);
    if (take_data(op, op.peer, message)) return;
  }
  post_data_receive(op, op.peer);
}

// The sender's data message: checks it against this receive and takes its bytes (inline) or
// lets the write come. False when it was a leftover of an earlier, failed receive (dropped).
bool PointToPoint::take_data(Op& op, int peer, std::span<const uint8_t> message) {
  const auto h = p2p::parse_data(message);
  // Messages are built only on the error paths: this runs once per received message.
  auto from = [&] { return "rank " + std::to_string(op.global(peer)); };
  if (!h) throw TransportError(op.what() + ": malformed data message from " + from());
  if (h->seq < op.seq) return false;
  if (h->seq != op.seq) {
    throw TransportError(op.what() + ": message #" + std::to_string(h->seq) + " from " + from() +
                         " came for receive #" + std::to_string(op.seq));
  }
  auto sizes = [&] {
    return op.what() + ": " + from() + " sends " + std::to_string(h->bytes) +
           " bytes with this tag, this recv takes " + std::to_string(op.bytes) +
           "; sizes must agree";
  };
  if (h->bytes != op.bytes) {
    // A sender waiting for our clear-to-send learns why it will not come.
    if (h->kind == p2p::DataKind::RequestToSend && !op.cts_sent) {
      send_clear_to_send(op, peer, sizes());
    }
    throw InvalidArgument(sizes());
  }
  op.data_done = true;
  if (h->kind == p2p::DataKind::Inline) {
    if (op.cts_sent) throw TransportError(sizes());  // cannot happen with equal sizes
    if (op.bytes) std::memcpy(op.data, message.data() + p2p::kDataHeaderBytes, op.bytes);
    return true;
  }
  if (!op.cts_sent) send_clear_to_send(op, peer, "");  // a receive from any source
  return true;
}

bool PointToPoint::step_recv(Op& op) {
  if (!op.started) {
    // Behind a receive from any source of the group, receives wait: which message it takes
    // decides which the later ones may.
    for (const auto& other : ops_) {
      if (other.get() == &op) break;
      if (other->work && other->kind == Op::Kind::Recv && other->group == op.group &&
          other->peer < 0) {
        return false;
      }
    }
    start_recv(op);
    return true;
  }
  bool moved = false;
  if (op.peer < 0) {
    // Which member's message came first; the others' receives are cancelled, and a message
    // that came meanwhile is kept for the next receive from its sender.
    int first = -1;
    for (size_t r = 0; r < op.any.size(); ++r) {
      if (!op.any[r]) continue;
      if (op.any[r]->failed()) throw PeerFailure(op.what() + ": " + op.any[r]->error());
      if (op.any[r]->done() && first < 0) first = static_cast<int>(r);
    }
    if (first < 0) return false;
    for (size_t r = 0; r < op.any.size(); ++r) {
      if (!op.any[r] || static_cast<int>(r) == first) continue;
      t_.cancel(op.any[r]);
      if (op.any[r]->done()) {
        const auto& b = op.any_buffers[r];
        stash_[{op.group, static_cast<int>(r), op.tag}].emplace_back(
            b.begin(), b.begin() + static_cast<std::ptrdiff_t>(op.any[r]->length()));
      }
    }
    op.peer = first;
    op.seq = received_[{op.group, first, op.tag}]++;
    op.work->set_source(op.global(first));
    op.buffer = std::move(op.any_buffers[first]);
    const size_t length = op.any[first]->length();
    op.any.clear();
    op.any_buffers.clear();
    if (!take_data(op, first, {op.buffer.data(), length})) post_data_receive(op, first);
    moved = true;
  } else if (!op.data_done && op.data_msg) {
    if (op.data_msg->failed()) throw PeerFailure(op.what() + ": " + op.data_msg->error());
    if (!op.data_msg->done()) return false;
    if (!take_data(op, op.peer, {op.buffer.data(), op.data_msg->length()})) {
      post_data_receive(op, op.peer);  // a leftover, dropped
    }
    moved = true;
  }
  if (op.cts && op.cts->failed()) throw PeerFailure(op.what() + ": " + op.cts->error());
  if (op.transfer && op.transfer->failed())
    throw PeerFailure(op.what() + ": " + op.transfer->error());
  return moved;
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
