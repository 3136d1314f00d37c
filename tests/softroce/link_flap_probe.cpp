// A link that goes down and up under a transfer (tests/softroce/two-vm-link-flap.sh, one rank
// per VM). Rank 1 takes its VM's eth0, the rxe netdev, down while rank 0's 32 MiB message is
// being written into it, then up again:
//   link_flap_probe flap     down for 1 s: within the QPs' retry budget, so the port's PORT_ERR
//                            is a warning, the message completes and the gathers after it,
//                            every element checked;
//   link_flap_probe outage   down for 8 s with a budget of about 1 s (RDMACOLL_IB_TIMEOUT=16,
//                            RDMACOLL_IB_RETRY_CNT=3): PeerFailure on both ranks, far inside
//                            the job's timeout.
// Prints one line starting with RESULT; exit status 0 when it is what the mode expects.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "api/debug.hpp"
#include "rdmacoll/rdmacoll.hpp"

using namespace rdmacoll;

namespace {

float value(int rank, int64_t i, int iter) {
  return static_cast<float>((rank * 131 + i * 7 + iter * 13) % 100000);
}

// One checked 4 MiB all-gather; the number of wrong elements.
int64_t gather(int rank, int world, int iter) {
  const int64_t n = (int64_t{4} << 20) / 4;
  Tensor in = Tensor::zeros({n}, DType::Float32);
  Tensor out = Tensor::zeros({world * n}, DType::Float32);
  auto* p = static_cast<float*>(in.data());
  for (int64_t i = 0; i < n; ++i)
    p[i] = value(rank, i, iter);
  all_gather_into_tensor(out, in);
  const auto* o = static_cast<const float*>(out.data());
  int64_t wrong = 0;
  for (int r = 0; r < world; ++r) {
    for (int64_t i = 0; i < n; ++i)
      wrong += o[r * n + i] != value(r, i, iter);
  }
  return wrong;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "flap";
  init_process_group();
  const int rank = get_rank(), world = get_world_size();
  for (int iter = 0; iter < 3; ++iter) {
    if (const int64_t w = gather(rank, world, iter)) {
      std::printf("RESULT WRONG before the flap: %lld elements\n", static_cast<long long>(w));
      return 3;
    }
  }
  barrier();
  // Rank 0 writes 32 MiB to rank 1 (a point-to-point message: one-sided writes into rank 1's
  // registered tensor); once its first bytes have landed, rank 1 takes its link down. Rank 1
  // then has nothing of its own on the wire; rank 0's packets are lost while the link is down
  // and sent again by its QP's retries. (A send that finds the link down makes rxe fail the QP
  // at once, unlike a hardware NIC, whose retries ride it out; so the flap falls on the side
  // that only receives, and the transport posts nothing new while its port is down.)
  const int64_t n = (int64_t{32} << 20) / 4;
  Tensor big = Tensor::zeros({n}, DType::Float32);
  const auto t0 = std::chrono::steady_clock::now();
  int rc = 0;
  try {
    if (rank == 0) {
      auto* p = static_cast<float*>(big.data());
      for (int64_t i = 0; i < n; ++i)
        p[i] = value(0, i, 99) + 1;
      send(big, 1);
    } else {
      Work w = recv(big, 0, {}, 0, true);
      const volatile float* first = static_cast<const float*>(big.data());
      while (*first == 0.0f)
        std::this_thread::yield();
      const int down_ms = mode == "flap" ? 1000 : 8000;
      if (std::system("ip link set eth0 down") != 0) std::printf("ip link set down failed\n");
      std::printf("LINK DOWN for %d ms\n", down_ms);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(down_ms));  // the outage itself
      if (std::system("ip link set eth0 up") != 0) std::printf("ip link set up failed\n");
      std::printf("LINK UP\n");
      std::fflush(stdout);
      w.wait();
      const auto* p = static_cast<const float*>(big.data());
      int64_t wrong = 0;
      for (int64_t i = 0; i < n; ++i)
        wrong += p[i] != value(0, i, 99) + 1;
      if (wrong) {
        std::printf("RESULT WRONG: %lld of the 32 MiB message's elements\n",
                    static_cast<long long>(wrong));
        return 3;
      }
    }
    int64_t wrong = 0;
    for (int iter = 3; iter < 6; ++iter)
      wrong += gather(rank, world, iter);
    if (mode == "flap") {
      std::printf(
          "RESULT %s: the 32 MiB message across the flap and 3 gathers after it in %.1f "
          "s, %lld wrong elements; %s\n",
          wrong ? "WRONG" : "OK", seconds_since(t0), static_cast<long long>(wrong),
          detail::transport_counters().c_str());
      rc = wrong ? 3 : 0;
    } else {
      std::printf("RESULT UNEXPECTED: the calls went on through an 8 s outage\n");
      rc = 4;
    }
  } catch (const PeerFailure& e) {
    std::printf("RESULT %s PeerFailure %.1f s after the message began: %s\n",
                mode == "flap" ? "UNEXPECTED" : "DETECTED", seconds_since(t0), e.what());
    rc = mode == "flap" ? 4 : 0;
  } catch (const Error& e) {
    std::printf("RESULT OTHER ERROR after %.1f s: %s\n", seconds_since(t0), e.what());
    rc = 5;
  }
  std::fflush(stdout);
  if (mode == "flap" && rc == 0) {
    destroy_process_group();
    return rc;
  }
  ::_exit(rc);  // the pair is failed: skip the orderly shutdown
}
