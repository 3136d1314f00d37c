#pragma once
// Async work: each group runs its collectives in issue order, one at a time, as torch's
// ProcessGroupGloo does with its work queue. A blocking call on an idle group runs on the
// caller's thread (no hand-off: a thread wake-up costs more than an 8-byte collective); one
// issued with async_op, or behind outstanding work, goes to the group's worker thread, started
// on first use, so the caller is free until it waits. Groups run on their own threads at once,
// sharing the process's transport (transport::make_serialized).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace rdmacoll::engine {

// One issued collective: completion and its error.
class WorkState {
 public:
  explicit WorkState(std::string what) : what_(std::move(what)) {}
  void finish(std::exception_ptr error);
  bool completed() const;
  // Rethrows the collective's error; throws Timeout when `timeout` passes first (the
  // collective keeps running: wait again, or let the group's own timeout end it).
  void wait(std::optional<std::chrono::milliseconds> timeout) const;
  std::exception_ptr error() const;
  // Runs `callback(error)` once the work has finished: at once on this thread if it already
  // has, else on the thread that finishes it, after waiters are released.
  void on_completion(std::function<void(std::exception_ptr)> callback);

 private:
  std::string what_;
  std::vector<std::function<void(std::exception_ptr)>> callbacks_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class GroupQueue {
 public:
  GroupQueue() = default;
  GroupQueue(const GroupQueue&) = delete;
  GroupQueue& operator=(const GroupQueue&) = delete;
  ~GroupQueue() { drain(); }

  // Runs `op` now on this thread when nothing of the group is outstanding; otherwise queues it
  // behind the outstanding work and waits for it. Rethrows what `op` throws.
  // The idle check takes no lock: two atomics instead of a mutex round trip, since blocking
  // small collectives are what DDP and FSDP issue thousands of times a second.
  template <typename F>
  void run(F&& op, const char* what) {
    if (queued_.load(std::memory_order_acquire) != 0 || !try_acquire()) {
      submit(std::function<void()>(std::forward<F>(op)), what)->wait(std::nullopt);
      return;
    }
    struct Idle {
      GroupQueue& q;
      ~Idle() { q.set_idle(); }
    } idle{*this};
    op();
  }

  // Queues `op` for the group's worker thread.
  std::shared_ptr<WorkState> submit(std::function<void()> op, const char* what);

  // Waits until every queued operation has finished, then ends the worker thread.
  void drain();

 private:
  bool try_acquire() {
    bool idle = false;
    return busy_.compare_exchange_strong(idle, true, std::memory_order_acq_rel);
  }
  void set_idle();
  void worker();

  struct Item {
    std::function<void()> op;
    std::shared_ptr<WorkState> work;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  // An operation of this group is running (on a caller or the worker). The worker takes it
  // before it lowers queued_, so a caller that sees nothing queued and takes it runs after
  // everything issued earlier.
  std::atomic<bool> busy_{false};
  std::atomic<size_t> queued_{0};  // queue_.size()
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace rdmacoll::engine
