#include "schedule/schedule.hpp"

#include <algorithm>

#include "rdmacoll/errors.hpp"

namespace rdmacoll::schedule {

std::string algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::RecursiveDoubling:
      return "rd";
    case Algorithm::Bruck:
      return "bruck";
    case Algorithm::Ring:
      return "ring";
    case Algorithm::Direct:
      return "direct";
    case Algorithm::TwoLevel:
      return "two_level";
  }
  return "?";
}

bool is_power_of_two(int p) {
  return p > 0 && (p & (p - 1)) == 0;
}

std::vector<Transfer> coalesce(int peer, std::vector<int> chunks) {
  std::sort(chunks.begin(), chunks.end());
  std::vector<Transfer> runs;
  for (int c : chunks) {
    if (!runs.empty() && runs.back().first + runs.back().count == c) {
      ++runs.back().count;
    } else {
      runs.push_back({peer, c, 1});
    }
  }
  return runs;
}

Schedule make_schedule(Algorithm a, const std::vector<int>& order, int rank,
                       const std::vector<int>& host_of) {
  switch (a) {
    case Algorithm::RecursiveDoubling:
      if (!is_power_of_two(static_cast<int>(order.size()))) {
        throw InvalidArgument("recursive doubling needs a power-of-two group, got " +
                              std::to_string(order.size()) + " ranks");
      }
      return recursive_doubling(order, rank);
    case Algorithm::Bruck:
      return bruck(order, rank);
    case Algorithm::Ring:
      return ring(order, rank);
    case Algorithm::Direct:
      return direct(order, rank);
    case Algorithm::TwoLevel:
      if (host_of.size() != order.size()) {
        throw InvalidArgument("the two-level all-gather needs every rank's host");
      }
      return two_level(host_of, rank);
  }
  throw InvalidArgument("unknown algorithm");
}

Algorithm parse_algorithm(const std::string& name) {
  for (Algorithm a : {Algorithm::RecursiveDoubling, Algorithm::Bruck, Algorithm::Ring,
                      Algorithm::Direct, Algorithm::TwoLevel}) {
    if (algorithm_name(a) == name) return a;
  }
  throw InvalidArgument(
      "RDMACOLL_ALGO: expected auto, rd, bruck, ring, direct or two_level, got '" + name + "'");
}

}  // namespace rdmacoll::schedule
