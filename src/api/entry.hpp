#pragma once
// What the collectives' entry points (collectives.cpp, rooted.cpp, all_to_all.cpp) share:
// issuing a call on the caller's thread or the group's worker, and the argument checks more
// than one of them makes. Internal to src/api.

#include <string>
#include <utility>

#include "engine/group_state.hpp"
#include "rdmacoll/tensor.hpp"
#include "rdmacoll/work.hpp"

namespace rdmacoll::api {

// Runs `body` on this thread (behind the group's outstanding work), or queues what
// `make_async` returns (a body owning copies of the tensor handles) for the group's worker.
// The copies are made only for async work: a blocking call allocates nothing here.
template <typename Body, typename MakeAsync>
Work issue(GroupState& g, bool async_op, const char* what, Body&& body, MakeAsync&& make_async) {
  if (!async_op) {
    g.queue.run(std::forward<Body>(body), what);
    return Work();
  }
  return Work(g.queue.submit(make_async(), what));
}

// Sets `error` when `output` is not the flat (p*n, ...) or stacked (p, n, ...) gather of
// `input` over p ranks, or overlaps it other than as this rank's own slot.
void check_all_gather_args(const Tensor& output, const Tensor& input, int p, int rank,
                           std::string& error);

// The group rank of global rank `global` (a root: src, dst); when it is no member, sets
// `error` (if still empty) naming `role` and returns 0.
int group_root(const GroupState& g, int global, const char* role, std::string& error);

}  // namespace rdmacoll::api
