// The qualification kit's rdmacoll side (scripts/qualify.sh, ansible/qualify.yml; CI runs it
// over two SoftRoCE VMs, tests/softroce/two-vm-link-flap.sh too). Two ranks, one per host:
//   fault_probe counters   per-call transport counters of all_gather_into_tensor at 8 B,
//                          64 KiB and 1 MiB per rank (every element checked)
//   fault_probe flap       rank 1 takes its link down for 1 s while rank 0's 32 MiB message is
//                          being written into it: within the QPs' retry budget, so the message
//                          and three 4 MiB all-gathers after it complete, every element checked
//   fault_probe outage     the same, down for 8 s: run with a budget below that
//                          (RDMACOLL_IB_TIMEOUT=16 RDMACOLL_IB_RETRY_CNT=3: about 1 s); both
//                          ranks raise PeerFailure, far inside the job's timeout
//   fault_probe kill       rank 1 is SIGKILLed while the message is written into it: rank 0
//                          raises PeerFailure within the job's timeout
// The link goes down and up by $QUALIFY_LINK_DOWN and $QUALIFY_LINK_UP (default: ip link set
// eth0 down / up; on RoCE the NIC's netdev, on InfiniBand e.g. ibportstate). Prints RESULT
// lines; exit status 0 when the mode's outcome is the expected one.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
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

std::string link_command(const char* var, const char* fallback) {
  const char* v = std::getenv(var);
  return v && *v ? v : fallback;
}

// Per call: the counters' difference over `calls` calls of `n` floats per rank.
int counters(int rank, int world) {
  for (int64_t n : {int64_t{2}, int64_t{16384}, int64_t{262144}}) {
    Tensor in = Tensor::zeros({n}, DType::Float32);
    Tensor out = Tensor::zeros({world * n}, DType::Float32);
    all_gather_into_tensor(out, in);  // registers; not counted
    barrier();
    const int calls = n > 100000 ? 50 : 200;
    const std::string before = detail::transport_counters();
    const auto t0 = std::chrono::steady_clock::now();
    int64_t wrong = 0;
    for (int iter = 0; iter < calls; ++iter) {
      auto* p = static_cast<float*>(in.data());
      for (int64_t i = 0; i < n; ++i)
        p[i] = value(rank, i, iter);
      all_gather_into_tensor(out, in);
      const auto* o = static_cast<const float*>(out.data());
      for (int r = 0; r < world; ++r) {
        for (int64_t i = 0; i < n; ++i)
          wrong += o[r * n + i] != value(r, i, iter);
      }
    }
    const double us = seconds_since(t0) * 1e6 / calls;
    std::istringstream b(detail::transport_counters()), a(before);
    std::string after_pair, before_pair, line;
    while (b >> after_pair && a >> before_pair) {
      const auto eq = after_pair.find('=');
      const double d = (std::stod(after_pair.substr(eq + 1)) -
                        std::stod(before_pair.substr(before_pair.find('=') + 1))) /
                       calls;
      char buf[96];
      std::snprintf(buf, sizeof buf, " %s=%.2f", after_pair.substr(0, eq).c_str(), d);
      line += buf;
    }
    std::printf("RESULT COUNTERS rank %d bytes %lld us %.1f wrong %lld per call:%s\n", rank,
                static_cast<long long>(n * 4), us, static_cast<long long>(wrong), line.c_str());
    if (wrong) return 3;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "flap";
  if (mode != "counters" && mode != "flap" && mode != "outage" && mode != "kill") {
    std::fprintf(stderr, "usage: fault_probe counters|flap|outage|kill\n");
    return 2;
  }
  init_process_group();
  const int rank = get_rank(), world = get_world_size();
  std::printf("RESULT TRANSPORT rank %d %s\n", rank, transport_name().c_str());
  if (mode == "counters") {
    const int rc = counters(rank, world);
    std::fflush(stdout);
    destroy_process_group();
    return rc;
  }
  for (int iter = 0; iter < 3; ++iter) {
    if (const int64_t w = gather(rank, world, iter)) {
      std::printf("RESULT WRONG before the fault: %lld elements\n", static_cast<long long>(w));
      return 3;
    }
  }
  barrier();
  // Rank 0 writes 32 MiB to rank 1 (a point-to-point message: one-sided writes into rank 1's
  // registered tensor); once its first bytes have landed, rank 1 takes its link down (or dies).
  // Rank 1 then has nothing of its own on the wire; rank 0's packets are lost while the link is
  // down and sent again by its QP's retries. (A send that finds the link down makes rxe fail
  // the QP at once, unlike a hardware NIC, whose retries ride it out; so the flap falls on the
  // side that only receives, and the transport posts nothing new while its port is down.)
  const int64_t n = (int64_t{32} << 20) / 4;
  Tensor big = Tensor::zeros({n}, DType::Float32);
  const auto t0 = std::chrono::steady_clock::now();
  const bool flap = mode == "flap";
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
      if (mode == "kill") {
        std::printf("RESULT KILLING rank 1\n");
        std::fflush(stdout);
        ::raise(SIGKILL);
      }
      const int down_ms = flap ? 1000 : 8000;
      const std::string down = link_command("QUALIFY_LINK_DOWN", "ip link set eth0 down");
      const std::string up = link_command("QUALIFY_LINK_UP", "ip link set eth0 up");
      if (std::system(down.c_str()) != 0)
        std::printf("RESULT LINK COMMAND FAILED: %s\n", down.c_str());
      std::printf("RESULT LINK DOWN for %d ms\n", down_ms);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(down_ms));  // the outage itself
      if (std::system(up.c_str()) != 0) std::printf("RESULT LINK COMMAND FAILED: %s\n", up.c_str());
      std::printf("RESULT LINK UP\n");
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
    if (flap) {
      std::printf(
          "RESULT %s: the 32 MiB message across the flap and 3 gathers after it in %.1f "
          "s, %lld wrong elements; %s\n",
          wrong ? "WRONG" : "OK", seconds_since(t0), static_cast<long long>(wrong),
          detail::transport_counters().c_str());
      rc = wrong ? 3 : 0;
    } else {
      std::printf("RESULT UNEXPECTED: the calls went on through the %s\n", mode.c_str());
      rc = 4;
    }
  } catch (const PeerFailure& e) {
    std::printf("RESULT %s PeerFailure %.1f s after the message began: %s\n",
                flap ? "UNEXPECTED" : "DETECTED", seconds_since(t0), e.what());
    rc = flap ? 4 : 0;
  } catch (const Error& e) {
    std::printf("RESULT OTHER ERROR after %.1f s: %s\n", seconds_since(t0), e.what());
    rc = 5;
  }
  std::fflush(stdout);
  if (flap && rc == 0) {
    destroy_process_group();
    return rc;
  }
  ::_exit(rc);  // the pair is failed: skip the orderly shutdown
}
