// rdmacoll::empty: symmetric memory (engine/symmetric.hpp). The members allocate together: each
// creates a memfd, the members all-gather (pid, fd, bytes), each maps every other's, and a
// second all-gather says whether every member mapped every part. Only then is the window
// published, on every member alike; otherwise every member's tensor is plain memory (across
// hosts registered once with the NIC, Transport::pin_memory). A
// published window comes back to the group's pool when its tensor goes, and a later empty()
// takes it again when every member offers it (one round instead of two, nothing mapped).

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "api/shape.hpp"
#include "api/world.hpp"
#include "engine/collectives/all_gather.hpp"
#include "engine/collectives/registry.hpp"
#include "engine/engine.hpp"
#include "engine/symmetric.hpp"
#include "rdmacoll/process_group.hpp"
#include "transport/transport.hpp"

namespace rdmacoll {

namespace {

// An all-gather of n int64 per member, on the group's calling order, titled `what` in errors;
// a member's local_error raises on every member.
std::vector<int64_t> gather_words(engine::Engine& e, GroupState& g, const char* what,
                                  const std::vector<int64_t>& mine,
                                  const std::string& local_error = {}) {
  std::vector<int64_t> all(mine.size() * static_cast<size_t>(g.size()));
  engine::RoundArgs a;
  a.collective = &engine::collectives::kAllGather;
  a.title = what;
  a.out = all.data();
  a.out_dtype = DType::Int64;
  a.out_numel = static_cast<int64_t>(all.size());
  a.in = mine.data();
  a.in_dtype = DType::Int64;
  a.in_numel = static_cast<int64_t>(mine.size());
  a.local_error = local_error;
  engine::all_gather(e, g, a);
  return all;
}

// What a member asks empty() for, in the words of its first round: the dtype, the number of
// sizes, the first four of them and a digest of all, so that members that ask for different
// tensors raise on every member instead of each keeping memory of its own.
constexpr size_t kShapeWords = 7;
std::vector<int64_t> shape_words(const std::vector<int64_t>& sizes, DType dtype) {
  std::vector<int64_t> w{
      static_cast<int64_t>(dtype), static_cast<int64_t>(sizes.size()), -1, -1, -1, -1, 0};
  uint64_t digest = 1469598103934665603ull;  // FNV-1a over the sizes
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i < 4) w[2 + i] = sizes[i];
    digest = (digest ^ static_cast<uint64_t>(sizes[i])) * 1099511628211ull;
  }
  w[6] = static_cast<int64_t>(digest);
  return w;
}

std::string describe_shape(const int64_t* w) {
  std::string out = "(";
  const int64_t n = w[1];
  for (int64_t i = 0; i < std::min<int64_t>(n, 4); ++i)
    out += (i ? ", " : "") + std::to_string(w[2 + i]);
  out += n > 4 ? ", ...)" : n == 1 ? ",)" : ")";
  const bool known = w[0] >= 0 && w[0] < static_cast<int64_t>(std::size(kAllDTypes));
  return out + " " +
         (known ? dtype_name(static_cast<DType>(w[0])) : "dtype #" + std::to_string(w[0]));
}

// Members' shape words (at `at` in each member's `stride` words of `all`) that differ: the
// same InvalidArgument on every member.
void check_same_tensor(const GroupState& g, const std::vector<int64_t>& all, size_t stride,
                       size_t at, const char* what) {
  bool same = true;
  for (int r = 1; r < g.size() && same; ++r) {
    same = std::equal(all.begin() + static_cast<std::ptrdiff_t>(at),
                      all.begin() + static_cast<std::ptrdiff_t>(at + kShapeWords),
                      all.begin() + static_cast<std::ptrdiff_t>(r * stride + at));
  }
  if (same) return;
  std::string each;
  for (int r = 0; r < g.size(); ++r) {
    each += (r ? ", rank " : "rank ") + std::to_string(g.members[r]) + " " +
            describe_shape(&all[r * stride + at]);
  }
  throw InvalidArgument(std::string(what) + " (" + g.describe() +
                        "): the members ask for different tensors: " + each +
                        "; every member must ask for the same shape and dtype");
}

