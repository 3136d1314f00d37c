#pragma once
// How the ranks exchange a value each through the store (Rendezvous::all_gather) without every
// rank reading every other rank's key: p reads each would be p^2 requests to rank 0's
// single-threaded store, about 16.8 million at p = 4096 for each of init's exchanges. Instead
// the ranks form blocks of about sqrt(p); each block's first rank (its leader) reads its
// members' keys and posts them as one block, and every rank reads the blocks. A rank then
// makes about sqrt(p) requests, a leader about 2 sqrt(p); the bytes are the same. Plain data:
// the plan says what each rank reads and posts; the rendezvous does the store I/O.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rdmacoll::bootstrap {

class StoreGather {
 public:
  // The plan for `world` ranks (>= 1).
  explicit StoreGather(int world);

  int block_size() const { return block_; }
  int blocks() const { return (world_ + block_ - 1) / block_; }
  int block_of(int rank) const { return rank / block_; }
  int first_of(int block) const { return block * block_; }
  int end_of(int block) const;  // one past its last rank
  bool leads(int rank) const { return rank % block_ == 0; }

  // What `rank` does, in order: post its value; if it leads, read its members' values and post
  // its block; read every block it did not make. Store requests: 1 + (block size - 1) + 1 +
  // (blocks - 1) for a leader, 1 + blocks for the others.
  struct Step {
    enum class Kind { PostValue, ReadValue, PostBlock, ReadBlock } kind;
    int index;  // a rank for values, a block for blocks
  };
  std::vector<Step> steps(int rank) const;

 private:
  int world_;
  int block_;
};

// A block on the store: its ranks' values, each as an 8-byte little-endian length and the bytes.
std::vector<uint8_t> encode_block(const std::vector<std::vector<uint8_t>>& values, int first,
                                  int end);
// Puts a block's values into values[first, end); false, leaving them unset, when the bytes are
// not `end - first` well-formed values (a store written by something else).
bool decode_block(const std::vector<uint8_t>& block, std::vector<std::vector<uint8_t>>& values,
                  int first, int end);

}  // namespace rdmacoll::bootstrap
