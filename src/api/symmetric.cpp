// rdmacoll::empty: symmetric memory (engine/symmetric.hpp). The members allocate together: each
// creates a memfd, the members all-gather (pid, fd, bytes), each maps every other's, and a
// second all-gather says whether every member mapped every part. Only then is the window
// published, on every member alike; otherwise every member's tensor is plain memory.

#include <unistd.h>

#include <string>
#include <vector>

#include "api/world.hpp"
#include "engine/engine.hpp"
#include "engine/symmetric.hpp"
#include "rdmacoll/process_group.hpp"
#include "transport/transport.hpp"

namespace rdmacoll {

namespace {

// An all-gather of n int64 per member, on the group's calling order.
std::vector<int64_t> gather_words(engine::Engine& e, GroupState& g,
                                  const std::vector<int64_t>& mine) {
  std::vector<int64_t> all(mine.size() * static_cast<size_t>(g.size()));
  engine::AllGatherArgs a;
  a.out = all.data();
  a.out_dtype = DType::Int64;
  a.out_numel = static_cast<int64_t>(all.size());
  a.in = mine.data();
  a.in_dtype = DType::Int64;
  a.in_numel = static_cast<int64_t>(mine.size());
  e.all_gather(g, a);
  return all;
}

Tensor make_window(engine::Engine& e, GroupState& g, std::vector<int64_t> sizes, DType dtype) {
  Tensor plain = zeros(sizes, dtype);  // the shape's checks, and what a failure returns
  const int p = g.size();
  const auto bytes = static_cast<int64_t>(plain.nbytes());
  auto w = std::make_shared<engine::Window>();
  w->id = ++g.windows_made;
  w->group = &g;
  w->digest = g.digest;
  std::string why;
  w->own = transport::SharedSegment::create(static_cast<size_t>(bytes), why);
  const std::vector<int64_t> all = gather_words(
      e, g, {::getpid(), w->own ? w->own->fd() : -1, bytes, w->own && g.hosts == 1 ? 1 : 0});
  bool mapped = true;
  for (int r = 0; r < p; ++r)
    mapped = mapped && all[4 * r + 3] == 1 && all[4 * r + 2] == bytes;
  w->peers.resize(p);
  w->base.assign(p, nullptr);
  const std::shared_ptr<transport::Transport> t = g.transport.lock();
  for (int r = 0; r < p && mapped; ++r) {
    if (r == g.rank) {
      w->base[r] = w->own->data();
      continue;
    }
    // The pid a member names must be the one it published at init: else a member could make
    // this process map (and a collective store into) another process's segment.
    if (!t || all[4 * r] != t->peer_pid(g.members[r])) {
      mapped = false;
      break;
    }
    w->peers[r] = transport::SharedSegment::map_peer(static_cast<pid_t>(all[4 * r]),
                                                     static_cast<int>(all[4 * r + 1]),
                                                     static_cast<size_t>(bytes), why);
    mapped = w->peers[r] != nullptr;
    if (mapped) w->base[r] = w->peers[r]->data();
  }
  // Every member holds its memfd open until every member has mapped it (or given up).
  const std::vector<int64_t> verdicts = gather_words(e, g, {mapped ? 1 : 0});
  if (w->own) w->own->close_fd();
  bool everyone = true;
  for (int64_t v : verdicts)
    everyone = everyone && v == 1;
  if (!w->own) return plain;
  if (everyone) {
    engine::publish(w);
  } else {
    w->peers.clear();
  }
  void* data = w->own->data();
  return Tensor::owning(std::move(w), data, dtype, std::move(sizes));
}

}  // namespace

Tensor empty(std::vector<int64_t> sizes, DType dtype, const Group& group) {
  constexpr const char* what = "empty";
  GroupState& g = api::resolve(group, what);
  if (!g.is_member()) return zeros(std::move(sizes), dtype);
  engine::Engine& e = api::engine_of(g, what);
  Tensor result;
  g.queue.run([&] { result = make_window(e, g, std::move(sizes), dtype); }, what);
  return result;
}

}  // namespace rdmacoll
