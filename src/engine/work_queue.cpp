#include "engine/work_queue.hpp"

#include "rdmacoll/errors.hpp"

namespace rdmacoll::engine {

void WorkState::finish(std::exception_ptr error) {
  std::vector<std::function<void(std::exception_ptr)>> callbacks;
  {
    std::lock_guard lock(mu_);
    error_ = error;
    done_ = true;
    callbacks.swap(callbacks_);
    cv_.notify_all();
  }
  for (auto& cb : callbacks)
    cb(error);
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
  callback(error);
}

bool WorkState::completed() const {
  std::lock_guard lock(mu_);
  return done_;
}

std::exception_ptr WorkState::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

void WorkState::wait(std::optional<std::chrono::milliseconds> timeout) const {
  std::unique_lock lock(mu_);
  if (timeout) {
    if (!cv_.wait_for(lock, *timeout, [&] { return done_; })) {
      throw Timeout(what_ + ": not completed within the wait's timeout of " +
                    std::to_string(timeout->count()) + " ms; it is still running");
    }
  } else {
    cv_.wait(lock, [&] { return done_; });
  }
  if (error_) std::rethrow_exception(error_);
}

std::shared_ptr<WorkState> GroupQueue::submit(std::function<void()> op, const char* what) {
  auto work = std::make_shared<WorkState>(what);
  std::lock_guard lock(mu_);
  queue_.push_back({std::move(op), work});
  queued_.fetch_add(1, std::memory_order_release);
  if (!thread_.joinable()) {
    stop_ = false;
    thread_ = std::thread([this] { worker(); });
  }
  cv_.notify_all();
  return work;
}

void GroupQueue::set_idle() {
  busy_.store(false, std::memory_order_release);
  if (queued_.load(std::memory_order_acquire) != 0) {
    std::lock_guard lock(mu_);  // the worker checks busy_ under it: no lost wake-up
    cv_.notify_all();
  }
}

void GroupQueue::worker() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return (!queue_.empty() && try_acquire()) || (stop_ && queue_.empty()); });
    if (queue_.empty()) return;  // stopping, and nothing left
    Item item = std::move(queue_.front());
    queue_.pop_front();
    queued_.fetch_sub(1, std::memory_order_release);
    lock.unlock();
    std::exception_ptr error;
    try {
      item.op();
    } catch (...) {
      error = std::current_exception();
    }
    item.op = nullptr;  // drop the operation's captures (tensors) before reporting completion
    // Idle before the waiter wakes: its next blocking call then runs on its own thread.
    busy_.store(false, std::memory_order_release);
    item.work->finish(error);
    lock.lock();
    cv_.notify_all();
  }
}

void GroupQueue::drain() {
  std::thread t;
  {
    std::unique_lock lock(mu_);
    stop_ = true;
    cv_.notify_all();
    t = std::move(thread_);
  }
  if (t.joinable()) t.join();  // the worker runs the queue empty before it returns
}

}  // namespace rdmacoll::engine
