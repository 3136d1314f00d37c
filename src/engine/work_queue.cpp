#include "engine/work_queue.hpp"

#include <utility>

#include "rdmacoll/errors.hpp"

namespace rdmacoll::detail {
namespace {

// The waiter throws its own copy of an rdmacoll error. The stored one is shared with the thread
// that finished the work, and that thread may drop the last reference after the waiter has
// caught it; libstdc++ counts exception_ptr references where TSan cannot see, so that reads as a
// race. Copying while the waiter still holds the WorkState orders every use of the original
// before its destruction. Other types (a callback's own) are rethrown as they are.
[[noreturn]] void throw_own_copy(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(e.what());
  } catch (const Timeout& e) {
    throw Timeout(e.what());
  } catch (const PeerFailure& e) {
    throw PeerFailure(e.what());
  } catch (const TransportError& e) {
    throw TransportError(e.what());
  } catch (const Error& e) {
    throw Error(e.what());
  }
}

// The work this thread's wait() is starting (QueueCore::run_until), if any.
thread_local const WorkState* starting_own_wait = nullptr;

// Marks `work` as started by this thread's wait while it starts; restored however the start
// ends, and across a nested wait.
class StartingHere {
 public:
  explicit StartingHere(const WorkState* work) : saved_(std::exchange(starting_own_wait, work)) {}
  ~StartingHere() { starting_own_wait = saved_; }
  StartingHere(const StartingHere&) = delete;
  StartingHere& operator=(const StartingHere&) = delete;

 private:
  const WorkState* saved_;
};

}  // namespace

bool WorkState::started_by_its_waiter() const {
  return starting_own_wait == this;
}

