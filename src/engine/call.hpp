#pragma once
// One collective call in flight, and the descriptor round every call starts with. Internal to
// src/engine: the collectives (src/engine/collectives/) are built from these pieces.

#include <atomic>
#include <exception>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "engine/control/mailbox.hpp"
#include "engine/control/ring_guard.hpp"
#include "engine/core/call_descriptor.hpp"
#include "engine/core/round_args.hpp"
#include "engine/executor.hpp"
#include "engine/group_state.hpp"
#include "engine/leaving.hpp"
#include "engine/pending.hpp"
#include "engine/spin.hpp"
#include "rdmacoll/errors.hpp"
#include "transport/transport.hpp"

namespace rdmacoll::engine {

using transport::Clock;
using transport::RequestPtr;

// A call's lists of requests, kept by the group (core/scratch_arena.hpp) and reused by each call.
struct PendingLists {
  std::vector<Pending> recvs;
  std::vector<Pending> sends;
};

// One collective call in flight: owns its requests and cancels whatever is still pending
// when the call ends early, so no receive lands in memory the caller may free.
class Call {
 public:
  Call(transport::Transport& t, GroupState& g, const char* op, SpinPolicy spin)
      : Call(t, g, op, spin, g.scratch.get<PendingLists>()) {}  // one scan: no allocation

  // No network I/O here: a failed call's neighbours were told by run()'s failure path.
  ~Call() {
    ring_.reset();  // its report receives are cancelled with the rest
    for (auto* list : {&recvs_, &sends_}) {
      for (auto& p : *list) {
        if (p.req && !p.req->done()) t_.cancel(p.req);
      }
      list->clear();  // keeps the capacity for the group's next call
    }
    // After a failure the token is fenced: writes still on their way to us land nowhere.
    if (token_) {
      t_.release_token(*token_, failed_ || std::uncaught_exceptions() > uncaught_ || g_.broken);
    }
  }

  uint64_t seq() const { return seq_; }

 private:
  Call(transport::Transport& t, GroupState& g, const char* op, SpinPolicy spin, PendingLists& lists)
      : t_(t),
        g_(g),
        op_(op),
        seq_(g.next_seq++),
        spin_(spin),
        recvs_(lists.recvs),
        sends_(lists.sends) {
    recvs_.clear();
    sends_.clear();
  }

 public:
  // The token this call's writers put in their signals (transport.hpp), reserved on first use:
  // by expose_target, before the descriptor leaves. The call's exceptions in flight are
  // counted then, for the release's verdict (read once per call that holds a token).
  uint64_t token() {
    if (!token_) {
      token_ = t_.reserve_token();
      uncaught_ = std::uncaught_exceptions();
    }
    return *token_;
  }

  std::string where() const {
    return std::string(op_) + " (" + g_.describe() + ", call #" + std::to_string(seq_) + ", rank " +
           std::to_string(g_.rank) + " of " + std::to_string(g_.size()) + ")";
  }

  // Runs a transport call; a failure it throws gets this call's context and breaks the group.
  template <typename F>
  auto guarded(F&& f) {
    try {
      return f();
    } catch (const PeerFailure& e) {
      fail<PeerFailure>(where() + ": " + e.what());
    } catch (const TransportError& e) {
      fail<TransportError>(where() + ": " + e.what());
    }
  }

  std::vector<Pending>& recvs() { return recvs_; }
  std::vector<Pending>& sends() { return sends_; }

  int global(int group_rank) const { return g_.members[group_rank]; }
  // The call's context: what every step of it works with, so steps take the call alone.
  const GroupState& group() const { return g_; }
  GroupState& group() { return g_; }
  transport::Transport& transport() const { return t_; }

