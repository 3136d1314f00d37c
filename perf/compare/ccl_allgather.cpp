// oneCCL timing, the peer for rdmacoll in perf/compare as mpi_allgather.c is for MPI: Intel's
// collective library, what PyTorch users on CPU clusters take through the `ccl` backend. Modes:
// allgather (default), "allreduce" (float SUM, in place), "reducescatter" (float SUM; BYTES is
// the input, p x the output) and "broadcast" (BYTES from rank 0), as mpi_allgather's. Ranks come
// from RANK and WORLD_SIZE (any launcher that sets them, e.g. rdmacoll-run); rank 0's KVS address
// reaches the others through a file named by CCL_KVS_FILE (default
// /tmp/rdmacoll-ccl-kvs-$MASTER_PORT).
//   rdmacoll-run -n N ccl_allgather BYTES_PER_RANK ITERS WARMUP [MODE]
// Rank 0 prints "RESULT <bytes> <mean us of the slowest rank> <wrong> <world size>".
// Timing as nccl-tests does: after the warm-up, one barrier, then ITERS calls back to back, each
// waited for (as torch-ccl's work.wait()); a rank's mean is the elapsed time over ITERS.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "oneapi/ccl.hpp"

namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v) {
    std::fprintf(stderr, "ccl_allgather: %s is not set (run it under a launcher)\n", name);
    std::exit(2);
  }
  return std::atoi(v);
}

// Rank 0's KVS address, published through a file (written whole, then renamed into place).
ccl::shared_ptr_class<ccl::kvs> make_kvs(int rank) {
  std::string path;
  if (const char* f = std::getenv("CCL_KVS_FILE")) {
    path = f;
  } else {
    const char* port = std::getenv("MASTER_PORT");
    path = std::string("/tmp/rdmacoll-ccl-kvs-") + (port ? port : "0");
  }
  if (rank == 0) {
    auto kvs = ccl::create_main_kvs();
    const ccl::kvs::address_type addr = kvs->get_address();
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp, std::ios::binary)
        .write(reinterpret_cast<const char*>(addr.data()),
               static_cast<std::streamsize>(addr.size()));
    std::rename(tmp.c_str(), path.c_str());
    return kvs;
  }
  ccl::kvs::address_type addr{};
  for (int tries = 0;; ++tries) {  // set-up only: rank 0 may not have written it yet
    std::ifstream in(path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.size() == addr.size()) {
      std::memcpy(addr.data(), bytes.data(), addr.size());
      break;
    }
    if (tries > 30000) {
      std::fprintf(stderr, "ccl_allgather: no KVS address in %s\n", path.c_str());
      std::exit(2);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return ccl::create_kvs(addr);
}

float own(int r, size_t k) {
  return static_cast<float>((r * 7 + k) % 61);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: ccl_allgather BYTES_PER_RANK ITERS WARMUP "
                 "[allreduce|reducescatter|broadcast]\n");
    return 2;
  }
  const size_t bytes = std::strtoull(argv[1], nullptr, 10);
  const int iters = std::atoi(argv[2]), warmup = std::atoi(argv[3]);
  const std::string mode = argc > 4 ? argv[4] : "allgather";
  const int rank = env_int("RANK"), world = env_int("WORLD_SIZE");
  if (const char* local = std::getenv("LOCAL_RANK")) {  // one host: every rank is local
    setenv("CCL_LOCAL_RANK", local, 0);
    setenv("CCL_LOCAL_SIZE", std::getenv("WORLD_SIZE"), 0);
  }
  ccl::init();
  auto kvs = make_kvs(rank);
  auto comm = ccl::create_communicator(world, rank, kvs);
  const size_t m = std::max<size_t>(1, bytes / sizeof(float));
  std::vector<float> in, out;
  std::vector<uint8_t> bcast;
  std::function<void()> call;
  if (mode == "allgather") {
    in.resize(m);
    out.assign(m * world, -1.0f);
    for (size_t k = 0; k < m; ++k)
      in[k] = own(rank, k);
    call = [&] { ccl::allgather(in.data(), out.data(), m, ccl::datatype::float32, comm).wait(); };
  } else if (mode == "allreduce") {
    in.resize(m);
    call = [&] {
      ccl::allreduce(in.data(), in.data(), m, ccl::datatype::float32, ccl::reduction::sum, comm)
          .wait();
    };
  } else if (mode == "reducescatter") {
    const size_t piece = std::max<size_t>(1, m / world);
    in.resize(piece * world);
    out.resize(piece);
    for (size_t k = 0; k < in.size(); ++k)
      in[k] = own(rank, k);
    call = [&, piece] {
      ccl::reduce_scatter(in.data(), out.data(), piece, ccl::datatype::float32, ccl::reduction::sum,
                          comm)
          .wait();
    };
  } else if (mode == "broadcast") {
    bcast.assign(std::max<size_t>(1, bytes), 1);  // written: untouched pages read as zero pages
    call = [&] { ccl::broadcast(bcast.data(), bytes, ccl::datatype::uint8, 0, comm).wait(); };
  } else {
    std::fprintf(stderr, "ccl_allgather: unknown mode %s\n", mode.c_str());
    return 2;
  }
  for (int i = 0; i < warmup; ++i)
    call();
  ccl::barrier(comm);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i)
    call();
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double wrong = 0;
  if (mode == "allgather") {
    for (int r = 0; r < world; ++r)
      for (size_t k = 0; k < m; ++k)
        wrong += out[r * m + k] != own(r, k);
  } else if (mode == "broadcast") {
    for (size_t i = 0; i < bytes; ++i)
      bcast[i] = rank == 0 ? static_cast<uint8_t>(i * 7) : 0;
    ccl::broadcast(bcast.data(), bytes, ccl::datatype::uint8, 0, comm).wait();
    for (size_t i = 0; i < bytes; ++i)
      wrong += bcast[i] != static_cast<uint8_t>(i * 7);
  } else if (mode == "reducescatter") {
    const size_t piece = out.size();
    for (size_t k = 0; k < piece; ++k) {
      float want = 0;
      for (int r = 0; r < world; ++r)
        want += own(r, rank * piece + k);
      wrong += out[k] != want;
    }
  }
  double mine[2] = {total / iters * 1e6, wrong}, slowest[2] = {0, 0};
  ccl::allreduce(&mine[0], &slowest[0], 1, ccl::datatype::float64, ccl::reduction::max, comm)
      .wait();
  ccl::allreduce(&mine[1], &slowest[1], 1, ccl::datatype::float64, ccl::reduction::sum, comm)
      .wait();
  if (rank == 0)
    std::printf("RESULT %zu %.3f %ld %d\n", bytes, slowest[0], static_cast<long>(slowest[1]),
                world);
  return slowest[1] != 0;
}
