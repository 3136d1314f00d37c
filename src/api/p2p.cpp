// send, recv and batch_isend_irecv: this rank's arguments checked here (only the two ranks
// take part, so a mistake raises at once), then started in the group's issue order.

#include <atomic>
#include <mutex>
#include <string>

#include "api/entry.hpp"
#include "api/world.hpp"
#include "engine/p2p_messages.hpp"
#include "rdmacoll/errors.hpp"
#include "rdmacoll/process_group.hpp"

namespace rdmacoll {

using api::engine_of;
using api::resolve;

namespace {

// The group rank of `peer` (a global rank), or InvalidArgument.
int peer_of(const GroupState& g, int peer, const char* what, const char* role, bool any_ok) {
  if (!g.is_member()) {
    throw InvalidArgument(std::string(what) + ": this rank is not a member of " + g.describe());
  }
  if (any_ok && peer == kAnySource) return -1;
  std::string error;
  const int r = api::group_root(g, peer, role, error);
  if (!error.empty()) throw InvalidArgument(std::string(what) + ": " + error);
  if (r == g.rank) {
    throw InvalidArgument(std::string(what) + ": " + role + " " + std::to_string(peer) +
                          " is this rank (as in torch, a rank does not send to itself)");
  }
  return r;
}

uint32_t tag_of(int tag, const char* what) {
  if (tag < 0 || static_cast<uint64_t>(tag) > engine::p2p::kMaxUserTag) {
    throw InvalidArgument(std::string(what) + ": tag " + std::to_string(tag) + " is outside [0, " +
                          std::to_string(engine::p2p::kMaxUserTag) + "]");
  }
  return static_cast<uint32_t>(tag);
}

void check_storage(const Tensor& t, const char* what) {
  if (t.data() == nullptr && t.numel() > 0) {
    throw InvalidArgument(std::string(what) + ": the tensor has no storage");
  }
}

Work start_send(const Tensor& tensor, int dst, const Group& group, int tag) {
  constexpr const char* what = "send";
  GroupState& g = resolve(group, what);
  engine::Engine& e = engine_of(g, what);
  const int peer = peer_of(g, dst, what, "dst", false);
  const uint32_t t = tag_of(tag, what);
  check_storage(tensor, what);
  return Work(g.queue.submit_deferred(
      [&e, &g, tensor, peer, t](const std::shared_ptr<detail::WorkState>& work) {
        e.send(g, tensor.data(), tensor.nbytes(), peer, t, work);
      },
      what));
}

Work start_recv(Tensor& tensor, int src, const Group& group, int tag) {
  constexpr const char* what = "recv";
  GroupState& g = resolve(group, what);
  engine::Engine& e = engine_of(g, what);
  const int peer = peer_of(g, src, what, "src", true);
  const uint32_t t = tag_of(tag, what);
  check_storage(tensor, what);
  return Work(g.queue.submit_deferred(
      [&e, &g, tensor, peer, t](const std::shared_ptr<detail::WorkState>& work) {
        e.recv(g, tensor.data(), tensor.nbytes(), peer, t, work);
      },
      what));
}

}  // namespace

Work send(const Tensor& tensor, int dst, const Group& group, int tag, bool async_op) {
  Work w = start_send(tensor, dst, group, tag);
  if (!async_op) w.wait();
  return w;
}

Work recv(Tensor& tensor, int src, const Group& group, int tag, bool async_op) {
  Work w = start_recv(tensor, src, group, tag);
  if (!async_op) w.wait();
  return w;
}

std::vector<Work> batch_isend_irecv(const std::vector<P2POp>& ops) {
  std::vector<Work> works;
  works.reserve(ops.size());
  for (const P2POp& op : ops) {
    if (op.kind == P2POp::Kind::Send) {
      works.push_back(start_send(op.tensor, op.peer, op.group, op.tag));
    } else {
      Tensor t = op.tensor;
      works.push_back(start_recv(t, op.peer, op.group, op.tag));
    }
  }
  return works;
}

int Work::source_rank() const {
  return state_ ? state_->source() : -1;
}

Work when_all(const std::vector<Work>& works) {
  auto all = std::make_shared<detail::WorkState>("when_all");
  struct Count {
    std::atomic<size_t> left;
    std::mutex mu;
    std::exception_ptr first;
  };
  auto count = std::make_shared<Count>();
  count->left = works.size() + 1;  // one for the set-up below, so none finishes it early
  auto one_done = [all, count](std::exception_ptr error) {
    if (error) {
      std::lock_guard lock(count->mu);
      if (!count->first) count->first = error;
    }
    if (count->left.fetch_sub(1) == 1) {
      std::exception_ptr first;
      {
        std::lock_guard lock(count->mu);
        first = count->first;
      }
      all->finish(first);
    }
  };
  std::vector<std::weak_ptr<detail::WorkState>> parts;
  for (const Work& w : works) {
    w.on_completion(one_done);
    if (w.state_) parts.push_back(w.state_);
  }
  all->set_parts(std::move(parts));
  one_done(nullptr);
  return Work(all);
}

}  // namespace rdmacoll
