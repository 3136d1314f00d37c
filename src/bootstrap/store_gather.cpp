#include "bootstrap/store_gather.hpp"

#include <algorithm>

namespace rdmacoll::bootstrap {

StoreGather::StoreGather(int world) : world_(std::max(world, 1)) {
  block_ = 1;
  while (block_ * block_ < world_)
    ++block_;
}

int StoreGather::end_of(int block) const {
  return std::min(world_, (block + 1) * block_);
}

std::vector<StoreGather::Step> StoreGather::steps(int rank) const {
  std::vector<Step> out{{Step::Kind::PostValue, rank}};
  const int mine = block_of(rank);
  const bool leader = leads(rank);
  if (leader) {
    for (int r = rank + 1; r < end_of(mine); ++r)
      out.push_back({Step::Kind::ReadValue, r});
    out.push_back({Step::Kind::PostBlock, mine});
  }
  for (int b = 0; b < blocks(); ++b) {
    if (!(leader && b == mine)) out.push_back({Step::Kind::ReadBlock, b});
  }
  return out;
}

std::vector<uint8_t> encode_block(const std::vector<std::vector<uint8_t>>& values, int first,
                                  int end) {
  std::vector<uint8_t> out;
  for (int r = first; r < end; ++r) {
    const uint64_t n = values[r].size();
    for (int i = 0; i < 8; ++i)
      out.push_back(static_cast<uint8_t>(n >> (8 * i)));
    out.insert(out.end(), values[r].begin(), values[r].end());
  }
  return out;
}

bool decode_block(const std::vector<uint8_t>& block, std::vector<std::vector<uint8_t>>& values,
                  int first, int end) {
  std::vector<std::vector<uint8_t>> got;
  size_t at = 0;
  for (int r = first; r < end; ++r) {
    if (block.size() - at < 8) return false;
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i)
      n |= uint64_t{block[at + i]} << (8 * i);
    at += 8;
    if (n > block.size() - at) return false;
    got.emplace_back(block.begin() + static_cast<ptrdiff_t>(at),
                     block.begin() + static_cast<ptrdiff_t>(at + n));
    at += n;
  }
  if (at != block.size()) return false;
  for (int r = first; r < end; ++r)
    values[r] = std::move(got[r - first]);
  return true;
}

}  // namespace rdmacoll::bootstrap
