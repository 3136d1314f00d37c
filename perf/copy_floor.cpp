// The floor of a 2-rank all-gather on one host with ordinary (unmapped) outputs: what the copies
// alone cost, with no library around them, for docs/performance.md's middle sizes.
//
//   copy_floor [chunk bytes ...]
//
// Two processes (fork) share one page of flags. Per call each rank announces that it arrived
// (the descriptor round, a flag store and a wait for the peer's), then:
//   cma:      writes its chunk into the peer's output (process_vm_writev, one kernel copy with
//             the pages pinned), copies its own chunk into its output, and waits for the peer's
//             "done" flag: the least any single-copy protocol can do;
//   two-copy: copies its chunk into a shared slot and its own chunk into its output, then the
//             peer's slot into its output: the mailbox's two copies.
// Printed per size: the best of 3 rounds of 20000 calls (after 1000 warm-up calls), in us.

#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

struct Flags {
  std::atomic<long> arrived[2];
  std::atomic<long> done[2];
  char* out[2];
  pid_t pid[2];
};
static_assert(std::atomic<long>::is_always_lock_free);

void wait_for(const std::atomic<long>& flag, long value) {
  while (flag.load(std::memory_order_acquire) < value) {
  }
}

// One round of `calls` calls of one mode; returns us per call on rank 0, -1 on rank 1.
double run(size_t chunk, bool cma, int calls) {
  void* shared = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  auto* slots = static_cast<char*>(
      mmap(nullptr, 4 * chunk, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (shared == MAP_FAILED || slots == MAP_FAILED) {
    std::perror("mmap");
    std::exit(1);
  }
  auto* f = new (shared) Flags{};
  std::fflush(stdout);
  const pid_t child = fork();
  const int rank = child == 0 ? 1 : 0;
  const int peer = 1 - rank;
  std::vector<char> in(chunk, static_cast<char>(rank + 1)), out(2 * chunk, 0);
  f->out[rank] = out.data();
  f->pid[rank] = getpid();
  f->arrived[rank].store(1, std::memory_order_release);
  wait_for(f->arrived[peer], 1);
  const int warmup = 1000;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < warmup + calls; ++i) {
    if (i == warmup) start = std::chrono::steady_clock::now();
    const long seq = i + 2;
    char* own = out.data() + static_cast<size_t>(rank) * chunk;
    if (cma) {
      f->arrived[rank].store(seq, std::memory_order_release);
      wait_for(f->arrived[peer], seq);
      iovec local{in.data(), chunk};
      iovec remote{f->out[peer] + static_cast<size_t>(rank) * chunk, chunk};
      if (process_vm_writev(f->pid[peer], &local, 1, &remote, 1, 0) !=
          static_cast<ssize_t>(chunk)) {
        std::perror("process_vm_writev (CMA needs ptrace rights over the peer)");
        std::exit(1);
      }
      std::memcpy(own, in.data(), chunk);
      f->done[rank].store(seq, std::memory_order_release);
      wait_for(f->done[peer], seq);
    } else {
      char* mine = slots + static_cast<size_t>((i & 1) * 2 + rank) * chunk;
      std::memcpy(mine, in.data(), chunk);
      f->arrived[rank].store(seq, std::memory_order_release);
      std::memcpy(own, in.data(), chunk);
      wait_for(f->arrived[peer], seq);
      std::memcpy(out.data() + static_cast<size_t>(peer) * chunk,
                  slots + static_cast<size_t>((i & 1) * 2 + peer) * chunk, chunk);
    }
  }
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
      calls;
  if (out[static_cast<size_t>(peer) * chunk] != static_cast<char>(peer + 1) ||
      out[static_cast<size_t>(rank) * chunk] != static_cast<char>(rank + 1)) {
    std::fprintf(stderr, "rank %d: wrong bytes in the output\n", rank);
    std::exit(1);
  }
  if (rank == 1) std::_Exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) std::exit(1);
  munmap(shared, 4096);
  munmap(slots, 4 * chunk);
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; ++i)
    sizes.push_back(std::strtoull(argv[i], nullptr, 0));
  if (sizes.empty()) sizes = {16384, 32768, 65536, 131072, 262144};
  std::printf("%10s %12s %12s\n", "bytes", "cma(us)", "two-copy(us)");
  for (size_t chunk : sizes) {
    double best[2] = {1e30, 1e30};
    for (int round = 0; round < 3; ++round) {
      for (int mode = 0; mode < 2; ++mode) {
        const double us = run(chunk, mode == 0, 20000);
        if (us < best[mode]) best[mode] = us;
      }
    }
    std::printf("%10zu %12.2f %12.2f\n", chunk, best[0], best[1]);
  }
  return 0;
}
