// Runs the three torch-doc examples under rdmacoll-run and compares the printed values (not the
// strings) of every rank; also checks the launcher's environment and failure handling.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace {

struct CommandResult {
  int exit_code;
  std::string output;
};

CommandResult run(const std::string& cmd) {
  CommandResult r{-1, {}};
  FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return r;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, f))
    r.output += buf;
  const int status = ::pclose(f);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// Numbers printed by each rank (lines "[r] ..." that show a tensor), in order. Hand-rolled
// rather than <regex>, which trips GCC 12's -Wmaybe-uninitialized under sanitizers.
std::map<int, std::vector<double>> values_by_rank(const std::string& out) {
  std::map<int, std::vector<double>> v;
  size_t start = 0;
  while (start < out.size()) {
    size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    const std::string l = out.substr(start, end - start);
    start = end + 1;
    const size_t close = l.find("] ");
    if (l.empty() || l[0] != '[' || close == std::string::npos) continue;
    const int rank = std::atoi(l.c_str() + 1);
    const std::string body = l.substr(close + 2);
    // A tensor starts with "tensor(" and continues on lines of spaces then '['; skip the rest
    // (log lines, messages).
    const size_t first = body.find_first_not_of(' ');
    const bool tensor_line = body.rfind("tensor(", 0) == 0 ||
                             (first != std::string::npos && first > 0 && body[first] == '[');
    if (!tensor_line) continue;
    for (size_t i = 0; i < body.size();) {
      const char c = body[i];
      if (std::isdigit(static_cast<unsigned char>(c)) ||
          (c == '-' && i + 1 < body.size() &&
           std::isdigit(static_cast<unsigned char>(body[i + 1])))) {
        char* endp = nullptr;
        v[rank].push_back(std::strtod(body.c_str() + i, &endp));
        i = static_cast<size_t>(endp - body.c_str());
      } else {
        ++i;
      }
    }
  }
  return v;
}

const std::string kRun = RDMACOLL_RUN;
const std::string kBin = EXAMPLES_DIR;

TEST(Examples, FlatInt64IntoFloat32) {
  CommandResult r = run(kRun + " -n 2 " + kBin + "/example_all_gather_flat");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto v = values_by_rank(r.output);
  for (int rank : {0, 1})
    EXPECT_EQ(v[rank], (std::vector<double>{1, 2, 2, 3})) << r.output;
  EXPECT_NE(r.output.find("[0] tensor([1., 2., 2., 3.])"), std::string::npos) << r.output;
}

TEST(Examples, StackedOutput) {
  CommandResult r = run(kRun + " -n 2 " + kBin + "/example_all_gather_stacked");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto v = values_by_rank(r.output);
  for (int rank : {0, 1})
    EXPECT_EQ(v[rank], (std::vector<double>{1, 2, 3, 11, 12, 13})) << r.output;
}

TEST(Examples, SubgroupOfTwoOutOfFour) {
  CommandResult r = run(kRun + " -n 4 " + kBin + "/example_all_gather_subgroup");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto v = values_by_rank(r.output);
  for (int rank : {0, 1})
    EXPECT_EQ(v[rank], (std::vector<double>{0, 1, 100, 101})) << r.output;
  EXPECT_TRUE(v[2].empty() && v[3].empty()) << r.output;
}

#ifdef MPIRUN
// Open MPI's mpirun with no MASTER_ADDR or MASTER_PORT: the ranks meet through its PMIx server.
// --tag-output prefixes each line with "[job,rank]<stdout>:", here turned into "[rank] ".
CommandResult mpirun(int n, const std::string& example) {
  CommandResult r =
      run("env -u MASTER_ADDR -u MASTER_PORT -u RANK -u WORLD_SIZE OMPI_ALLOW_RUN_AS_ROOT=1 "
          "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " MPIRUN
          " --oversubscribe --bind-to none "
          "--tag-output -np " +
          std::to_string(n) + " " + kBin + "/" + example);
  std::string out;
  for (size_t at = 0; at < r.output.size();) {
    size_t end = r.output.find('\n', at);
    if (end == std::string::npos) end = r.output.size();
    std::string line = r.output.substr(at, end - at);
    at = end + 1;
    const size_t comma = line.find(',');
    const size_t tag = line.find("]<stdout>:");
    if (line.rfind("[", 0) == 0 && comma != std::string::npos && tag != std::string::npos &&
        comma < tag) {
      std::string tagged = "[";
      tagged.append(line, comma + 1, tag - comma - 1).append("] ").append(line, tag + 10);
      line = std::move(tagged);
    }
    out += line + "\n";
  }
  r.output = out;
  return r;
}

