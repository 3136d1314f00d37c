// rdmacoll-run -n N [--port P] [--] PROGRAM ARGS...
// Starts N local ranks with MASTER_ADDR, MASTER_PORT (a free port unless given), RANK,
// LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE, prefixes each output line with "[rank] ", and when
// one rank exits non-zero (or dies), ends the others and exits non-zero itself.

#include <arpa/inet.h>
#include <fcntl.h>
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
#include <cstring>
#include <string>
#include <vector>

#include "bootstrap/auth.hpp"
#include "common/free_port.hpp"
#include "common/settings.hpp"

namespace {

volatile sig_atomic_t g_signal = 0;

void usage() {
  std::fprintf(
      stderr,
      "usage: rdmacoll-run -n N [--port P] [--] PROGRAM [ARGS...]\n"
      "       rdmacoll-run --help-env\n"
      "  Starts N local ranks of PROGRAM with MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK,\n"
      "  WORLD_SIZE set; prefixes output with the rank; if one rank fails, ends the rest.\n"
      "  --help-env prints every RDMACOLL_* setting (a markdown table).\n");
}

int free_port() {
  const int port = rdmacoll::free_rendezvous_port();
  if (port == 0) {
    std::fprintf(stderr, "rdmacoll-run: cannot find a free port\n");
    std::exit(2);
  }
  return port;
}

struct Stream {
  int fd;
  int rank;
  FILE* out;
  std::string partial;
};

struct Rank {
  pid_t pid = -1;
  int pidfd = -1;
  bool running = true;
  int status = 0;
};

// A status line: text a rank ends with '\r' instead of '\n' (a progress report). When our
// stderr is a terminal we show the latest one at the bottom and erase it before any other
// output, so it never mixes with result lines; ranks only send them when RDMACOLL_PROGRESS=1.
bool g_status_tty = false;
bool g_status_shown = false;

void clear_status() {
  if (!g_status_shown) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  g_status_shown = false;
}

void emit(Stream& s, const char* data, size_t n, bool flush_partial) {
  s.partial.append(data, n);
  size_t start = 0;
  for (;;) {
    const size_t end = s.partial.find_first_of("\r\n", start);
    if (end == std::string::npos) break;
    const int len = static_cast<int>(end - start);
    const char* text = s.partial.data() + start;
    clear_status();
    if (s.partial[end] == '\r' && end + 1 < s.partial.size() && s.partial[end + 1] == '\n') {
      std::fprintf(s.out, "[%d] %.*s\n", s.rank, len, text);  // CRLF: an ordinary line
      start = end + 2;
      continue;
    }
    if (s.partial[end] == '\r') {
      if (g_status_tty && len > 0) {
        std::fprintf(stderr, "[%d] %.*s", s.rank, len, text);
        std::fflush(stderr);
        g_status_shown = true;
      }
    } else {
      std::fprintf(s.out, "[%d] %.*s\n", s.rank, len, text);
    }
    start = end + 1;
  }
  s.partial.erase(0, start);
  if (flush_partial && !s.partial.empty()) {
    clear_status();
    std::fprintf(s.out, "[%d] %s\n", s.rank, s.partial.c_str());
    s.partial.clear();
  }
  std::fflush(s.out);
}

}  // namespace