  // Ring-step mode (control/ring_guard.hpp): from now on errors spread to and from the ring
  // neighbours, group ranks `pred` and `succ`.
  void watch_neighbours(int pred, int succ) { ring_.emplace(*this, pred, succ); }
  // Runs the call's body. When it throws, the failure path runs, explicitly, before the
  // exception leaves: in ring-step mode both ring neighbours are told and heard (RingGuard::
  // spread, once), and only then is the registration of `exposed` (the output the peers were told
  // of) dropped, since the predecessor's writes may still be landing in it: a later write then
  // fails at its writer instead of landing in memory the user frees and reuses.
  template <typename Body>
  void run(Body&& body, const std::shared_ptr<transport::MemoryRegion>* exposed = nullptr) {
    try {
      body();
    } catch (const InvalidArgument&) {
      failed_ = true;
      if (ring_ && !g_.broken) ring_->spread();
      if (exposed && *exposed) t_.forget_registration(**exposed);
      throw;
    } catch (...) {
      failed_ = true;
      const bool spread = ring_ && !g_.broken && ring_->spread();
      if (exposed && *exposed) t_.forget_registration(**exposed);
      // A failure that a neighbour's report explains (a write the successor refused once its
      // call was over): raise the report, as the other ranks do.
      if (spread && !g_.broken) ring_->check();
      throw;
    }
  }
  // What this rank's error says to the others (without this rank's call prefix): kept for
  // the ring guard's report; the first one noted wins.
  void note_error(const std::string& reason) const {
    if (error_text_.empty()) error_text_ = reason;
  }
  const std::string& noted_error() const { return error_text_; }

  // Waits until list[begin, end) is complete; throws PeerFailure or Timeout (and marks the
  // group broken, since ranks may now be out of step).
  void wait(std::vector<Pending>& list, size_t begin, size_t end) {
    run_wait(
        spin_, spin_until_,
        [&] {
          bool all_done = true;
          for (size_t i = begin; i < end; ++i) {
            const Pending& p = list[i];
            if (p.req->done()) continue;
            if (p.req->failed()) {
              const std::string what = where() + ": " + p.what() + " with rank " +
                                       std::to_string(global(p.peer)) +
                                       " failed: " + p.req->error();
              // Refused because the call is over at that rank (it raised and dropped its
              // output): in ring-step mode its report is coming, and run() raises that; the
              // group is not broken by it.
              if (p.req->refused() && ring_) {
                if (ring_->spreading()) continue;  // nothing of ours lands there
                ring_->refused();
                throw PeerFailure(what);
              }
              fail<PeerFailure>(what);
            }
            all_done = false;
          }
          if (all_done) return Poll::Done;
          if (ring_ && !ring_->spreading()) ring_->check();
          return t_.progress() ? Poll::Moved : Poll::Idle;
        },
        [](int) {},
        [&] {
          check_leaving();
          for (size_t i = begin; i < end; ++i) {
            if (!list[i].req->done()) check_alive(list[i].peer);
          }
          check_members();
          if (Clock::now() >= deadline()) fail<Timeout>(timeout_message(list, begin, end));
          if (ring_) ring_->listen();
        },
        [&] { t_.wait_for_event(deadline()); });
  }

  // Waits until every other member's mailbox slot for this call is complete: polls our own
  // memory, then (as wait() does) checks on the missing peers and blocks, after telling
  // writers through the `sleeping` word to ring the doorbell.
  void wait_slots(const Mailbox& slots) {
    const int p = g_.size();
    const uint64_t flag = seq_ + 1;
    auto arrived = [&](int peer) {
      uint8_t* slot = slots.local_slot(peer, seq_);
      // A chunk of 9 to 64 bytes lies in the line after the flag's: fetching it with every
      // poll overlaps its miss with the flag's instead of taking it after (64 B on 2 ranks:
      // 0.50 -> 0.40 us where the cores are far apart; docs/performance.md).
      __builtin_prefetch(slot + Mailbox::kLine);
      return Mailbox::flag(slot).load(std::memory_order_seq_cst) == flag;
    };
    auto missing = [&]() {
      for (int i = 1; i < p; ++i) {
        const int peer = (g_.rank + p - i) % p;
        if (!arrived(peer)) return peer;
      }
      return -1;
    };
    run_wait(
        spin_, spin_until_, [&] { return missing() >= 0 ? Poll::Idle : Poll::Done; },
        [&](int idle) {
          // Now and then only: a progress call is longer than a small call's whole wait, and a
          // flag that lands during one is seen late (every 16th round was 11% of an 8-byte
          // all_reduce's samples on 2 ranks). Blocking progresses it anyway.
          if (idle % 128 == 0) t_.progress();
        },
        [&] {
          t_.progress();
          check_leaving();
          for (int peer = 0; peer < p; ++peer) {
            if (peer != g_.rank && !arrived(peer)) check_alive(peer);
          }
          check_members();
          if (Clock::now() >= deadline()) {
            fail<Timeout>(where() + ": timed out after " + std::to_string(g_.timeout.count()) +
                          " ms; still waiting for the call descriptor (mailbox) of rank " +
                          std::to_string(global(missing())));
          }
        },
        [&] {
          // Dekker with the writers (exchange_through_slots): either they see `sleeping` and
          // ring, or we see their flag here and do not block.
          // (All four accesses are seq_cst, which orders each store before the later load.)
          slots.local_sleeping().store(flag, std::memory_order_seq_cst);
          if (missing() >= 0) t_.wait_for_event(deadline());
          slots.local_sleeping().store(0, std::memory_order_relaxed);
        });
  }

