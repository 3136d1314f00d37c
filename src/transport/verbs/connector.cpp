#include "transport/verbs/connector.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <random>

#include "rdmacoll/errors.hpp"

namespace rdmacoll::transport::verbs_impl {

Connector::Connector(std::shared_ptr<Store> store, std::chrono::milliseconds give_up_after)
    : store_(std::move(store)), give_up_after_(give_up_after) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0)
    throw TransportError(std::string("verbs: eventfd failed: ") + std::strerror(errno));
}

Connector::~Connector() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  ::close(wake_fd_);
}

// The thread starts with the first post or watch: a group that never connects over verbs has none.
void Connector::start_locked() {
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
}

void Connector::post(std::string key, Bytes value) {
  std::lock_guard lock(mu_);
  posts_.emplace_back(std::move(key), std::move(value));
  start_locked();
  cv_.notify_all();
}

void Connector::watch(std::string key) {
  std::lock_guard lock(mu_);
  watched_.push_back(std::move(key));
  look_now_ = true;
  start_locked();
  cv_.notify_all();
}

void Connector::unwatch(const std::string& key) {
  std::lock_guard lock(mu_);
  std::erase(watched_, key);
  arrived_.erase(key);
}

std::optional<Connector::Bytes> Connector::take(const std::string& key) {
  std::lock_guard lock(mu_);
  const auto it = arrived_.find(key);
  if (it != arrived_.end()) {
    Bytes v = std::move(it->second);
    arrived_.erase(it);
    return v;
  }
  if (!error_.empty()) throw TransportError(error_);
  return std::nullopt;
}

uint64_t Connector::store_errors() const {
  std::lock_guard lock(mu_);
  return store_errors_;
}

bool Connector::clear_wake() {
  uint64_t n = 0;
  return ::read(wake_fd_, &n, sizeof n) == sizeof n && n > 0;
}

void Connector::signal() {
  generation_.fetch_add(1, std::memory_order_acq_rel);
  const uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof one) < 0) {
    // Only EAGAIN (the counter is full): it is readable already.
  }
}

void Connector::run() {
  auto poll = kPollFirst;
  std::minstd_rand jitter(static_cast<uint32_t>(::getpid()));
  std::unique_lock lock(mu_);
  for (;;) {
    // Posts and new watches at once; watched keys every `poll`; else sleep until told.
    // A failing store is asked again only at the poll's pace, posts included.
    const auto told = [&] { return stop_ || (!failing_since_ && (!posts_.empty() || look_now_)); };
    if (watched_.empty() && posts_.empty() && !failing_since_) {
      cv_.wait(lock, told);
    } else {
      cv_.wait_for(lock, poll - poll * (jitter() % 256) / 1024, told);
    }
    if (stop_) return;
    if (!error_.empty()) {  // nothing more will come: wait to be stopped
      cv_.wait(lock, [&] { return stop_; });
      return;
    }
    std::deque<std::pair<std::string, Bytes>> posts;
    posts.swap(posts_);
    const std::vector<std::string> watched = watched_;
    const bool fresh = look_now_;
    look_now_ = false;
    lock.unlock();
    std::vector<std::pair<std::string, Bytes>> came;
    std::string failed;
    size_t posted = 0;
    try {
      for (; posted < posts.size(); ++posted)
        store_->set(posts[posted].first, posts[posted].second);
      // Every watched key in one request (Store::get_present): with hundreds of ranks
      // waiting on late peers, one request per key per poll flooded rank 0's store.
      if (!watched.empty()) {
        auto got = store_->get_present(watched);
        for (size_t i = 0; i < watched.size() && i < got.size(); ++i) {
          if (got[i]) came.emplace_back(watched[i], std::move(*got[i]));
        }
      }
    } catch (const std::exception& e) {
      failed = "verbs: connecting through the " + store_->describe() + ": " + e.what();
    }
    lock.lock();
    for (auto& [key, value] : came) {
      // Unwatched while we looked: its peer failed, nobody takes it.
      if (std::erase(watched_, key) > 0) arrived_[key] = std::move(value);
    }
    const auto now = std::chrono::steady_clock::now();
    if (failed.empty()) {
      failing_since_.reset();
    } else {
      // What was not posted goes first next time, in its order.
      posts_.insert(posts_.begin(), std::make_move_iterator(posts.begin() + posted),
                    std::make_move_iterator(posts.end()));
      ++store_errors_;
      if (!failing_since_) failing_since_ = now;
      if (now - *failing_since_ >= give_up_after_)
        error_ = failed + " (failing for " + std::to_string(give_up_after_.count()) + " ms)";
    }
    if (!came.empty() || !error_.empty()) signal();
    poll = !came.empty() || fresh ? kPollFirst : std::min(poll * 2, kPollMax);
  }
}

}  // namespace rdmacoll::transport::verbs_impl
