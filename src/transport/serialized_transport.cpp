// A transport shared by several threads: each group runs its collectives on one thread (the
// caller's, or its queue's worker for async work), and all groups share the process's one
// transport. UCX workers in single-thread mode and our transports' own state are not
// thread-safe, so every call runs under one lock; blocking is leader/follower: one thread
// polls the transport's fds without the lock, the others sleep on a condition variable until
// it (or any thread's progress) reports something. Uncontended, the lock is what it costs
// (docs/performance.md: 9% of a 64 KiB all-gather's samples on 2 ranks).

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "transport/transport.hpp"

namespace rdmacoll::transport {

namespace {

class SerializedTransport final : public Transport {
 public:
  explicit SerializedTransport(std::unique_ptr<Transport> inner)
      : inner_(std::move(inner)), wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~SerializedTransport() override {
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  std::string name() const override { return inner_->name(); }
  std::string describe() const override { return inner_->describe(); }

  Bytes address(int my_rank, int world_size) override {
    std::lock_guard lock(mu_);
    return inner_->address(my_rank, world_size);
  }
  void set_connection_store(std::shared_ptr<Store> store) override {
    std::lock_guard lock(mu_);
    inner_->set_connection_store(std::move(store));
  }
  bool needs_connection_store() const override { return inner_->needs_connection_store(); }
  void connect(int my_rank, const std::vector<Bytes>& addresses) override {
    std::lock_guard lock(mu_);
    inner_->connect(my_rank, addresses);
  }
  std::shared_ptr<MemoryRegion> register_memory(void* base, size_t length) override {
    std::lock_guard lock(mu_);
    return inner_->register_memory(base, length);
  }
  std::unique_ptr<RemoteRegion> unpack_remote(int peer, uint64_t base, size_t length,
                                              std::span<const uint8_t> packed_key) override {
    std::lock_guard lock(mu_);
    return inner_->unpack_remote(peer, base, length, packed_key);
  }
  size_t max_message_bytes() const override { return inner_->max_message_bytes(); }
  RequestPtr send(int peer, uint64_t tag, const void* data, size_t length) override {
    std::lock_guard lock(mu_);
    return posted(inner_->send(peer, tag, data, length));
  }
  RequestPtr recv(int peer, uint64_t tag, void* buffer, size_t capacity) override {
    std::lock_guard lock(mu_);
    return posted(inner_->recv(peer, tag, buffer, capacity));
  }
  bool needs_registered_source() const override { return inner_->needs_registered_source(); }
  size_t single_copy_bytes() const override { return inner_->single_copy_bytes(); }
  std::shared_ptr<MemoryRegion> pin_memory(void* base, size_t length) override {
    std::lock_guard lock(mu_);
    return inner_->pin_memory(base, length);
  }
  void forget_registration(const MemoryRegion& region) override {
    std::lock_guard lock(mu_);
    inner_->forget_registration(region);
  }
  uint64_t reserve_token() override {
    std::lock_guard lock(mu_);
    return inner_->reserve_token();
  }
  void release_token(uint64_t token, bool failed) override {
    std::lock_guard lock(mu_);
    inner_->release_token(token, failed);
  }
  RequestPtr write(const MemoryRegion& src, size_t src_offset, const RemoteRegion& dst,
                   size_t dst_offset, size_t length, uint64_t signal) override {
    std::lock_guard lock(mu_);
    return posted(inner_->write(src, src_offset, dst, dst_offset, length, signal));
  }
  RequestPtr expect(int peer, MemoryRegion& region, size_t offset, size_t length,
                    uint64_t signal) override {
    std::lock_guard lock(mu_);
    return posted(inner_->expect(peer, region, offset, length, signal));
  }
  std::shared_ptr<MemoryRegion> allocate_mappable(size_t length) override {
    std::lock_guard lock(mu_);
    return inner_->allocate_mappable(length);
  }
  void* map_remote(int peer, uint64_t base, size_t length,
                   std::span<const uint8_t> packed_key) override {
    std::lock_guard lock(mu_);
    return inner_->map_remote(peer, base, length, packed_key);
  }
  void free_mappable(const std::shared_ptr<MemoryRegion>& region) override {
    std::lock_guard lock(mu_);
    inner_->free_mappable(region);
  }
  void unmap_remote(void* mapped) override {
    std::lock_guard lock(mu_);
    inner_->unmap_remote(mapped);
  }
  // No lock: the inner transport's read_peer() is thread-safe, and a long copy must not hold
  // up the other threads' calls.
  bool read_peer(int peer, uint64_t address, void* dst, size_t length) override {
    return inner_->read_peer(peer, address, dst, length);
  }
  bool can_read_peer(int peer, uint64_t address) override {
    return inner_->can_read_peer(peer, address);
  }
  void doorbell(int peer) override {
    std::lock_guard lock(mu_);
    inner_->doorbell(peer);
  }
  void cancel(const RequestPtr& request) override {
    std::lock_guard lock(mu_);
    inner_->cancel(request);
  }

  bool progress() override {
    std::unique_lock lock(mu_);
    const bool any = inner_->progress();
    if (any) report_progress();
    seen_ = {this, progressed_};
    return any;
  }

  void wait_for_event(Clock::time_point deadline) override {
    std::unique_lock lock(mu_);
    if (Clock::now() >= deadline) return;
    // Another thread's progress since this thread last looked may have completed what this
    // one waits for (and consumed the event that would have woken it): look again first. The
    // window between a thread's last progress() and its wait here once cost a whole wait
    // (100 ms) per call with 4 threads on 4 groups over TCP.
    if (seen_.owner == this && seen_.progressed != progressed_) {
      seen_.progressed = progressed_;
      return;
    }
    const auto cap = std::min(deadline, Clock::now() + std::chrono::milliseconds(100));
    if (polling_) {
      // Another thread blocks in the transport: it reports what it sees.
      const uint64_t seen = epoch_;
      ++followers_;
      cv_.wait_until(lock, cap, [&] { return epoch_ != seen || !polling_; });
      --followers_;
      return;
    }
    if (!inner_->prepare_wait()) return;
    fds_.clear();
    inner_->wait_fds(fds_);
    if (wake_fd_ >= 0) fds_.push_back({wake_fd_, POLLIN, 0});
    std::vector<pollfd> fds;
    fds.swap(fds_);  // ours while the lock is released
    polling_ = true;
    lock.unlock();
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(cap - Clock::now()).count();
    ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(left + 1, 0)));
    lock.lock();
    polling_ = false;
    fds_.swap(fds);
    if (wake_fd_ >= 0) {
      uint64_t drained;
      [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &drained, sizeof drained);
    }
    inner_->after_wait();
    ++epoch_;
    if (followers_ > 0) cv_.notify_all();
  }
  // Blocking goes through wait_for_event() above; nobody calls these on the wrapper.
  bool prepare_wait() override { return false; }
  void wait_fds(std::vector<pollfd>&) override {}