 private:
  friend class RingGuard;  // its report goes out on this call's transport, tags and lists

  std::string timeout_message(const std::vector<Pending>& list, size_t begin, size_t end) const {
    std::ostringstream os;
    os << where() << ": timed out after " << g_.timeout.count() << " ms; still waiting for";
    bool first = true;
    for (size_t i = begin; i < end; ++i) {
      if (list[i].req->done()) continue;
      os << (first ? " " : ", ") << list[i].what() << " with rank " << global(list[i].peer);
      first = false;
    }
    return os.str();
  }

  void check_leaving() {
    if (process_leaving().load(std::memory_order_relaxed)) {
      fail<PeerFailure>(where() + ": this process is leaving (abort_process_group)");
    }
    if (g_.abandoned.load(std::memory_order_relaxed)) {
      fail<PeerFailure>(where() + ": its group was abandoned (shrink_group, AbortParent)");
    }
  }

  void check_alive(int peer) {
    if (auto why = t_.peer_failure(global(peer))) {
      fail<PeerFailure>(where() + ": rank " + std::to_string(global(peer)) + " is gone: " + *why);
    }
  }

  // A stalled wait looks at every member now and then, not only the ones it waits for: a
  // member that died while this rank waits on another (recursive doubling's next partner, a
  // ring neighbour's neighbour) dooms the call, and the member it waits for may have failed the
  // call already and will send nothing. Without this the wait lasted the whole timeout.
  static constexpr std::chrono::milliseconds kMembersEvery{50};
  void check_members() {
    const Clock::time_point now = Clock::now();
    if (now < next_members_check_) return;
    next_members_check_ = now + kMembersEvery;
    for (int peer = 0; peer < g_.size(); ++peer) {
      if (peer != g_.rank) check_alive(peer);
    }
  }

  template <typename E>
  [[noreturn]] void fail(const std::string& message) {
    g_.broken = message;
    throw E(message);
  }

  transport::Transport& t_;
  GroupState& g_;
  const char* op_;
  uint64_t seq_;
  // Read from the clock when a wait first stalls, not when the call starts: a small call that
  // never stalls reads no clock (its spin budget is at most a few ms of the timeout).
  Clock::time_point deadline() {
    if (deadline_ == Clock::time_point{}) deadline_ = Clock::now() + g_.timeout.get();
    return deadline_;
  }
  Clock::time_point deadline_{};
  Clock::time_point next_members_check_{};
  SpinPolicy spin_;
  Clock::time_point spin_until_{};
  std::vector<Pending>& recvs_;  // the group's scratch lists
  std::vector<Pending>& sends_;
  bool failed_ = false;  // run()'s body threw
  mutable std::string error_text_;
  int uncaught_ = 0;  // std::uncaught_exceptions() when the token was reserved
  std::optional<uint64_t> token_;
  std::optional<RingGuard> ring_;  // ring-step mode
};

// A source range outside any registration, for transports that read any memory.
class SourceView final : public transport::MemoryRegion {
 public:
  using MemoryRegion::MemoryRegion;
  transport::Bytes packed_key() const override { return {}; }
};

// Our descriptor for `call` from the collective's arguments: sizes, dtypes, operator, root and
// local error (no addresses or inline data yet).
CallDescriptor make_descriptor(Call& call, const RoundArgs& a);

// Throws InvalidArgument for a non-member or a group broken by an earlier failure.
void check_usable(const GroupState& g, const char* op);

}  // namespace rdmacoll::engine
