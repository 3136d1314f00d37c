// A store in this process, as torch's is when handed in: what unit tests of the store's users run
// over. It counts each thread's requests, can hold every request until released, and can go away
// (requests fail as they do when the store's server is gone).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "bootstrap/store.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::testing {

class MemoryStore final : public Store {
 public:
  using Bytes = std::vector<uint8_t>;
  using Store::set;

  void set(const std::string& key, const Bytes& value) override {
    std::unique_lock lock(mu_);
    enter(lock, key, false);
    kv_[key] = value;
    cv_.notify_all();
  }
  // Waits up to `timeout` for the key, as the real store's get does.
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mu_);
    enter(lock, key, false);
    if (!cv_.wait_for(lock, timeout, [&] { return kv_.count(key) > 0; }))
      throw Timeout("no key " + key);
    return kv_[key];
  }
  int64_t add(const std::string& key, int64_t delta) override {
    std::unique_lock lock(mu_);
    enter(lock, key, false);
    auto& v = kv_[key];
    int64_t n = v.empty() ? 0 : std::stoll(std::string(v.begin(), v.end()));
    n += delta;
    const std::string t = std::to_string(n);
    v.assign(t.begin(), t.end());
    cv_.notify_all();
    return n;
  }
  bool check(const std::string& key) override {
    std::unique_lock lock(mu_);
    enter(lock, key, true);
    return kv_.count(key) > 0;
  }

  // While on, every request waits (the store is slow or stuck).
  void hold(bool on) {
    std::lock_guard lock(mu_);
    held_ = on;
    cv_.notify_all();
  }
  // From now on every request fails.
  void go_away() { go_away_for_checks_on("", false); }
  // From now on asking whether a key containing `part` exists fails; with checks_only false,
  // every request on such a key does.
  void go_away_for_checks_on(std::string part, bool checks_only = true) {
    std::lock_guard lock(mu_);
    gone_part_ = std::move(part);
    gone_checks_only_ = checks_only;
    gone_ = true;
    cv_.notify_all();
  }
  // Requests succeed again.
  void come_back() {
    std::lock_guard lock(mu_);
    gone_ = false;
    cv_.notify_all();
  }
  // Whether the key is there, without counting as a request.
  bool has(const std::string& key) {
    std::lock_guard lock(mu_);
    return kv_.count(key) > 0;
  }
  // This thread's requests so far.
  static inline thread_local int requests = 0;

 private:
  bool gone_for(const std::string& key, bool is_check) const {
    return gone_ && (is_check || !gone_checks_only_) && key.find(gone_part_) != std::string::npos;
  }
  void enter(std::unique_lock<std::mutex>& lock, const std::string& key, bool is_check) {
    ++requests;
    cv_.wait(lock, [&] { return !held_ || gone_for(key, is_check); });
    if (gone_for(key, is_check)) throw PeerFailure("the store went away");
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> kv_;
  bool held_ = false;
  bool gone_ = false;
  bool gone_checks_only_ = true;
  std::string gone_part_;
};

}  // namespace rdmacoll::testing
