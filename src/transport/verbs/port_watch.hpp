#pragma once
// Our port's link over time (IBV_EVENT_PORT_ERR and PORT_ACTIVE), as plain data so that it is
// unit-tested. A port that goes down is a warning, not a failure: a link retrain or a subnet
// manager's sweep brings it back within seconds and RC retries ride that out, as NCCL's net_ib
// treats PORT_ERR; nothing new is posted meanwhile. Peers fail through their completions'
// errors, or all together once the port has been down for longer than the QPs' retry budget
// (RDMACOLL_IB_TIMEOUT x (RDMACOLL_IB_RETRY_CNT + 1)).

#include <chrono>
#include <optional>

namespace rdmacoll::transport::verbs_impl {

class PortWatch {
 public:
  using Clock = std::chrono::steady_clock;

  explicit PortWatch(std::chrono::milliseconds budget = {}) : budget_(budget) {}

  std::chrono::milliseconds budget() const { return budget_; }
  bool down() const { return since_.has_value(); }

  // PORT_ERR at `now`: true when the port was up until now (the outage starts; a repeated
  // event does not move its start).
  bool went_down(Clock::time_point now) {
    if (since_) return false;
    since_ = now;
    return true;
  }
  // PORT_ACTIVE at `now`: how long the outage lasted, if there was one.
  std::optional<std::chrono::milliseconds> came_up(Clock::time_point now) {
    if (!since_) return std::nullopt;
    const auto lasted = std::chrono::duration_cast<std::chrono::milliseconds>(now - *since_);
    since_.reset();
    return lasted;
  }
  // Whether the outage has outlasted the budget at `now`: the port is then asked once more
  // (its PORT_ACTIVE may have been missed), and the peers fail if it is still down.
  bool past_budget(Clock::time_point now) const { return since_ && now - *since_ >= budget_; }
  // The outage ended in the peers' failure: a later PORT_ERR starts a new one.
  void gave_up() { since_.reset(); }

 private:
  std::chrono::milliseconds budget_;
  std::optional<Clock::time_point> since_;
};

}  // namespace rdmacoll::transport::verbs_impl
