// What the folds through symmetric memory share (all_reduce.cpp, reduce_scatter.cpp): one call
// whose descriptors name the window, a fold straight out of every member's part, a barrier.

#include "engine/call.hpp"
#include "engine/collectives/collectives.hpp"
#include "engine/collectives/reduce_scratch.hpp"
#include "engine/control/agreement.hpp"
#include "engine/control/control_plane.hpp"
#include "engine/reduce.hpp"
#include "engine/symmetric.hpp"

namespace rdmacoll::engine {

bool run_on_window(Engine& e, GroupState& g, const char* name, const void* tensor, size_t bytes,
                   const std::string& local_error,
                   const std::function<CallDescriptor(Call&)>& describe,
                   const std::function<void(const Window&, size_t offset)>& body) {
  size_t offset = 0;
  const std::shared_ptr<Window> w =
      local_error.empty() ? find_window(&g, g.digest, tensor, bytes, offset) : nullptr;
  if (!w) return false;
  transport::Transport& t = e.transport();
  Call call(t, g, name, e.spin());
  bool done = false;
  call.run([&] {
    CallDescriptor mine = describe(call);
    mine.window = w->id;
    mine.window_offset = offset;
    check_descriptors(call, exchange_descriptors(call, mine));
    body(*w, offset);
    done = true;
  });
  // Only after a body that ran everywhere: a raising call has already told every member.
  if (done) barrier(e, g);
  return true;
}

void fold_members(GroupState& g, const Window& w, size_t at, uint8_t* dst, DType dtype, ReduceOp op,
                  size_t n) {
  const int p = g.size();
  auto& chunks = g.scratch.get<ReduceScratch>().chunks;
  chunks.resize(p);
  for (int r = 0; r < p; ++r)
    chunks[r] = w.base[r] + at;
  reduce_chunks(dst, chunks.data(), dtype, op, p, n);
}

}  // namespace rdmacoll::engine