TEST(ExamplesUnderMpirun, AllThreePrintTheSeedsValuesWithNoAddressOrPort) {
  CommandResult flat = mpirun(2, "example_all_gather_flat");
  ASSERT_EQ(flat.exit_code, 0) << flat.output;
  auto v = values_by_rank(flat.output);
  for (int rank : {0, 1})
    EXPECT_EQ(v[rank], (std::vector<double>{1, 2, 2, 3})) << flat.output;

  CommandResult stacked = mpirun(2, "example_all_gather_stacked");
  ASSERT_EQ(stacked.exit_code, 0) << stacked.output;
  v = values_by_rank(stacked.output);
  for (int rank : {0, 1})
    EXPECT_EQ(v[rank], (std::vector<double>{1, 2, 3, 11, 12, 13})) << stacked.output;

  CommandResult sub = mpirun(4, "example_all_gather_subgroup");
  ASSERT_EQ(sub.exit_code, 0) << sub.output;
  v = values_by_rank(sub.output);
  for (int rank : {0, 1})
    EXPECT_EQ(v[rank], (std::vector<double>{0, 1, 100, 101})) << sub.output;
  EXPECT_TRUE(v[2].empty() && v[3].empty()) << sub.output;
}
#endif

TEST(Launcher, SetsTheRendezvousEnvironment) {
  CommandResult r =
      run(kRun +
          " -n 3 sh -c 'echo \"$RANK/$WORLD_SIZE/$LOCAL_RANK/$MASTER_ADDR/${MASTER_PORT:+port}\"'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string want = std::string("[") + std::to_string(rank) + "] " + std::to_string(rank) +
                             "/3/" + std::to_string(rank) + "/127.0.0.1/port";
    EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
  }
}

TEST(Launcher, OneFailingRankEndsTheOthers) {
  const auto t0 = std::chrono::steady_clock::now();
  // Ranks 0 and 2 stand in for hung ranks; the launcher must end them once rank 1 fails.
  CommandResult r =
      run(kRun + " -n 3 sh -c 'if [ \"$RANK\" = 1 ]; then exit 3; fi; exec sleep 600'");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("rank 1 exited with status 3"), std::string::npos) << r.output;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
}

// all_gather_perf's live progress: status lines that rdmacoll-run shows (and erases) when its
// stderr is a terminal, and nothing of the kind when the output is piped. `script` gives the
// launcher a pseudo-terminal.
TEST(Launcher, PerfShowsProgressOnATerminalAndIsQuietWhenPiped) {
  const std::string perf = kRun.substr(0, kRun.rfind('/')) + "/all_gather_perf";
  const std::string args = " -n 2 " + perf + " -b 8 -e 64 -f 8 -n 3 -w 1";
  CommandResult piped = run(kRun + args);
  ASSERT_EQ(piped.exit_code, 0) << piped.output;
  EXPECT_NE(piped.output.find("# total #wrong: 0"), std::string::npos) << piped.output;
  EXPECT_EQ(piped.output.find("all_gather_perf size"), std::string::npos) << piped.output;
  EXPECT_EQ(piped.output.find('\r'), std::string::npos) << piped.output;

  CommandResult tty = run("script -qec '" + kRun + args + "' /dev/null");
  ASSERT_EQ(tty.exit_code, 0) << tty.output;
  // -n 3: 6 timed calls per column, 3 back to back, then 3 each alone after a barrier.
  EXPECT_NE(tty.output.find("[0] # all_gather_perf size 8 out-of-place 0/6"), std::string::npos)
      << tty.output;
  EXPECT_NE(tty.output.find("[0] # all_gather_perf size 64 in-place 0/6"), std::string::npos)
      << tty.output;
  EXPECT_NE(tty.output.find("\r\033[K"), std::string::npos) << "status never erased";
  EXPECT_NE(tty.output.find("# total #wrong: 0"), std::string::npos) << tty.output;
}

}  // namespace
