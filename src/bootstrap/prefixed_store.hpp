#pragma once
// Every key of a store under a prefix: a store the caller hands in may outlive one process
// group (torch 1.13 keeps one TCPStore per port for the whole process), so each
// init_process_group over it works under a prefix of its own.

#include <memory>
#include <string>

#include "rdmacoll/store.hpp"

namespace rdmacoll::bootstrap {

class PrefixedStore final : public Store {
 public:
  PrefixedStore(std::string prefix, std::shared_ptr<Store> inner)
      : prefix_(std::move(prefix)), inner_(std::move(inner)) {}
  using Store::set;
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    inner_->set(prefix_ + key, value);
  }
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override {
    return inner_->get(prefix_ + key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return inner_->add(prefix_ + key, delta);
  }
  bool check(const std::string& key) override { return inner_->check(prefix_ + key); }
  std::vector<std::optional<std::vector<uint8_t>>> get_present(
      const std::vector<std::string>& keys) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const std::string& k : keys)
      full.push_back(prefix_ + k);
    return inner_->get_present(full);
  }
  std::string describe() const override { return inner_->describe(); }

 private:
  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

}  // namespace rdmacoll::bootstrap
