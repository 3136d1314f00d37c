#pragma once
// torch's c10d::Store as an rdmacoll::Store: the store torch hands a backend is where its
// groups rendezvous.

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <rdmacoll/errors.hpp>
#include <rdmacoll/store.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace rdmacoll_torch {

// rdmacoll expects its own errors: a store that went away (rank 0, which hosts torch's
// TCPStore, exited) is a PeerFailure.
template <typename F>
auto store_guarded(F&& f) {
  try {
    return f();
  } catch (const rdmacoll::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw rdmacoll::PeerFailure(std::string("torch's store failed: ") + e.what());
  }
}

// get() never lets a wait on torch's store time out: torch 1.13's TCPStore leaves a timed-out
// wait pending on its server, whose answer arrives when the key is set and is read as the
// reply to the connection's next command (docs/torch.md). rdmacoll waits in short slices, so
// get() polls check() instead, at an interval that grows with the time already waited: an
// eighth of it, 100 us to 20 ms.
class TorchStore final : public rdmacoll::Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  using rdmacoll::Store::set;
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    store_guarded([&] { store_->set(key, value); });
  }
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    while (!check(key)) {
      const auto waited = Clock::now() - start;
      if (waited >= timeout) {
        throw rdmacoll::Timeout("timed out after " + std::to_string(timeout.count()) +
                                " ms waiting for key '" + key + "' in torch's store");
      }
      std::this_thread::sleep_for(std::clamp<Clock::duration>(
          waited / 8, std::chrono::microseconds(100), std::chrono::milliseconds(20)));
    }
    return store_guarded([&] { return store_->get(key); });
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return store_guarded([&] { return store_->add(key, delta); });
  }
  bool check(const std::string& key) override {
    return store_guarded([&] { return store_->check({key}); });
  }
  std::string describe() const override { return "torch store"; }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace rdmacoll_torch
