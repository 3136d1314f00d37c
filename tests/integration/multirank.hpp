#pragma once
// Runs a test body in N real processes (fork), each a rank of a fresh rdmacoll world on a free
// loopback port. The parent waits on pidfds with a deadline (no sleeps) and kills stragglers.
// A rank fails by throwing; RANK_CHECK throws with the location and the values compared.
//
// Under a launcher (RDMACOLL_TEST_LAUNCHED=1, e.g. `mpirun -np 4 integration_tests`) the
// launcher's processes are the ranks: a test for as many ranks as the launcher started runs its
// body in each, on a world met through PMIx, and every rank's exit code comes back through a
// PMIx fence; a test for another count, or one that needs what only fork gives (ranks not
// started, their own environment, no world), is skipped.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rdmacoll/rdmacoll.hpp>

#include "bootstrap/pmix.hpp"
#include "common/free_port.hpp"

namespace rdmacoll::testing {

struct CheckFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

#define RANK_CHECK(cond, msg)                                                     \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::ostringstream os_;                                                     \
      os_ << __FILE__ << ":" << __LINE__ << ": check failed: " #cond ": " << msg; \
      throw ::rdmacoll::testing::CheckFailure(os_.str());                         \
    }                                                                             \
  } while (0)

inline int free_port() {
  return free_rendezvous_port();
}

struct RankResult {
  int exit_code = -1;  // 0 ok, 1 check failed / exception, 128+sig when killed
};

struct RunOptions {
  std::chrono::seconds deadline{180};
  std::vector<std::pair<std::string, std::string>> env;  // extra environment for every rank
  std::vector<int> skip_ranks;                           // ranks that are never started
  bool init = true;  // call init_process_group / destroy_process_group around the body
  // When a rank fails, kill the others at once (they would only wait for it until timeout).
  bool kill_on_failure = true;
};

inline bool launched() {
  const char* v = std::getenv("RDMACOLL_TEST_LAUNCHED");
  return v && std::string(v) == "1";
}

// run_ranks under a launcher: this process is one of the ranks.
inline std::vector<RankResult> run_launched(int world, const std::function<void(int, int)>& body,
                                            const RunOptions& opt) {
  auto pmix = bootstrap::PmixSession::connect("run_ranks");
  std::vector<RankResult> results(static_cast<size_t>(world));
  if (world != pmix->size() || !opt.skip_ranks.empty() || !opt.env.empty() || !opt.init) {
    for (auto& r : results)
      r.exit_code = 0;
    const std::string why = "not for these " + std::to_string(pmix->size()) + " launched ranks";
    GTEST_MESSAGE_(why.c_str(), ::testing::TestPartResult::kSkip);
    return results;
  }
  const int r = pmix->rank();
  int code = 0;
  try {
    init_process_group();
    body(r, world);
    destroy_process_group();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] FAILED: %s\n", r, e.what());
    code = 1;
  }
  const auto codes =
      pmix->all_gather("test_exit", {static_cast<uint8_t>(code)}, std::chrono::seconds(300));
  for (int i = 0; i < world; ++i)
    results[i].exit_code = codes[i].empty() ? -1 : codes[i][0];
  return results;
}

// Runs body(rank, world) in `world` processes; returns each rank's exit code.
inline std::vector<RankResult> run_ranks(int world, const std::function<void(int, int)>& body,
                                         const RunOptions& opt = {}) {
  if (launched()) return run_launched(world, body, opt);
  const int port = free_port();
  std::vector<pid_t> pids(world, -1);
  std::fflush(stdout);
  std::fflush(stderr);
  for (int r = 0; r < world; ++r) {
    if (std::find(opt.skip_ranks.begin(), opt.skip_ranks.end(), r) != opt.skip_ranks.end()) {
      continue;
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("RDMACOLL_TIMEOUT_S", "120", 1);  // a stuck rank fails before the test deadline
      for (const auto& [k, v] : opt.env)
        ::setenv(k.c_str(), v.c_str(), 1);
      int code = 0;
      try {
        if (opt.init) init_process_group();
        body(r, world);
        if (opt.init) destroy_process_group();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[rank %d] FAILED: %s\n", r, e.what());
        code = 1;
      }
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(code);
    }
    pids[r] = pid;
  }
  std::vector<RankResult> results(world);
  std::vector<int> pidfds(world, -1);
  for (int r = 0; r < world; ++r) {
    if (pids[r] > 0) pidfds[r] = static_cast<int>(::syscall(SYS_pidfd_open, pids[r], 0));
  }
  const auto deadline = std::chrono::steady_clock::now() + opt.deadline;
  int running = 0;
  for (pid_t p : pids)
    running += p > 0;
  while (running > 0) {
    std::vector<pollfd> pfds;
    std::vector<int> which;
    for (int r = 0; r < world; ++r) {
      if (pidfds[r] >= 0) {
        pfds.push_back({pidfds[r], POLLIN, 0});
        which.push_back(r);
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      for (int r = 0; r < world; ++r) {
        if (pidfds[r] >= 0) {
          std::fprintf(stderr, "[rank %d] still running at the test deadline: killed\n", r);
          ::kill(pids[r], SIGKILL);
        }
      }
    }
    ::poll(pfds.data(), pfds.size(), static_cast<int>(std::max<int64_t>(left.count(), 100)));
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (!pfds[i].revents) continue;
      const int r = which[i];
      int status = 0;
      if (::waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      results[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      ::close(pidfds[r]);
      pidfds[r] = -1;
      --running;
      if (results[r].exit_code != 0 && opt.kill_on_failure) {
        for (int o = 0; o < world; ++o) {
          if (pidfds[o] >= 0) ::kill(pids[o], SIGKILL);
        }
      }
    }
  }
  return results;
}

inline std::string describe(const std::vector<RankResult>& results) {
  std::ostringstream os;
  for (size_t r = 0; r < results.size(); ++r)
    os << "rank " << r << ": " << results[r].exit_code << "; ";
  return os.str();
}

}  // namespace rdmacoll::testing
