#pragma once
// The verbs transport's test-only hooks, apart from the transport's classes: each reads its
// RDMACOLL_TEST_* setting (registered, and listed as test-only in the README's table) and does
// nothing when it is unset.

#include <cstdint>

namespace rdmacoll::transport::verbs_test_hooks {

// RDMACOLL_TEST_QP_DELAY_MS: this rank's first QP transitions wait that long when
// RDMACOLL_TEST_QP_DELAY_RANK names it (the connection handshake test's late peer).
void delay_first_connection(int my_rank);

// RDMACOLL_TEST_SRQ_RECEIVES: the shared receive queue held to at most that many receives,
// small enough for its low-water event to fire with a few peers.
uint64_t receive_queue_cap(uint64_t device_max);

}  // namespace rdmacoll::transport::verbs_test_hooks