int main(int argc, char** argv) {
  int n = -1;
  int port = 0;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-n" || a == "--nproc" || a == "-np") {
      if (i + 1 >= argc) return usage(), 2;
      n = std::atoi(argv[++i]);
    } else if (a == "--port") {
      if (i + 1 >= argc) return usage(), 2;
      port = std::atoi(argv[++i]);
    } else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else if (a == "--help-env") {
      std::fputs(rdmacoll::settings::markdown_table().c_str(), stdout);
      return 0;
    } else if (a == "--") {
      ++i;
      break;
    } else {
      break;
    }
  }
  if (n < 1 || i >= argc) {
    usage();
    return 2;
  }
  if (port == 0) port = free_port();

  struct sigaction sa {};
  sa.sa_handler = [](int sig) { g_signal = sig; };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  g_status_tty = ::isatty(STDERR_FILENO) == 1;
  const std::string token = rdmacoll::bootstrap::random_hex(32);
  const std::string job_id = "rdmacoll-run-" + rdmacoll::bootstrap::random_hex(8);
  std::vector<Rank> ranks(n);
  std::vector<Stream> streams;
  for (int r = 0; r < n; ++r) {
    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
      std::perror("rdmacoll-run: pipe");
      return 2;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("rdmacoll-run: fork");
      return 2;
    }
    if (pid == 0) {
      ::setpgid(0, 0);  // own process group: ending a rank ends its children too
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
      // A secret and an id per run: the ranks' store admits only this run's processes.
      ::setenv("RDMACOLL_AUTH_TOKEN", token.c_str(), 0);
      ::setenv("RDMACOLL_JOB_ID", job_id.c_str(), 0);
      // Our stderr is a terminal: ranks may send progress as status lines (see emit()).
      if (g_status_tty) ::setenv("RDMACOLL_PROGRESS", "1", 1);
      ::execvp(argv[i], argv + i);
      std::fprintf(stderr, "rdmacoll-run: cannot run %s: %s\n", argv[i], std::strerror(errno));
      ::_exit(127);
    }
    ::setpgid(pid, pid);
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    ranks[r].pid = pid;
    ranks[r].pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    streams.push_back({out_pipe[0], r, stdout, {}});
    streams.push_back({err_pipe[0], r, stderr, {}});
  }

  int exit_code = 0;
  int failed_rank = -1;
  bool terminating = false;
  std::chrono::steady_clock::time_point kill_at{};
  auto terminate_all = [&](int sig) {
    for (auto& rk : ranks) {
      if (rk.running) ::kill(-rk.pid, sig);
    }
  };

  for (;;) {
    std::vector<pollfd> pfds;
    std::vector<int> owners;  // >= 0: stream index; < 0: -(rank+1)
    for (size_t s = 0; s < streams.size(); ++s) {
      if (streams[s].fd >= 0) {
        pfds.push_back({streams[s].fd, POLLIN, 0});
        owners.push_back(static_cast<int>(s));
      }
    }
    bool any_running = false;
    for (int r = 0; r < n; ++r) {
      if (!ranks[r].running) continue;
      any_running = true;
      pfds.push_back({ranks[r].pidfd, POLLIN, 0});
      owners.push_back(-(r + 1));
    }
    if (!any_running && pfds.empty()) break;
    if (g_signal && !terminating) {
      terminating = true;
      if (!exit_code) exit_code = 128 + g_signal;
      terminate_all(SIGTERM);
      kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    }
    if (terminating && std::chrono::steady_clock::now() >= kill_at) terminate_all(SIGKILL);
    const int pr = ::poll(pfds.data(), pfds.size(), terminating ? 100 : 1000);
    if (pr < 0 && errno != EINTR) break;
    for (size_t k = 0; k < pfds.size() && pr > 0; ++k) {
      if (!pfds[k].revents) continue;
      if (owners[k] >= 0) {
        Stream& s = streams[owners[k]];
        char buf[65536];
        const ssize_t got = ::read(s.fd, buf, sizeof buf);
        if (got > 0) {
          emit(s, buf, static_cast<size_t>(got), false);
        } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
          emit(s, "", 0, true);
          ::close(s.fd);
          s.fd = -1;
        }
      } else {
        Rank& rk = ranks[-owners[k] - 1];
        int status = 0;
        if (::waitpid(rk.pid, &status, WNOHANG) != rk.pid) continue;
        rk.running = false;
        ::close(rk.pidfd);
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code != 0 && failed_rank < 0 && !terminating) {
          failed_rank = -owners[k] - 1;
          exit_code = code;
          clear_status();
          std::fprintf(stderr, "rdmacoll-run: rank %d %s %d; ending the other ranks\n", failed_rank,
                       WIFEXITED(status) ? "exited with status" : "was killed by signal",
                       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
          terminating = true;
          terminate_all(SIGTERM);
          kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(3);
        }
      }
    }
  }
  clear_status();
  return exit_code;
}