  Statistics statistics() const override {
    std::lock_guard lock(mu_);
    return inner_->statistics();
  }
  std::optional<std::string> peer_failure(int peer) override {
    std::lock_guard lock(mu_);
    return inner_->peer_failure(peer);
  }
  void close_without_flush() override {
    std::lock_guard lock(mu_);
    inner_->close_without_flush();
  }
  bool peer_exited(int peer) override {
    std::lock_guard lock(mu_);
    return inner_->peer_exited(peer);
  }
  int peer_pid(int peer) const override {
    std::lock_guard lock(mu_);
    return inner_->peer_pid(peer);
  }

 private:
  // Called with the lock held after posting: the post may have started work only progress
  // moves on, with no event on the fds (UCX matching a receive to a rendezvous that came
  // before it, then reading over cma). A thread blocked in poll() wakes to progress it; without
  // this a send/recv pair of 16-64 KiB between two threads' waits took the whole 100 ms cap.
  RequestPtr posted(RequestPtr request) {
    wake_poller();
    return request;
  }

  // Called with the lock held after progress that may complete another thread's request: the
  // followers re-check, and the poller (whose fd event this thread may have consumed) wakes.
  void report_progress() {
    ++progressed_;
    if (followers_ > 0) {
      ++epoch_;
      cv_.notify_all();
    }
    wake_poller();
  }

  // With the lock held: a thread blocked in poll() on the fds returns and looks again.
  void wake_poller() {
    if (polling_ && wake_fd_ >= 0) {
      const uint64_t one = 1;
      [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
    }
  }

  std::unique_ptr<Transport> inner_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool polling_ = false;     // a thread is in poll() on the transport's fds
  int followers_ = 0;        // threads waiting for it on cv_
  uint64_t epoch_ = 0;       // bumped whenever waiting threads should look again
  uint64_t progressed_ = 0;  // progress() calls that found something, by any thread
  // What the calling thread saw of progressed_ at its last progress() on this transport.
  struct Seen {
    const void* owner = nullptr;
    uint64_t progressed = 0;
  };
  static thread_local Seen seen_;
  std::vector<pollfd> fds_;
  int wake_fd_;
};

thread_local SerializedTransport::Seen SerializedTransport::seen_;

}  // namespace

std::unique_ptr<Transport> make_serialized(std::unique_ptr<Transport> inner) {
  return std::make_unique<SerializedTransport>(std::move(inner));
}

}  // namespace rdmacoll::transport
