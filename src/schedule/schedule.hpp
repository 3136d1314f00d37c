#pragma once
// A schedule is plain data: for one rank of a group, the steps of an all-gather. At each step
// the rank writes ranges of chunks it already holds into its peers' outputs (at the chunks'
// final offsets) and receives ranges from its peers. Chunk i is group rank i's contribution.
// Executing a schedule (src/engine/) is separate from computing it (here, no network).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rdmacoll::schedule {

// A run of consecutive chunks [first, first + count) moving between this rank and `peer`.
struct Transfer {
  int peer;
  int first;
  int count;
  bool operator==(const Transfer&) const = default;
};

struct Step {
  std::vector<Transfer> sends;
  std::vector<Transfer> recvs;
};

enum class Algorithm { RecursiveDoubling, Bruck, Ring, Direct, TwoLevel };

struct Schedule {
  Algorithm algorithm;
  std::vector<Step> steps;
};

std::string algorithm_name(Algorithm a);

// `order[v]` is the group rank at virtual position v (a permutation of 0..p-1); identity for a
// flat topology. Each function returns the schedule of group rank `rank`.
Schedule recursive_doubling(const std::vector<int>& order, int rank);  // p a power of two
Schedule bruck(const std::vector<int>& order, int rank);               // any p
Schedule ring(const std::vector<int>& order, int rank);                // any p, p-1 steps
Schedule direct(const std::vector<int>& order, int rank);              // any p, one step
// Host-aware: `host_of[r]` is group rank r's host index (0..h-1, every index used). Gathers
// inside hosts, passes host blocks between the hosts' leaders, spreads inside hosts.
Schedule two_level(const std::vector<int>& host_of, int rank);

// `host_of` is needed by TwoLevel only.
Schedule make_schedule(Algorithm a, const std::vector<int>& order, int rank,
                       const std::vector<int>& host_of = {});

// Parses "rd", "bruck", "ring", "direct", "two_level" (throws InvalidArgument otherwise).
Algorithm parse_algorithm(const std::string& name);

// The selector: picks an algorithm from the group size, the bytes each rank contributes and
// the number of hosts the group spans. Thresholds and their measurements: selector.cpp.
Algorithm choose_algorithm(int p, size_t bytes_per_rank, int hosts);

// The all-to-all of equal pieces of `piece_bytes`: Bruck (bruck_all_to_all.hpp) or Direct (a
// pairwise exchange). Thresholds and their measurements: selector.cpp.
Algorithm choose_all_to_all(int p, size_t piece_bytes, int hosts);

bool is_power_of_two(int p);

// Turns a set of chunk indices into maximal runs of consecutive indices (sorted).
std::vector<Transfer> coalesce(int peer, std::vector<int> chunks);

}  // namespace rdmacoll::schedule
