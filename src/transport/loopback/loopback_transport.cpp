#include "transport/loopback/loopback_transport.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "rdmacoll/errors.hpp"

namespace rdmacoll::transport::loopback {

namespace {

class LoopbackRequest final : public Request {
 public:
  explicit LoopbackRequest(int peer) : Request(peer) {}
  uint8_t* buffer = nullptr;  // a receive's
  size_t capacity = 0;
};
using Ptr = std::shared_ptr<LoopbackRequest>;

class LoopbackRegion final : public MemoryRegion {
 public:
  using MemoryRegion::MemoryRegion;
  Bytes packed_key() const override { return Bytes(8, 0); }
};

// Zeroed memory every rank of the process can load from and store to: a mailbox's.
class SharedRegion final : public MemoryRegion {
 public:
  explicit SharedRegion(size_t length) : MemoryRegion(std::calloc(length, 1), length) {}
  ~SharedRegion() override { std::free(base()); }
  Bytes packed_key() const override { return Bytes(8, 1); }
};

using Key = std::pair<int, uint64_t>;  // (the other rank, tag or signal)

}  // namespace

struct Fabric::State {
  struct Rank {
    bool dead = false;
    int event_fd = -1;
    std::map<Key, std::deque<Bytes>> unexpected;  // messages that came before their receive
    std::map<Key, std::deque<Ptr>> receives;      // receives posted before their message
    std::map<Key, Ptr> expects;                   // writes expected
    std::map<Key, int> arrived;                   // writes that came before their expect
  };
  std::mutex mu;
  size_t max_message;
  std::vector<Rank> ranks;
  std::set<std::pair<int, int>> holding;
  std::map<std::pair<int, int>, std::deque<std::function<void()>>> held;
  std::map<std::pair<int, int>, int> drops;
  // Mappable memory by address: a peer's mapping holds it, as a process's mapping of shared
  // memory outlives the owner's free.
  std::map<uint64_t, std::weak_ptr<MemoryRegion>> mappable;
  bool reads = false;        // allow_reads()
  std::set<int> unreadable;  // refuse_reads_from()
  std::function<void(int, int)> read_hook;

  void wake(int rank) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t w = ::write(ranks[rank].event_fd, &one, sizeof one);
  }
  // Runs `deliver` now, or once the link is released. Under mu.
  void route(int from, int to, std::function<void()> deliver) {
    if (holding.count({from, to})) {
      held[{from, to}].push_back(std::move(deliver));
    } else {
      deliver();
    }
  }
  // A control message arrives at `to`. Under mu.
  void deliver_message(int from, int to, uint64_t tag, Bytes data) {
    Rank& r = ranks[to];
    if (r.dead) return;
    auto it = r.receives.find({from, tag});
    if (it != r.receives.end() && !it->second.empty()) {
      Ptr req = it->second.front();
      it->second.pop_front();
      if (it->second.empty()) r.receives.erase(it);
      if (data.size() > req->capacity) {
        req->fail("message truncated: " + std::to_string(data.size()) + " bytes for a receive of " +
                  std::to_string(req->capacity));
      } else {
        if (!data.empty()) std::memcpy(req->buffer, data.data(), data.size());
        req->complete(data.size());
      }
    } else {
      r.unexpected[{from, tag}].push_back(std::move(data));
    }
    wake(to);
  }
  // A write's signal arrives at `to`. Under mu.
  void deliver_signal(int from, int to, uint64_t signal) {
    Rank& r = ranks[to];
    if (r.dead) return;
    auto it = r.expects.find({from, signal});
    if (it != r.expects.end()) {
      it->second->complete();
      r.expects.erase(it);
    } else {
      ++r.arrived[{from, signal}];
    }
    wake(to);
  }
};

namespace {

class Endpoint final : public Transport {
 public:
  Endpoint(std::shared_ptr<Fabric::State> state, int rank)
      : s_(std::move(state)), me_(rank), world_(static_cast<int>(s_->ranks.size())) {}

  std::string name() const override { return "loopback"; }
  std::string describe() const override { return "loopback (in-process ranks)"; }
  Bytes address(int, int) override { return Bytes(1, static_cast<uint8_t>(me_)); }
  void connect(int, const std::vector<Bytes>&) override {}

  std::shared_ptr<MemoryRegion> register_memory(void* base, size_t length) override {
    return std::make_shared<LoopbackRegion>(base, length);
  }
  std::unique_ptr<RemoteRegion> unpack_remote(int peer, uint64_t base, size_t length,
                                              std::span<const uint8_t>) override {
    check_peer(peer);
    return std::make_unique<RemoteRegion>(peer, base, length);
  }
  size_t max_message_bytes() const override { return s_->max_message; }
  bool needs_registered_source() const override { return false; }

