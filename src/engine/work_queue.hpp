#pragma once
// Async work: each group runs its collectives in issue order, one at a time, as torch's
// ProcessGroupGloo does with its work queue. A blocking call on an idle group runs on the
// caller's thread (no hand-off: a thread wake-up costs more than an 8-byte collective); one
// issued with async_op, or behind outstanding work, goes to the group's worker thread, started
// on first use, so the caller is free until it waits. A caller that waits for work not yet
// started runs it (and whatever is queued before it) itself: torch issues every collective as
// async work and waits at once for a blocking one, which then never changes thread. The worker
// gives a waiter kStartDelay to do so before it starts queued work. Groups run on their own
// threads at once, sharing the process's transport (transport::make_serialized).

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
class GroupQueue;
struct QueueCore;
}  // namespace rdmacoll::engine

namespace rdmacoll::detail {

class WorkState;

// What carries a started operation on to its end (the point-to-point driver): a thread that
// waits for the operation helps it there instead of sleeping until another thread has.
class WorkHelper {
 public:
  virtual ~WorkHelper() = default;
  // Moves operations on until `work` has completed or the helper goes away.
  virtual void help(const WorkState& work) = 0;
};

// One issued collective: completion and its error.
class WorkState {
 public:
  explicit WorkState(std::string what) : what_(std::move(what)) {}
  void finish(std::exception_ptr error);
  bool completed() const;
  // Rethrows the collective's error; throws Timeout when `timeout` passes first (the
  // collective keeps running: wait again, or let the group's own timeout end it). Work not yet
  // started is run on this thread.
  void wait(std::optional<std::chrono::milliseconds> timeout) const;
  std::exception_ptr error() const;
  // Runs `callback(error)` once the work has finished: at once on this thread if it already
  // has, else on the thread that finishes it, before waiters are released. A callback that
  // throws makes its exception the work's error; one that destroys the work's group is safe
  // (the group's worker, which runs it, then ends on its own).
  void on_completion(std::function<void(std::exception_ptr)> callback);
  // For an operation started by a deferred queue item (GroupQueue::submit_deferred) that
  // finished while starting: the queue finishes it once the group is free again, as it
  // finishes every other item (a completion callback may destroy the group).
  void finish_when_started(std::exception_ptr error) {
    std::lock_guard lock(mu_);
    finished_early_ = true;
    early_error_ = error;
  }
  bool take_early_finish(std::exception_ptr& error) {
    std::lock_guard lock(mu_);
    if (!finished_early_) return false;
    finished_early_ = false;
    error = early_error_;
    return true;
  }
  // True on the thread that is starting this work from its own wait(): that thread helps it
  // to its end next, so whatever starts it need not wake another thread to carry it.
  bool started_by_its_waiter() const;
  // A waiter without a timeout helps `helper` carry the work to its end.
  void set_helper(std::weak_ptr<WorkHelper> helper) {
    std::lock_guard lock(mu_);
    helper_ = std::move(helper);
  }
  // The works a combined work (when_all) finishes with. Its waiter starts each of them and
  // helps each to its end, as it would one work of its own: left to the group's worker and the
  // point-to-point driver, a torch batch_isend_irecv waited for the worker's next poll.
  void set_parts(std::vector<std::weak_ptr<WorkState>> parts) {
    std::lock_guard lock(mu_);
    parts_ = std::move(parts);
  }
  // A receive's sender (global rank) once known, else -1.
  void set_source(int global_rank) { source_.store(global_rank, std::memory_order_release); }
  int source() const { return source_.load(std::memory_order_acquire); }

 private:
  friend class engine::GroupQueue;
  // wait()'s two halves, on this work or on each of its parts: run it here if it waits in its
  // queue, then help whatever carries it on.
  void start_here() const;
  void help_here() const;
  std::vector<std::shared_ptr<WorkState>> live_parts() const;
  std::string what_;
  std::weak_ptr<engine::QueueCore> queue_;       // where it waits to start, for a waiter to run it
  std::weak_ptr<WorkHelper> helper_;             // what moves it on once started, if not the queue
  std::vector<std::weak_ptr<WorkState>> parts_;  // a combined work's (set_parts)
  std::vector<std::function<void(std::exception_ptr)>> callbacks_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::atomic<int> source_{-1};
  bool finished_early_ = false;
  std::exception_ptr early_error_;
};

}  // namespace rdmacoll::detail