// What a tensor from empty() owns: its window, which goes back to the group's pool (not
// unmapped) when the last copy of the tensor goes.
struct Lease {
  Lease(std::shared_ptr<engine::Window> w, std::weak_ptr<engine::WindowPool> p)
      : window(std::move(w)), pool(std::move(p)) {}
  Lease(const Lease&) = delete;  // one lease per window: a copy would give it back twice
  Lease& operator=(const Lease&) = delete;
  ~Lease() {
    if (auto p = pool.lock()) p->give_back(std::move(window));
  }
  std::shared_ptr<engine::Window> window;
  std::weak_ptr<engine::WindowPool> pool;
};

Tensor lease(GroupState& g, std::shared_ptr<engine::Window> w, DType dtype,
             std::vector<int64_t> sizes) {
  void* data = w->own->data();
  auto owner = std::make_shared<Lease>(std::move(w), g.windows);
  return Tensor::owning(std::move(owner), data, dtype, std::move(sizes));
}

// A window every member dropped and offers again, or nullptr: one round of the members'
// offers, the first of member 0's that every member made. The offered windows are held out of
// the pool meanwhile, so none of them can be unmapped between the offer and the choice.
std::shared_ptr<engine::Window> reuse(engine::Engine& e, GroupState& g, size_t bytes,
                                      const std::vector<int64_t>& shape, const char* what,
                                      const std::string& local_error) {
  constexpr size_t kOffers = 6;
  constexpr size_t kStride = kOffers + kShapeWords;
  std::vector<std::shared_ptr<engine::Window>> held;
  if (local_error.empty()) held = g.windows->hold(bytes, kOffers);
  std::vector<int64_t> mine(kOffers, 0);  // ids start at 1
  for (size_t i = 0; i < held.size(); ++i)
    mine[i] = static_cast<int64_t>(held[i]->id);
  mine.insert(mine.end(), shape.begin(), shape.end());
  const std::vector<int64_t> all = gather_words(e, g, what, mine, local_error);
  const auto give_back = [&] {
    for (auto it = held.rbegin(); it != held.rend(); ++it) {  // oldest first, as they were
      if (*it) g.windows->give_back(std::move(*it));
    }
  };
  try {
    check_same_tensor(g, all, kStride, kOffers, what);
  } catch (const InvalidArgument&) {
    give_back();
    throw;
  }
  std::shared_ptr<engine::Window> chosen;
  for (size_t i = 0; i < kOffers && all[i] != 0 && !chosen; ++i) {
    bool everyone = true;
    for (int r = 1; r < g.size() && everyone; ++r) {
      const auto* theirs = &all[static_cast<size_t>(r) * kStride];
      everyone = std::find(theirs, theirs + kOffers, all[i]) != theirs + kOffers;
    }
    if (!everyone) continue;
    for (auto& w : held) {
      if (w && w->id == static_cast<uint64_t>(all[i])) chosen = std::move(w);
    }
  }
  give_back();
  return chosen;
}

