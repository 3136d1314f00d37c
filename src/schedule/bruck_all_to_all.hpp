#pragma once
// Bruck's all-to-all as plain data, for equal pieces: log p steps of one message each way
// instead of p - 1, each carrying up to p/2 pieces, so it wins when pieces are small and p is
// large (latency-bound). A rank keeps p staging slots: slot i starts with its piece for member
// (rank + i) mod p. At step k (d = 2^k) it sends every slot whose index has bit k set to
// (rank + d) mod p and receives the same slots from (rank - d) mod p, in place. A slot moves
// forward by the sum of its index's bits, i.e. by i, so at the end slot i holds the piece
// member (rank - i) mod p sent this rank (bruck_all_to_all_test proves it for every p up to
// 130).

#include <vector>

#include "schedule/schedule.hpp"

namespace rdmacoll::schedule {

// A step's runs of staging slots: Transfer::first and count index slots, not chunks. Every
// step has one send and one receive peer, the same runs both ways.
struct SlotStep {
  int to;
  int from;
  std::vector<Transfer> slots;  // runs of slots with bit k set; peer = to
};

std::vector<SlotStep> bruck_all_to_all(int p, int rank);

// Where the rank's piece for member j starts the staging slots, and where the piece from member
// r ends up.
inline int initial_slot(int p, int rank, int j) {
  return (j - rank + p) % p;
}
inline int final_slot(int p, int rank, int r) {
  return (rank - r + p) % p;
}

}  // namespace rdmacoll::schedule