namespace rdmacoll::engine {

using detail::WorkState;

// A group's queue state, shared with the WorkStates waiting in it (they may outlive the
// GroupQueue's owner only while a waiter runs one of them; drain() waits for that).
struct QueueCore {
  struct Item {
    std::function<void()> op;
    // A deferred item's (submit_deferred), in place of `op`: starts the operation that
    // finishes `work` itself, later (one function, not one wrapped in another: each is an
    // allocation per send or receive).
    std::function<void(const std::shared_ptr<WorkState>&)> start;
    std::shared_ptr<WorkState> work;
    std::chrono::steady_clock::time_point queued_at;
    bool deferred() const { return static_cast<bool>(start); }
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Item> queue;
  // An operation of this group is running (on a caller or the worker). Whoever takes it pops
  // the queue's front before it lowers `queued`, so a caller that sees nothing queued and
  // takes it runs after everything issued earlier.
  std::atomic<bool> busy{false};
  std::atomic<size_t> queued{0};      // queue.size()
  std::atomic<bool> draining{false};  // drain() waits for an inline operation to end
  bool stop = false;
  // Wake-ups of the worker, under `mu`. A blocking torch call is issued as async work and
  // waited at once, so its caller runs it; waking the worker for it anyway cost two context
  // switches per call, which on a host with no idle core preempt a rank: a 1 MiB all-gather
  // through torch took 30% longer than from C++ (2 ranks, 2 cores). While waiters take the
  // work (`waiter_took_last`), the worker polls the queue every kInlinePoll instead of being
  // woken per submission, and sleeps until woken once a poll period passes with none.
  bool waiter_took_last = false;
  bool worker_asleep = false;      // in the untimed wait: a submission must wake it
  bool worker_waits_busy = false;  // waits for `busy` to clear: run_front must wake it
  std::chrono::steady_clock::time_point last_submit;

  bool try_acquire() {
    bool idle = false;
    return busy.compare_exchange_strong(idle, true, std::memory_order_acq_rel);
  }
  // Runs the front item (the caller holds `lock` and has acquired `busy`); returns its work.
  std::shared_ptr<WorkState> run_front(std::unique_lock<std::mutex>& lock);
  // Runs queued items on this thread up to and including `target`, if it is still queued and
  // the group is free; false when someone else has it (then wait for it normally).
  bool run_until(const WorkState* target);
};

class GroupQueue {
 public:
  // How long the worker leaves queued work to a waiter before it starts it itself.
  static constexpr std::chrono::microseconds kStartDelay{50};
  // How often the worker looks at the queue while callers run their own work (see
  // QueueCore::waiter_took_last): the longest an unwaited async call then waits to start.
  static constexpr std::chrono::microseconds kInlinePoll{1000};

  GroupQueue() : core_(std::make_shared<QueueCore>()) {}
  GroupQueue(const GroupQueue&) = delete;
  GroupQueue& operator=(const GroupQueue&) = delete;
  ~GroupQueue() { drain(); }

  // Runs `op` now on this thread when nothing of the group is outstanding; otherwise queues it
  // behind the outstanding work and waits for it. Rethrows what `op` throws.
  // The idle check takes no lock: two atomics instead of a mutex round trip, since blocking
  // small collectives are what DDP and FSDP issue thousands of times a second.
  template <typename F>
  void run(F&& op, const char* what) {
    QueueCore& c = *core_;
    if (c.queued.load(std::memory_order_acquire) != 0 || !c.try_acquire()) {
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
  // Queues `start(work)`, which starts an operation that finishes `work` itself when it ends
  // (point-to-point: the queue moves on once it is posted). If `start` throws, the work fails
  // with that.
  std::shared_ptr<WorkState> submit_deferred(
      std::function<void(const std::shared_ptr<WorkState>&)> start, const char* what);

  // Waits until every queued operation has finished and none runs, then ends the worker.
  void drain();

 private:
  void set_idle();
  void enqueue(QueueCore::Item item);
  static void worker(const std::shared_ptr<QueueCore>& core);

  std::shared_ptr<QueueCore> core_;
  std::thread thread_;
};

}  // namespace rdmacoll::engine
