#include "engine/core/tuning.hpp"

#include <cstdint>
#include <string>

#include "common/settings.hpp"

namespace rdmacoll::engine {

Tuning Tuning::from_settings() {
  Tuning t;
  if (const auto a = settings::read(settings::kAlgo); a != settings::kAlgo.value("auto"))
    t.algorithm = schedule::parse_algorithm(std::string(a));
  using settings::kDescriptors;
  const auto d = settings::read(kDescriptors);
  t.descriptors = d == kDescriptors.value("direct")   ? DescriptorExchange::Direct
                  : d == kDescriptors.value("bruck")  ? DescriptorExchange::Bruck
                  : d == kDescriptors.value("rooted") ? DescriptorExchange::Rooted
                                                      : DescriptorExchange::Auto;
  using settings::kAllToAll;
  if (const auto a = settings::read(kAllToAll); a != kAllToAll.value("auto"))
    t.all_to_all =
        a == kAllToAll.value("bruck") ? schedule::Algorithm::Bruck : schedule::Algorithm::Direct;
  if (const auto limit = settings::read(settings::kEagerLimit))
    t.eager_limit = static_cast<size_t>(*limit);
  t.flat_topology = settings::read(settings::kTopology) == settings::kTopology.value("flat");
  return t;
}

}  // namespace rdmacoll::engine
