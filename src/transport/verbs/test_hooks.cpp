// The verbs transport's test-only hooks (test_hooks.hpp).

#include "transport/verbs/test_hooks.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "common/settings.hpp"
#include "transport/verbs/footprint.hpp"

namespace rdmacoll::transport::verbs_test_hooks {

void delay_first_connection(int my_rank) {
  static std::once_flag once;
  bool first = false;
  std::call_once(once, [&] { first = true; });
  if (!first) return;
  const uint64_t ms = settings::read(settings::kTestQpDelayMs);
  const uint64_t rank = settings::read(settings::kTestQpDelayRank).value_or(UINT64_MAX);
  if (!ms || rank != static_cast<uint64_t>(my_rank)) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

uint64_t receive_queue_cap(uint64_t device_max) {
  return std::min(device_max,
                  settings::read(settings::kTestSrqReceives).value_or(verbs_plan::kMaxReceives));
}

}  // namespace rdmacoll::transport::verbs_test_hooks
