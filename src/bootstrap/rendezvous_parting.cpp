// Parting (Rendezvous::arrive, depart, leave): how the ranks leave the job's store together,
// and whom they do not wait for.
#include <algorithm>
#include <string>
#include <vector>

#include "bootstrap/rendezvous.hpp"
#include "bootstrap/store.hpp"
#include "common/log.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::bootstrap {

// Marks in `dead` the ranks whose liveness key our store has deleted: their connection closed,
// as a pidfd says a process exited (whether it arrived first, arrive() reads as for those).
// Best effort: a store that does not answer tells nothing.
void Rendezvous::store_lost(std::vector<bool>& dead) {
  std::vector<std::string> keys;
  std::vector<int> ranks;
  for (int r = 0; r < world_size_; ++r) {
    if (r == rank_ || dead[r]) continue;
    keys.push_back(alive_key(r));
    ranks.push_back(r);
  }
  if (ranks.empty()) return;
  try {
    const auto present = store_->get_present(keys);
    for (size_t i = 0; i < ranks.size(); ++i)
      dead[ranks[i]] = !present[i];
  } catch (const Error&) {
  }
}

constexpr std::chrono::milliseconds kDepartLook{100};
constexpr std::chrono::milliseconds kLeaveBudget{250};

void Rendezvous::arrive(bool failed, const KnownDead& known_dead) {
  if (server_) server_->stop_accepting();
  if (pmix_) {
    // One fence: every rank is done with the transport (and so with rank 0's store, which only
    // the transport's first contacts use). After a failure it waits out at most the grace.
    const std::vector<bool> dead = known_dead();
    failed = failed || std::find(dead.begin(), dead.end(), true) != dead.end();
    if (!pmix_->fence(failed ? grace() : timeout_) && !failed)
      log::warn("destroy_process_group: ranks did not all arrive within the timeout");
    return;
  }
  const Clock::time_point start = Clock::now();
  grace_end_ = start + grace();
  // How often a waiting rank asks its liveness again: a store request per rank each time, so
  // less often in large worlds.
  const auto look = std::clamp<std::chrono::milliseconds>(
      std::chrono::milliseconds(4 * world_size_), std::chrono::milliseconds(100),
      std::chrono::seconds(1));
  // This process's liveness (pidfds, the transport's marks) and, on rank 0 once it waits, the
  // store's: a rank whose connection to our own store closed has died, on
  // whatever host (a death across hosts that no transport saw cost the whole timeout here).
  // Rank 0 alone asks (it is always here, or the store is gone), so the store answers one
  // request per look, not one per rank; it releases the others as any rank that knows does.
  const auto look_for_dead = [&] {
    std::vector<bool> d = known_dead();
    if (server_) store_lost(d);
    return d;
  };
  std::vector<bool> dead = known_dead();
  const auto any_dead = [&] { return std::find(dead.begin(), dead.end(), true) != dead.end(); };
  // A stopped rank 0 would hold every store call for the op timeout: after a failure, the grace.
  const auto shorten_store_calls = [&] {
    if (auto* client = dynamic_cast<StoreClient*>(store_.get())) client->set_op_timeout(grace());
  };
  failed = failed || any_dead();
  if (failed) shorten_store_calls();
  try {
    store_->set(arrived_key(rank_), std::string("1"));
    int64_t n = store_->add("rdmacoll/destroy", 1);
    for (;;) {
      // The dead that arrived before they died are counted in n already.
      missing_ = 0;
      if (failed && any_dead()) {
        std::vector<std::string> keys;
        for (int r = 0; r < world_size_; ++r) {
          if (dead[r]) keys.push_back(arrived_key(r));
        }
        for (const auto& v : store_->get_present(keys))
          missing_ += !v;
      }
      // "destroyed" carries how many never arrived: rank 0 does not wait for them to close.
      if (n + missing_ >= world_size_) {
        store_->set("rdmacoll/destroyed", std::to_string(missing_));
        break;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          (failed ? grace_end_ : start + timeout_) - Clock::now());
      if (left.count() <= 0) {
        if (!failed)
          log::warn("destroy_process_group: ranks did not all arrive within the timeout");
        break;
      }
      try {
        const Bytes v = store_->get("rdmacoll/destroyed", std::min(look, left));
        const int said = std::atoi(std::string(v.begin(), v.end()).c_str());
        missing_ = std::clamp(said, missing_, world_size_ - 1);
        break;
      } catch (const Timeout&) {
      }
      dead = look_for_dead();
      if (!failed && any_dead()) {
        failed = true;
        shorten_store_calls();
      }
      if (failed) n = store_->add("rdmacoll/destroy", 0);
    }
  } catch (const Error& e) {
    if (!failed)
      log::warn("destroy_process_group: ranks did not all arrive: " + std::string(e.what()));
  }
}

void Rendezvous::depart(bool failed) {
  if (pmix_) return;  // arrive()'s fence was the parting
  // Rank 0 hosts the store (ours, or torch's TCPStore): it leaves last, once the others have
  // read "destroyed" and closed (the dead that never arrived will not).
  try {
    const int64_t n = store_->add("rdmacoll/closed", 1);
    if (rank_ == 0) {
      const auto end = Clock::now() + (failed || missing_ ? grace_left() : grace());
      int64_t closed = n;
      while (closed + missing_ < world_size_) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
        if (left.count() <= 0) break;
        try {
          // With ranks missing, "all_closed" never comes: the count is looked at instead.
          store_->get("rdmacoll/all_closed",
                      missing_ ? std::min<std::chrono::milliseconds>(left, kDepartLook) : left);
          break;
        } catch (const Timeout&) {
        }
        closed = store_->add("rdmacoll/closed", 0);
      }
    } else if (n == world_size_) {
      store_->set("rdmacoll/all_closed", std::string("1"));
    }
  } catch (const Error&) {
  }
}

void Rendezvous::leave() {
  if (server_) server_->stop_accepting();
  if (pmix_) {
    pmix_->join_fence_without_waiting();  // the others' parting fence does not wait for us
    return;
  }
  // A fraction of a second in all, whatever the store does (rank 0 may be stopped): the
  // others learn of this rank's exit from its pidfd or its closed connections anyway.
  const auto end = Clock::now() + kLeaveBudget;
  auto* client = dynamic_cast<StoreClient*>(store_.get());
  const auto budget = [&] {
    if (client)
      client->set_op_timeout(
          std::max(std::chrono::milliseconds(1),
                   std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now())));
  };
  try {
    budget();
    store_->set(arrived_key(rank_), std::string("1"));
    budget();
    if (store_->add("rdmacoll/destroy", 1) == world_size_) {
      budget();
      store_->set("rdmacoll/destroyed", std::string("0"));
    }
    budget();
    if (store_->add("rdmacoll/closed", 1) == world_size_ && rank_ != 0) {
      budget();
      store_->set("rdmacoll/all_closed", std::string("1"));
    }
  } catch (const Error&) {
  }
}

}  // namespace rdmacoll::bootstrap
