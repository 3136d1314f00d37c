#pragma once
// Ring-step mode's guard (exchange_descriptors with DescriptorsNeeded::Successor): a rank may see
// only its ring successor's descriptor, so a disagreement is found by the rank before it and by
// nobody else. Errors then spread along the ring: a rank that leaves the call with an error
// tells both ring neighbours, and a rank whose wait goes idle listens for their reports and
// raises what they say. A Call holds one from the moment its exchange takes that mode; the
// call's waits and its failure path (Call::run) consult it.

#include <vector>

#include "engine/pending.hpp"

namespace rdmacoll::engine {

class Call;

class RingGuard {
 public:
  // `pred` and `succ` are group ranks.
  RingGuard(Call& call, int pred, int succ) : call_(call), neighbour_{pred, succ} {}
  ~RingGuard();  // cancels the receives still waiting for reports
  RingGuard(const RingGuard&) = delete;
  RingGuard& operator=(const RingGuard&) = delete;

  // From an idle wait: posts the receives for the neighbours' reports, once. Listening costs
  // two receives (and their cancels), so only calls that wait pay it.
  void listen();
  // Raises a neighbour's report (InvalidArgument) once it has come; nothing before listen().
  void check();
  // Whether spread() has begun: the failure path is running.
  bool spreading() const { return spreading_; }
  // A write of ours was refused because the call is over at the successor: its report says
  // why, and spread() passes those words on.
  void refused() { refused_ = true; }
  // Sends our error to both neighbours and waits for theirs: a ring rank writes into its
  // successor's output before anyone has seen every descriptor, so the successor returns only
  // after its predecessor's report, which follows the predecessor's last write. Failing that
  // (a dead neighbour, the deadline), the group is marked broken. Runs once: false when it had
  // already run. Never throws.
  bool spread() noexcept;

 private:
  Call& call_;
  int neighbour_[2];            // predecessor, successor
  std::vector<Pending> watch_;  // the neighbours' error reports, once posted
  bool spreading_ = false;
  bool refused_ = false;
};

}  // namespace rdmacoll::engine
