#pragma once
// Every collective's row (core/collective.hpp): its code in the descriptors, the name its errors
// carry, the agreement's rules for it. A new collective adds its row here and to kRegistry; the
// codes are the wire's, so a row's code never changes.

#include <array>
#include <cstddef>

#include "engine/core/collective.hpp"

namespace rdmacoll::engine::collectives {

// clang-format off
//                                   code  name                      same_lengths every_rank_inlines
inline constexpr Collective kAllGather     {1, "all_gather_into_tensor", true,  true};
inline constexpr Collective kBarrier       {2, "barrier",                true,  false};
inline constexpr Collective kAllReduce     {3, "all_reduce",             true,  true};
inline constexpr Collective kReduceScatter {4, "reduce_scatter_tensor",  true,  true};
inline constexpr Collective kBroadcast     {5, "broadcast",              true,  false};
inline constexpr Collective kGather        {6, "gather",                 true,  false};
inline constexpr Collective kScatter       {7, "scatter",                true,  false};
inline constexpr Collective kReduce        {8, "reduce",                 true,  false};
inline constexpr Collective kAllToAll      {9, "all_to_all",             false, false};
// clang-format on

inline constexpr std::array<const Collective*, 9> kRegistry{
    &kAllGather, &kBarrier, &kAllReduce, &kReduceScatter, &kBroadcast,
    &kGather,    &kScatter, &kReduce,    &kAllToAll};

// One row per code, and no code 0 (a descriptor that names none).
consteval bool codes_are_distinct() {
  for (size_t i = 0; i < kRegistry.size(); ++i) {
    if (kRegistry[i]->code == 0) return false;
    for (size_t j = 0; j < i; ++j) {
      if (kRegistry[i]->code == kRegistry[j]->code) return false;
    }
  }
  return true;
}
static_assert(codes_are_distinct());

inline CollectiveTable registry() {
  return CollectiveTable(kRegistry);
}

}  // namespace rdmacoll::engine::collectives
