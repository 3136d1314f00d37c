#pragma once
// A collective's data phase as plain data: per step, the one-sided writes this rank makes into
// its peers' advertised memory and the writes it expects into its own. Each collective builds
// one from its schedule (schedule/); engine/write_steps.hpp runs it. Kept in the group's
// scratch, so a call rebuilds it without allocating.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rdmacoll::engine {

// `length` bytes from source `source` (an index into the regions the collective hands the
// executor) at `from`, into `peer`'s advertised memory at `to`, carrying `signal` under the
// peer's token. `first` and `count` name the chunks for error messages.
struct PlannedWrite {
  int peer;
  int source;
  size_t from;
  size_t to;
  size_t length;
  uint32_t signal;
  int first;
  int count;
};

// `length` bytes at `at` of our advertised memory, written by `peer` with `signal` under our
// token.
struct PlannedArrival {
  int peer;
  size_t at;
  size_t length;
  uint32_t signal;
  int first;
  int count;
};

class WritePlan {
 public:
  // `target` names the memory peers advertise, for the bounds error ("output", "scratch").
  void clear(const char* target) {
    target_ = target;
    writes_.clear();
    arrivals_.clear();
    write_end_.clear();
    arrival_end_.clear();
  }
  void write(const PlannedWrite& w) { writes_.push_back(w); }
  void arrive(const PlannedArrival& a) { arrivals_.push_back(a); }
  // Closes the step the writes and arrivals since the last call belong to.
  void end_step() {
    write_end_.push_back(writes_.size());
    arrival_end_.push_back(arrivals_.size());
  }

  size_t steps() const { return write_end_.size(); }
  const char* target() const { return target_; }
  const std::vector<PlannedWrite>& writes() const { return writes_; }
  const std::vector<PlannedArrival>& arrivals() const { return arrivals_; }
  // Step s's writes are writes()[write_begin(s), write_end(s)); likewise its arrivals.
  size_t write_begin(size_t s) const { return s == 0 ? 0 : write_end_[s - 1]; }
  size_t write_end(size_t s) const { return write_end_[s]; }
  size_t arrival_begin(size_t s) const { return s == 0 ? 0 : arrival_end_[s - 1]; }
  size_t arrival_end(size_t s) const { return arrival_end_[s]; }

 private:
  const char* target_ = "output";
  std::vector<PlannedWrite> writes_;
  std::vector<PlannedArrival> arrivals_;
  std::vector<size_t> write_end_;
  std::vector<size_t> arrival_end_;
};

}  // namespace rdmacoll::engine