  RequestPtr send(int peer, uint64_t tag, const void* data, size_t length) override {
    check_peer(peer);
    count_control_message();
    auto req = std::make_shared<LoopbackRequest>(peer);
    std::lock_guard lock(s_->mu);
    if (failed_here(*req)) return req;
    if (s_->ranks[peer].dead) {
      req->fail("rank " + std::to_string(peer) + " is gone");
      return req;
    }
    if (auto d = s_->drops.find({me_, peer}); d != s_->drops.end() && d->second > 0) {
      --d->second;
      req->complete();
      return req;
    }
    Bytes copy(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + length);
    auto* s = s_.get();
    const int me = me_;
    s_->route(me_, peer, [s, me, peer, tag, copy = std::move(copy)]() mutable {
      s->deliver_message(me, peer, tag, std::move(copy));
    });
    req->complete();
    return req;
  }

  RequestPtr recv(int peer, uint64_t tag, void* buffer, size_t capacity) override {
    check_peer(peer);
    auto req = std::make_shared<LoopbackRequest>(peer);
    req->buffer = static_cast<uint8_t*>(buffer);
    req->capacity = capacity;
    std::lock_guard lock(s_->mu);
    if (failed_here(*req)) return req;
    auto& r = s_->ranks[me_];
    auto it = r.unexpected.find({peer, tag});
    if (it != r.unexpected.end() && !it->second.empty()) {
      Bytes data = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) r.unexpected.erase(it);
      if (data.size() > capacity) {
        req->fail("message truncated: " + std::to_string(data.size()) + " bytes for a receive of " +
                  std::to_string(capacity));
      } else {
        if (!data.empty()) std::memcpy(buffer, data.data(), data.size());
        req->complete(data.size());
      }
    } else {
      r.receives[{peer, tag}].push_back(req);
    }
    return req;
  }

  RequestPtr write(const MemoryRegion& src, size_t src_offset, const RemoteRegion& dst,
                   size_t dst_offset, size_t length, uint64_t signal) override {
    const int peer = dst.peer();
    check_peer(peer);
    count_write(peer, length);
    auto req = std::make_shared<LoopbackRequest>(peer);
    std::lock_guard lock(s_->mu);
    if (failed_here(*req)) return req;
    if (s_->ranks[peer].dead) {
      req->fail("rank " + std::to_string(peer) + " is gone");
      return req;
    }
    const auto* from = static_cast<const uint8_t*>(src.base()) + src_offset;
    auto* to = reinterpret_cast<uint8_t*>(dst.base()) + dst_offset;
    auto* s = s_.get();
    const int me = me_;
    // The bytes move when the write is delivered, as a NIC reads the source when it sends.
    s_->route(me_, peer, [s, me, peer, from, to, length, signal, req] {
      if (s->ranks[peer].dead) {
        req->fail("rank " + std::to_string(peer) + " is gone");
        return;
      }
      if (length) std::memmove(to, from, length);
      s->deliver_signal(me, peer, signal);
      req->complete();
      s->wake(me);
    });
    return req;
  }

  RequestPtr expect(int peer, MemoryRegion&, size_t, size_t, uint64_t signal) override {
    check_peer(peer);
    auto req = std::make_shared<LoopbackRequest>(peer);
    std::lock_guard lock(s_->mu);
    if (failed_here(*req)) return req;
    auto& r = s_->ranks[me_];
    const Key key{peer, signal};
    if (r.expects.count(key)) {
      throw TransportError("loopback: a second expect of signal " + std::to_string(signal) +
                           " from rank " + std::to_string(peer) + " while the first is live");
    }
    if (auto it = r.arrived.find(key); it != r.arrived.end()) {
      if (--it->second == 0) r.arrived.erase(it);
      req->complete();
    } else {
      r.expects[key] = req;
    }
    return req;
  }

  void cancel(const RequestPtr& request) override {
    if (request->state() != Request::State::Pending) return;
    std::lock_guard lock(s_->mu);
    auto& r = s_->ranks[me_];
    std::erase_if(r.expects, [&](const auto& kv) { return kv.second == request; });
    for (auto it = r.receives.begin(); it != r.receives.end();) {
      std::erase_if(it->second, [&](const Ptr& p) { return p == request; });
      it = it->second.empty() ? r.receives.erase(it) : std::next(it);
    }
    request->fail("cancelled");
  }

  void release_token(uint64_t token, bool) override {
    // Early arrivals kept for a call that is over complete nothing later.
    std::lock_guard lock(s_->mu);
    std::erase_if(s_->ranks[me_].arrived,
                  [token](const auto& kv) { return signal_token(kv.first.second) == token; });
  }

  bool progress() override { return false; }  // everything is delivered as it happens
  bool prepare_wait() override { return true; }
  void wait_fds(std::vector<pollfd>& fds) override {
    fds.push_back({s_->ranks[me_].event_fd, POLLIN, 0});
  }
  void after_wait() override {
    uint64_t n = 0;
    [[maybe_unused]] const ssize_t r = ::read(s_->ranks[me_].event_fd, &n, sizeof n);
  }

