// barrier: one descriptor exchange, nothing else; its descriptors still carry the collective's
// name and a rank's own rejection, so a rank that called something else raises everywhere.

#include "engine/collectives/barrier.hpp"

#include "engine/call.hpp"
#include "engine/collectives/collectives.hpp"
#include "engine/control/agreement.hpp"
#include "engine/control/control_plane.hpp"

namespace rdmacoll::engine {

void barrier(Engine& e, GroupState& g, const BarrierArgs& args) {
  const std::string& local_error = args.local_error;
  check_usable(g, "barrier");
  if (g.size() == 1) {
    ++g.next_seq;
    if (!local_error.empty())
      throw InvalidArgument("barrier (" + g.describe() + "): " + local_error);
    return;
  }
  Call call(e.transport(), g, "barrier", e.spin());
  call.run([&] {
    CallDescriptor mine;
    mine.seq = call.seq();
    mine.group = g.id;
    mine.rank = g.rank;
    mine.collective = collectives::kBarrier.code;
    mine.ok = local_error.empty();
    mine.error = local_error;
    const std::vector<CallDescriptor>& all = exchange_descriptors(call, mine);
    if (!mine.ok) throw InvalidArgument(call.where() + ": " + local_error);
    check_same_collective(call, all);
    check_rejections(call, all);
  });
}

}  // namespace rdmacoll::engine
