#pragma once
// What the settings choose for a world's calls (RDMACOLL_ALGO, RDMACOLL_DESCRIPTORS,
// RDMACOLL_ALLTOALL, RDMACOLL_EAGER_LIMIT, RDMACOLL_TOPOLOGY), read once when the world is made
// and carried by each of its groups: a later init_process_group() reads them afresh, and nothing
// is read again while a call runs. A default Tuning leaves every choice automatic (the engine
// tests' groups).

#include <cstddef>
#include <optional>

#include "schedule/schedule.hpp"

namespace rdmacoll::engine {

// RDMACOLL_DESCRIPTORS: how a call's descriptors travel when no mailbox carries them. Auto: a
// log-p all-gather across hosts (recursive doubling for powers of two, else Bruck's), the direct
// round of p - 1 messages on one host, and the rooted rounds for gather, scatter and reduce where
// they pay (schedule::rooted_rounds_pay). Bruck: Bruck's rounds for any p. Rooted: as Auto, but
// gather, scatter and reduce take the rooted rounds wherever descriptors travel in log-p rounds.
enum class DescriptorExchange { Auto, Direct, Bruck, Rooted };

struct Tuning {
  std::optional<schedule::Algorithm> algorithm;  // the all-gather's, else the selector's pick
  DescriptorExchange descriptors = DescriptorExchange::Auto;
  std::optional<schedule::Algorithm> all_to_all;  // Direct or Bruck, else by group and piece
  std::optional<size_t> eager_limit;              // bytes, else by group size and hosts
  bool flat_topology = false;                     // no host-aware rank orders

  // From the environment; InvalidArgument names a bad value.
  static Tuning from_settings();
};

}  // namespace rdmacoll::engine