Tensor make_window(engine::Engine& e, GroupState& g, std::vector<int64_t> sizes, DType dtype,
                   bool zeroed) {
  const char* what = zeroed ? "empty" : "empty_uninitialized";
  // No memory before it is needed: a plain tensor of the size (zeros) costs as much as the
  // reused window saves. A bad shape raises on every member, in the first round, and so do
  // members that ask for different shapes or dtypes.
  std::string bad;
  int64_t bytes = 0;
  try {
    bytes = api::checked_bytes(sizes, dtype, what);
  } catch (const InvalidArgument& ex) {
    bad = ex.what();
  }
  const std::vector<int64_t> shape = shape_words(sizes, dtype);
  const int p = g.size();
  // Every member knows the group's hosts alike, so all of them skip the offers or none.
  if (g.hosts == 1 && (bytes > 0 || !bad.empty())) {
    if (std::shared_ptr<engine::Window> w =
            reuse(e, g, static_cast<size_t>(bytes), shape, what, bad)) {
      if (zeroed) std::memset(w->own->data(), 0, static_cast<size_t>(bytes));
      return lease(g, std::move(w), dtype, std::move(sizes));
    }
  }
  auto w = std::make_shared<engine::Window>();
  w->id = ++g.windows_made;
  w->group = &g;
  w->digest = g.digest;
  std::string why;
  if (bad.empty()) w->own = transport::SharedSegment::create(static_cast<size_t>(bytes), why);
  constexpr size_t kStride = 4 + kShapeWords;
  std::vector<int64_t> mine{::getpid(), w->own ? w->own->fd() : -1, bytes,
                            w->own && g.hosts == 1 ? 1 : 0};
  mine.insert(mine.end(), shape.begin(), shape.end());
  const std::vector<int64_t> all = gather_words(e, g, what, mine, bad);
  check_same_tensor(g, all, kStride, 4, what);
  bool mapped = true;
  for (int r = 0; r < p; ++r)
    mapped = mapped && all[kStride * r + 3] == 1 && all[kStride * r + 2] == bytes;
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
    if (!t || all[kStride * r] != t->peer_pid(g.members[r])) {
      mapped = false;
      break;
    }
    w->peers[r] = transport::SharedSegment::map_peer(static_cast<pid_t>(all[kStride * r]),
                                                     static_cast<int>(all[kStride * r + 1]),
                                                     static_cast<size_t>(bytes), why);
    mapped = w->peers[r] != nullptr;
    if (mapped) w->base[r] = w->peers[r]->data();
  }
  // Every member holds its memfd open until every member has mapped it (or given up).
  const std::vector<int64_t> verdicts = gather_words(e, g, what, {mapped ? 1 : 0});
  if (w->own) w->own->close_fd();
  bool everyone = true;
  for (int64_t v : verdicts)
    everyone = everyone && v == 1;
  if (!w->own) return zeros(std::move(sizes), dtype);
  if (everyone) {
    engine::publish(w);
    return lease(g, std::move(w), dtype, std::move(sizes));  // a fresh memfd reads as zeros
  }
  w->peers.clear();
  void* data = w->own->data();
  // Across hosts the peers write into it over the NIC: registered now, once, so that no call
  // on it registers (a registration pins every page: milliseconds per GiB). Where that fails
  // (a low `ulimit -l`) the calls register it as any tensor, and say so if they cannot.
  if (g.hosts > 1 && t && bytes > 0) {
    try {
      w->pinned = t->pin_memory(data, static_cast<size_t>(bytes));
    } catch (const TransportError&) {
    }
  }
  return Tensor::owning(std::move(w), data, dtype, std::move(sizes));
}

}  // namespace

namespace {

Tensor allocate(std::vector<int64_t> sizes, DType dtype, const Group& group, bool zeroed,
                const char* what) {
  GroupState& g = api::resolve(group, what);
  if (!g.is_member()) return zeros(std::move(sizes), dtype);
  engine::Engine& e = api::engine_of(g, what);
  Tensor result;
  g.queue.run([&] { result = make_window(e, g, std::move(sizes), dtype, zeroed); }, what);
  return result;
}

}  // namespace

Tensor empty(std::vector<int64_t> sizes, DType dtype, const Group& group) {
  return allocate(std::move(sizes), dtype, group, true, "empty");
}

Tensor empty_uninitialized(std::vector<int64_t> sizes, DType dtype, const Group& group) {
  return allocate(std::move(sizes), dtype, group, false, "empty_uninitialized");
}

}  // namespace rdmacoll
