#include "schedule/service.hpp"

#include <algorithm>

namespace rdmacoll::schedule {

Schedule descriptor_schedule(ServiceRounds rounds, const std::vector<int>& order, int rank) {
  switch (rounds) {
    case ServiceRounds::Direct:
      return direct(order, rank);
    case ServiceRounds::Bruck:
      return bruck(order, rank);
    case ServiceRounds::RecursiveDoubling:
      return recursive_doubling(order, rank);
    case ServiceRounds::RingStep: {
      Schedule s = bruck(order, rank);
      if (s.steps.size() > 1) s.steps.resize(1);
      return s;
    }
  }
  return direct(order, rank);
}

int largest_round(const Schedule& s) {
  int most = 0;
  for (const Step& step : s.steps) {
    for (const auto* list : {&step.sends, &step.recvs}) {
      int n = 0;
      for (const Transfer& t : *list)
        n += t.count;
      most = std::max(most, n);
    }
  }
  return most;
}

}  // namespace rdmacoll::schedule
