#pragma once
// What the SoftRoCE test files share (tests/softroce/verbs_*test.cpp): they run inside the VM
// (tests/softroce/run-suite.sh) with RDMACOLL_TRANSPORT=verbs, real libibverbs against rdma_rxe.

#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>

#include "api/debug.hpp"
#include "gather_check.hpp"
#include "rdmacoll/rdmacoll.hpp"

namespace rdmacoll::verbs_testing {

inline void require_verbs() {
  RANK_CHECK(transport_name() == "verbs", "transport is " << transport_name());
}

// Joins the job as a host of its own (RDMACOLL_HOST_ID), so schedules run as across hosts.
inline void init_as_own_host(int rank) {
  ::setenv("RDMACOLL_HOST_ID", ("host" + std::to_string(rank)).c_str(), 1);
  init_process_group();
}

// One counter of detail::transport_counters() ("name=value ...").
inline uint64_t transport_counter(const std::string& name) {
  std::istringstream in(detail::transport_counters());
  std::string pair;
  while (in >> pair) {
    const auto eq = pair.find('=');
    if (pair.substr(0, eq) == name) return std::stoull(pair.substr(eq + 1));
  }
  throw std::runtime_error("no counter " + name);
}

}  // namespace rdmacoll::verbs_testing

// The names every SoftRoCE test file uses, in the anonymous namespace their tests live in.
namespace rdmacoll {
namespace {
using testing::expect_all_ok;
using testing::expect_throw_with;
using testing::gather_and_check;
using testing::input_value;
using testing::run_ranks;
using testing::RunOptions;
using verbs_testing::init_as_own_host;
using verbs_testing::require_verbs;
using verbs_testing::transport_counter;
}  // namespace
}  // namespace rdmacoll