  std::shared_ptr<MemoryRegion> allocate_mappable(size_t length) override {
    if (!length) return nullptr;
    auto region = std::make_shared<SharedRegion>(length);
    std::lock_guard lock(s_->mu);
    std::erase_if(s_->mappable, [](const auto& kv) { return kv.second.expired(); });
    s_->mappable[reinterpret_cast<uint64_t>(region->base())] = region;
    return region;
  }
  void* map_remote(int peer, uint64_t base, size_t, std::span<const uint8_t>) override {
    check_peer(peer);
    std::lock_guard lock(s_->mu);
    auto it = s_->mappable.find(base);
    std::shared_ptr<MemoryRegion> region = it == s_->mappable.end() ? nullptr : it->second.lock();
    if (!region) return nullptr;
    mapped_.emplace(region->base(), region);
    return region->base();
  }
  void unmap_remote(void* mapped) override {
    auto it = mapped_.find(mapped);
    if (it != mapped_.end()) mapped_.erase(it);
  }
  bool read_peer(int peer, uint64_t address, void* dst, size_t length) override {
    check_peer(peer);
    std::function<void(int, int)> hook;
    {
      std::lock_guard lock(s_->mu);
      if (!s_->reads) return false;
      hook = s_->read_hook;
      if (s_->ranks[me_].dead) throw PeerFailure("this rank was killed (loopback)");
      if (s_->ranks[peer].dead)
        throw PeerFailure("rank " + std::to_string(peer) + " was killed (loopback)");
      if (s_->unreadable.count(peer)) {
        throw TransportError("loopback: reading " + std::to_string(length) + " bytes of rank " +
                             std::to_string(peer) + ": its memory is not readable");
      }
    }
    if (hook) hook(me_, peer);
    if (length > 0) std::memcpy(dst, reinterpret_cast<const void*>(address), length);
    count_read(length);
    return true;
  }
  bool can_read_peer(int peer, uint64_t) override {
    check_peer(peer);
    std::lock_guard lock(s_->mu);
    return s_->reads && !s_->unreadable.count(peer) && !s_->ranks[peer].dead;
  }
  void doorbell(int peer) override {
    count_doorbell();
    std::lock_guard lock(s_->mu);
    s_->wake(peer);
  }

  std::optional<std::string> peer_failure(int peer) override {
    std::lock_guard lock(s_->mu);
    if (s_->ranks[peer].dead) return "rank " + std::to_string(peer) + " was killed (loopback)";
    return std::nullopt;
  }

 private:
  void check_peer(int peer) const {
    if (peer < 0 || peer >= world_) {
      throw TransportError("loopback: no rank " + std::to_string(peer) + " in a world of " +
                           std::to_string(world_));
    }
  }
  // A killed rank's own calls fail. Under mu.
  bool failed_here(Request& req) {
    if (!s_->ranks[me_].dead) return false;
    req.fail("this rank was killed (loopback)");
    return true;
  }

  std::shared_ptr<Fabric::State> s_;
  int me_;
  int world_;
  std::multimap<void*, std::shared_ptr<MemoryRegion>> mapped_;  // what map_remote() holds
};

}  // namespace

Fabric::Fabric(int world_size, size_t max_message_bytes) : state_(std::make_shared<State>()) {
  state_->max_message = max_message_bytes;
  state_->ranks.resize(static_cast<size_t>(world_size));
  for (auto& r : state_->ranks)
    r.event_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

Fabric::~Fabric() {
  for (auto& r : state_->ranks) {
    if (r.event_fd >= 0) ::close(r.event_fd);
  }
}

std::unique_ptr<Transport> Fabric::endpoint(int rank) {
  return std::make_unique<Endpoint>(state_, rank);
}

void Fabric::kill(int rank) {
  std::lock_guard lock(state_->mu);
  state_->ranks[rank].dead = true;
  for (int r = 0; r < static_cast<int>(state_->ranks.size()); ++r)
    state_->wake(r);
}

void Fabric::allow_reads(bool on) {
  std::lock_guard lock(state_->mu);
  state_->reads = on;
}

void Fabric::refuse_reads_from(int rank) {
  std::lock_guard lock(state_->mu);
  state_->unreadable.insert(rank);
}

void Fabric::on_read(std::function<void(int, int)> hook) {
  std::lock_guard lock(state_->mu);
  state_->read_hook = std::move(hook);
}

void Fabric::hold(int from, int to) {
  std::lock_guard lock(state_->mu);
  state_->holding.insert({from, to});
}

void Fabric::release(int from, int to) {
  std::lock_guard lock(state_->mu);
  state_->holding.erase({from, to});
  auto it = state_->held.find({from, to});
  if (it == state_->held.end()) return;
  auto queued = std::move(it->second);
  state_->held.erase(it);
  for (auto& deliver : queued)
    deliver();
}

void Fabric::drop(int from, int to, int n) {
  std::lock_guard lock(state_->mu);
  state_->drops[{from, to}] += n;
}

}  // namespace rdmacoll::transport::loopback
