#include "engine/core/tuning.hpp"

#include <cstdint>
#include <string>

#include "common/settings.hpp"

namespace rdmacoll::engine {

Tuning Tuning::from_settings() {
  Tuning t;
  if (const std::string a = settings::choice("RDMACOLL_ALGO"); a != "auto")
    t.algorithm = schedule::parse_algorithm(a);
  const std::string d = settings::choice("RDMACOLL_DESCRIPTORS");
  t.descriptors = d == "direct"   ? DescriptorExchange::Direct
                  : d == "bruck"  ? DescriptorExchange::Bruck
                  : d == "rooted" ? DescriptorExchange::Rooted
                                  : DescriptorExchange::Auto;
  if (const std::string a = settings::choice("RDMACOLL_ALLTOALL"); a != "auto")
    t.all_to_all = a == "bruck" ? schedule::Algorithm::Bruck : schedule::Algorithm::Direct;
  if (const uint64_t limit = settings::count("RDMACOLL_EAGER_LIMIT", UINT64_MAX);
      limit != UINT64_MAX) {
    t.eager_limit = static_cast<size_t>(limit);
  }
  t.flat_topology = settings::choice("RDMACOLL_TOPOLOGY") == "flat";
  return t;
}

}  // namespace rdmacoll::engine
