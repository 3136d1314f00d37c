// Bruck's rounds of all_to_all for small equal pieces (all_to_all_parts.hpp).

#include <string>
#include <vector>

#include "engine/collectives/all_to_all_parts.hpp"
#include "engine/control/control_plane.hpp"
#include "engine/message_steps.hpp"
#include "schedule/bruck_all_to_all.hpp"
#include "schedule/schedule.hpp"

namespace rdmacoll::engine::all_to_all_parts {

bool offers_bruck(int p, size_t piece, bool fits_inline, int hosts, size_t max_message,
                  const std::optional<schedule::Algorithm>& forced) {
  if (piece == 0 || piece * static_cast<size_t>(p / 2) > max_message) return false;
  if (forced) return *forced == schedule::Algorithm::Bruck;
  return !fits_inline && schedule::choose_all_to_all(p, piece, hosts) == schedule::Algorithm::Bruck;
}

// Bruck's rounds (schedule/bruck_all_to_all.hpp): log p steps of one control message each way,
// the slots staged in the group's scratch. Receives are posted up front: each step's sender is
// a different member, so the pieces' tags (index: the sender) stay apart.
void bruck_rounds(Call& call, uint8_t* out, const uint8_t* in, size_t piece) {
  GroupState& g = call.group();
  const int p = g.size();
  const int me = g.rank;
  const std::vector<schedule::SlotStep> steps = schedule::bruck_all_to_all(p, me);
  const size_t most = static_cast<size_t>(p / 2) * piece;  // a step's message at most
  auto& buf = g.scratch.get<AllToAllScratch>().bruck;
  buf.resize(static_cast<size_t>(p) * piece + (steps.size() + 1) * most);
  uint8_t* staging = buf.data();
  uint8_t* packed = staging + static_cast<size_t>(p) * piece;  // the message being sent
  uint8_t* arrived = packed + most;                            // step k's at k * most
  // Slot i starts with our piece for member me + i: the input rotated by me pieces.
  const size_t head = static_cast<size_t>(me) * piece;
  std::memcpy(staging, in + head, static_cast<size_t>(p) * piece - head);
  std::memcpy(staging + static_cast<size_t>(p) * piece - head, in, head);
  MessageSteps messages(call, TagKind::Piece, MessageSteps::Carries::Data);
  for (size_t k = 0; k < steps.size(); ++k) {
    const int from = steps[k].from;
    messages.expect(from, static_cast<uint32_t>(from), arrived + k * most, most);
  }
  for (size_t k = 0; k < steps.size(); ++k) {
    const schedule::SlotStep& step = steps[k];
    size_t bytes = 0;
    for (const schedule::Transfer& run : step.slots) {
      const size_t n = static_cast<size_t>(run.count) * piece;
      std::memcpy(packed + bytes, staging + static_cast<size_t>(run.first) * piece, n);
      bytes += n;
    }
    // The transport keeps its own copy of a control message: `packed` is free again at once.
    messages.send(step.to, static_cast<uint32_t>(me), packed, bytes);
    messages.wait_exactly(k, bytes, "the all_to_all's Bruck steps");
    const uint8_t* src = arrived + k * most;
    for (const schedule::Transfer& run : step.slots) {
      const size_t n = static_cast<size_t>(run.count) * piece;
      std::memcpy(staging + static_cast<size_t>(run.first) * piece, src, n);
      src += n;
    }
  }
  for (int r = 0; r < p; ++r) {
    std::memcpy(out + static_cast<size_t>(r) * piece,
                staging + static_cast<size_t>(schedule::final_slot(p, me, r)) * piece, piece);
  }
  messages.wait_all();
}

}  // namespace rdmacoll::engine::all_to_all_parts
