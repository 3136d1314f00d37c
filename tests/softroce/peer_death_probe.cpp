// Dead-host detection across two SoftRoCE VMs (tests/softroce/two-vm-peer-death.sh). Both ranks
// gather in a loop; then rank 1 stops calling collectives ("PARKED") and rank 0 enters one more
// gather, whose descriptor rank 1's NIC still acknowledges: rank 0 then only waits, with nothing
// of its own outstanding to rank 1. The host kills rank 1's VM. Only the transport's keepalive
// can tell rank 0 now; it must raise PeerFailure long before the job's timeout. Every gathered
// element is checked while both live.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "rdmacoll/rdmacoll.hpp"

using namespace rdmacoll;

int main() {
  init_process_group();
  const int rank = get_rank(), world = get_world_size();
  const int64_t n = 256;
  Tensor in = Tensor::zeros({n}, DType::Float32);
  Tensor out = Tensor::zeros({world * n}, DType::Float32);
  for (int iter = 0; iter < 20; ++iter) {
    for (int64_t i = 0; i < n; ++i)
      in.set(i, rank * 1000 + i + iter);
    all_gather_into_tensor(out, in);
    for (int r = 0; r < world; ++r) {
      for (int64_t i = 0; i < n; ++i) {
        if (out.item(r * n + i) != r * 1000 + i + iter) {
          std::printf("WRONG iter %d rank %d element %lld\n", iter, r, static_cast<long long>(i));
          return 3;
        }
      }
    }
  }
  barrier();
  if (rank != 0) {
    std::printf("PARKED\n");
    std::fflush(stdout);
    for (;;)
      ::pause();  // killed with its VM
  }
  std::printf("WAITING\n");
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    all_gather_into_tensor(out, in);
    std::printf("UNEXPECTED: the gather completed without rank 1\n");
    return 4;
  } catch (const PeerFailure& e) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    std::printf("DETECTED PeerFailure %lld ms after entering the call: %s\n",
                static_cast<long long>(ms), e.what());
    std::fflush(stdout);
    ::_exit(0);  // the store and peer are gone: skip the orderly shutdown
  } catch (const Error& e) {
    std::printf("NOT DETECTED, other error: %s\n", e.what());
    return 5;
  }
}