void WorkState::finish(std::exception_ptr error) {
  // Callbacks run before waiters are released: one that throws makes its exception the work's
  // error (a throw must not end the worker thread, and with it the process).
  for (;;) {
    std::vector<std::function<void(std::exception_ptr)>> callbacks;
    {
      std::lock_guard lock(mu_);
      if (callbacks_.empty()) {
        error_ = error;
        done_ = true;
        cv_.notify_all();
        return;
      }
      callbacks.swap(callbacks_);
    }
    for (auto& cb : callbacks) {
      try {
        cb(error);
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
  }
}

void WorkState::on_completion(std::function<void(std::exception_ptr)> callback) {
  std::exception_ptr error;
  {
    std::lock_guard lock(mu_);
    if (!done_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
    error = error_;
  }
  // Already complete: the callback runs here, and what it throws becomes the work's error, as
  // it would on the completing thread; it never escapes into the caller's on_completion.
  try {
    callback(error);
  } catch (...) {
    std::lock_guard lock(mu_);
    if (!error_) error_ = std::current_exception();
  }
}

bool WorkState::completed() const {
  std::lock_guard lock(mu_);
  return done_;
}

std::exception_ptr WorkState::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

std::vector<std::shared_ptr<WorkState>> WorkState::live_parts() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<WorkState>> parts;
  for (const auto& weak : parts_) {
    if (auto part = weak.lock()) parts.push_back(std::move(part));
  }
  return parts;
}

void WorkState::start_here() const {
  for (const auto& part : live_parts())
    part->start_here();
  if (auto core = queue_.lock()) {
    const StartingHere starting(this);
    core->run_until(this);
  }
}

void WorkState::help_here() const {
  for (const auto& part : live_parts())
    part->help_here();
  std::shared_ptr<WorkHelper> helper;
  {
    std::lock_guard lock(mu_);
    if (!done_) helper = helper_.lock();
  }
  if (helper) helper->help(*this);
}

void WorkState::wait(std::optional<std::chrono::milliseconds> timeout) const {
  // Without a timeout, run it here if it has not started (a wait with one must return then).
  // Every part starts before any is helped: a batch's send may need its peer to see the
  // batch's receive first.
  if (!timeout && !completed()) {
    start_here();
    help_here();
  }
  std::unique_lock lock(mu_);
  if (timeout) {
    if (!cv_.wait_for(lock, *timeout, [&] { return done_; })) {
      throw Timeout(what_ + ": not completed within the wait's timeout of " +
                    std::to_string(timeout->count()) + " ms; it is still running");
    }
  } else {
    cv_.wait(lock, [&] { return done_; });
  }
  if (error_) throw_own_copy(error_);
}

}  // namespace rdmacoll::detail

namespace rdmacoll::engine {

std::shared_ptr<WorkState> QueueCore::run_front(std::unique_lock<std::mutex>& lock) {
  Item item = std::move(queue.front());
  queue.pop_front();
  queued.fetch_sub(1, std::memory_order_release);
  lock.unlock();
  const bool deferred = item.deferred();
  std::exception_ptr error;
  try {
    if (deferred) {
      item.start(item.work);
    } else {
      item.op();
    }
  } catch (...) {
    error = std::current_exception();
  }
  item.op = nullptr;
  item.start = nullptr;  // drop the operation's captures (tensors) before reporting completion
  // Idle before the waiter wakes: its next blocking call then runs on its own thread.
  busy.store(false, std::memory_order_release);
  // A deferred item's work finishes later, where its operation ends, unless it failed to
  // start or ended while starting.
  const bool finish_now = !deferred || error || item.work->take_early_finish(error);
  if (finish_now) item.work->finish(error);
  lock.lock();
  if (worker_waits_busy || draining.load()) cv.notify_all();
  return item.work;
}

bool QueueCore::run_until(const WorkState* target) {
  std::unique_lock lock(mu);
  for (;;) {
    bool queued_here = false;
    for (const Item& i : queue)
      queued_here = queued_here || i.work.get() == target;
    if (!queued_here || !try_acquire()) return false;
    waiter_took_last = true;
    const bool deferred = queue.front().deferred();
    if (run_front(lock).get() != target) continue;
    // A send or receive waits for its peer, which may wait for what this rank issued after it
    // (irecv, isend, then a wait on the receive): the point-to-point operations queued right
    // behind it start too, as MPI starts each at its issue. Starting one only posts it. They
    // count as this thread's own, so starting them wakes no one: the waiter usually waits for
    // them next (each part of a batch), and the point-to-point driver looks for any left
    // unattended on its own (p2p.hpp).
    while (deferred && !queue.empty() && queue.front().deferred() && try_acquire()) {
      const detail::StartingHere starting(queue.front().work.get());
      run_front(lock);
    }
    return true;
  }
}

std::shared_ptr<WorkState> GroupQueue::submit_deferred(
    std::function<void(const std::shared_ptr<WorkState>&)> start, const char* what) {
  auto work = std::make_shared<WorkState>(what);
  QueueCore::Item item;
  item.start = std::move(start);
  item.work = work;
  enqueue(std::move(item));
  return work;
}

std::shared_ptr<WorkState> GroupQueue::submit(std::function<void()> op, const char* what) {
  auto work = std::make_shared<WorkState>(what);
  QueueCore::Item item;
  item.op = std::move(op);
  item.work = work;
  enqueue(std::move(item));
  return work;
}

void GroupQueue::enqueue(QueueCore::Item item) {
  item.work->queue_ = core_;
  QueueCore& c = *core_;
  std::lock_guard lock(c.mu);
  c.last_submit = std::chrono::steady_clock::now();
  item.queued_at = c.last_submit;
  c.queue.push_back(std::move(item));
  c.queued.fetch_add(1, std::memory_order_release);
  if (!thread_.joinable()) {
    c.stop = false;
    // The worker holds the queue's state itself: a completion callback may free the group
    // (and this GroupQueue) while the worker runs it (drain defers then).
    thread_ = std::thread([core = core_] { worker(core); });
  }
  // A polling worker finds it within kInlinePoll, by which time a waiter has usually run it.
  if (c.worker_asleep || !c.waiter_took_last) c.cv.notify_all();
}

void GroupQueue::set_idle() {
  QueueCore& c = *core_;
  c.busy.store(false, std::memory_order_release);
  if (c.queued.load(std::memory_order_acquire) != 0 || c.draining.load()) {
    std::lock_guard lock(c.mu);  // the worker checks busy under it: no lost wake-up
    c.cv.notify_all();
  }
}

void GroupQueue::worker(const std::shared_ptr<QueueCore>& core) {
  QueueCore& c = *core;
  std::unique_lock lock(c.mu);
  for (;;) {
    if (c.queue.empty()) {
      if (c.stop) return;  // stopping, and nothing left
      if (c.waiter_took_last && std::chrono::steady_clock::now() - c.last_submit < kInlinePoll) {
        c.cv.wait_for(lock, kInlinePoll);
      } else {
        c.worker_asleep = true;
        c.cv.wait(lock, [&] { return !c.queue.empty() || c.stop; });
        c.worker_asleep = false;
      }
      continue;
    }
    // A waiter may take it within the start delay (no hand-off for a blocking torch call).
    const auto start = c.queue.front().queued_at + kStartDelay;
    if (!c.stop && std::chrono::steady_clock::now() < start) {
      c.cv.wait_until(lock, start);
      continue;
    }
    if (!c.try_acquire()) {
      c.worker_waits_busy = true;
      c.cv.wait(lock, [&] { return c.queue.empty() || !c.busy.load(); });
      c.worker_waits_busy = false;
      continue;
    }
    c.waiter_took_last = false;
    c.run_front(lock);
  }
}

void GroupQueue::drain() {
  QueueCore& c = *core_;
  std::thread t;
  if (thread_.joinable() && thread_.get_id() == std::this_thread::get_id()) {
    // From a completion callback on the worker itself (it destroyed its group): the worker
    // cannot wait for itself. It ends once the callback returns; work still queued would run
    // on a group that is going away, so it fails instead.
    std::deque<QueueCore::Item> left;
    {
      std::lock_guard lock(c.mu);
      c.stop = true;
      left.swap(c.queue);
      c.queued.store(0, std::memory_order_release);
    }
    for (auto& item : left) {
      item.op = nullptr;
      item.start = nullptr;
      item.work->finish(std::make_exception_ptr(
          InvalidArgument(item.work->what_ + ": its group was destroyed (from a completion "
                                             "callback) before it started")));
    }
    thread_.detach();
    return;
  }
  {
    std::unique_lock lock(c.mu);
    c.draining = true;
    c.stop = true;
    c.cv.notify_all();
    t = std::move(thread_);
  }
  if (t.joinable()) t.join();  // the worker runs the queue empty before it returns
  // A waiter may still be running one of our items on its thread.
  std::unique_lock lock(c.mu);
  c.cv.wait(lock, [&] { return c.queue.empty() && !c.busy.load(); });
  c.draining = false;
}

}  // namespace rdmacoll::engine
