#include "common/settings.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "rdmacoll/errors.hpp"

namespace rdmacoll::settings {

namespace {

Spec spec_of(const Number& n, Scope scope, std::string_view help) {
  // The default as the README shows sizes ("1 MiB", "2048").
  const std::string shown_default = n.value >= kMiB && n.value % kMiB == 0
                                        ? std::to_string(n.value / kMiB) + " MiB"
                                        : std::to_string(n.value);
  return Spec{n.name, Type::Count, scope, shown_default, n.min, n.max, {}, help};
}
Spec spec_of(const Count& c, Scope scope, std::string_view help) {
  return Spec{c.name, Type::Count, scope, std::string(c.default_text), c.min, c.max, {}, help};
}
template <size_t N>
Spec spec_of(const Choice<N>& c, Scope scope, std::string_view help) {
  return Spec{c.name,
              Type::Choice,
              scope,
              std::string(c.values.front()),
              0,
              0,
              std::vector<std::string_view>(c.values.begin(), c.values.end()),
              help};
}
Spec spec_of(const Text& t, Scope scope, std::string_view help) {
  return Spec{t.name, Type::Text, scope, std::string(t.default_text), 0, 0, {}, help};
}
Spec spec_of(const Duration& d, Scope scope, std::string_view help) {
  return Spec{d.name,
              Type::Duration,
              scope,
              std::to_string(d.value.count() / 1000),
              static_cast<uint64_t>(d.min.count()),
              static_cast<uint64_t>(d.max.count()),
              {},
              help};
}

std::vector<Spec> make_registry() {
  std::vector<Spec> r;
  r.push_back(spec_of(kTimeout, Scope::Rank,
                      "timeout for rendezvous and every collective wait (seconds, or with a unit "
                      "`ms`, `s`, `m`, `h`; 1 ms to 30 days)"));
  Spec token = spec_of(kAuthToken, Scope::Rank,
                       "the job's secret for the rendezvous store (see the security model); "
                       "every rank the same");
  token.secret = true;
  r.push_back(token);
  r.push_back(spec_of(kJobId, Scope::Rank,
                      "the job's id (default: torchrun's, Slurm's or Open MPI's; at most 256 "
                      "bytes); every rank the same"));
  r.push_back(spec_of(kStoreBind, Scope::Rank,
                      "the address rank 0's store binds (under PMIx: loopback on one host, "
                      "else every address of rank 0's host)"));
  r.push_back(spec_of(kTransport, Scope::Job,
                      "`auto`: verbs when every rank has an ACTIVE RDMA port, else UCX (all "
                      "ranks agree); `ucx`; `verbs` (an error, not a fallback, when a rank has "
                      "no usable port)"));
  r.push_back(spec_of(kIbDevice, Scope::Rank,
                      "verbs device (default: the NIC hwloc finds nearest the rank, ties "
                      "split by local rank, else the first device with an ACTIVE port)"));
  r.push_back(spec_of(kIbPort, Scope::Rank, "verbs port"));
  r.push_back(
      spec_of(kGidIndex, Scope::Rank, "GID index (default on RoCE: the port's RoCE v2 IPv4 GID)"));
  r.push_back(spec_of(kAlgo, Scope::Job,
                      "all-gather schedule; `auto` picks by group size, bytes and hosts "
                      "(docs/design.md)"));
  r.push_back(spec_of(kAllToAll, Scope::Job,
                      "all-to-all of equal pieces: `auto` picks by group size, piece and "
                      "hosts (docs/design.md), `direct` (pairwise), `bruck` (log p rounds)"));
  r.push_back(spec_of(kDescriptors, Scope::Job,
                      "how each call's descriptors travel when no mailbox carries them: "
                      "`auto` (log p rounds across hosts, one direct round on one host; "
                      "gather, scatter and reduce up a tree to the root and back where that "
                      "pays), `direct`, `bruck` (every call all-gathers them), `rooted` (the "
                      "tree wherever log p rounds run)"));
  r.push_back(
      spec_of(kTopology, Scope::Job, "`auto`: host-aware rank orders; `flat`: no reordering"));
  r.push_back(spec_of(kHostId, Scope::Rank,
                      "pretend host identity (tests, containers that share a hostname)"));
  r.push_back(spec_of(kUcxProtocol, Scope::Job,
                      "UCX data protocol: tagged messages straight into place, or ucp_put + "
                      "flush + notify; `auto` picks per size and path"));
  r.push_back(spec_of(kPeerReads, Scope::Job,
                      "on one host, a rank copies its peers' chunks out of their memory (one "
                      "kernel copy, CMA) where the kernel allows it; 0: the peers send them"));
  r.push_back(spec_of(kSpinUs, Scope::Rank,
                      "how long a wait polls before it blocks, in microseconds (ranks that "
                      "outnumber a host's cores poll 2000 us, yielding each round)"));
  r.push_back(spec_of(kEagerLimit, Scope::Job,
                      "largest chunk (bytes) sent inline with the call descriptor (default 64 "
                      "KiB on one host up to 16 ranks, 1 MiB / p beyond, 2 KiB across hosts; "
                      "at most 4 MiB)"));
  r.push_back(spec_of(kDebug, Scope::Rank,
                      "log level: `info` adds transport, algorithm and mailbox choices"));
  r.push_back(spec_of(kIbAddrFamily, Scope::Rank, "`ipv4` or `ipv6`: the RoCE GID family to use"));
  r.push_back(spec_of(kIbAddrRange, Scope::Rank,
                      "a subnet such as `10.1.0.0/16`: the RoCE GID to use when a port has "
                      "several addresses or VLANs"));
  r.push_back(spec_of(kIbPkey, Scope::Rank,
                      "P_Key, hex (`0x8012`) or decimal; the full-member entry when there is "
                      "one"));
  r.push_back(spec_of(kIbTrafficClass, Scope::Rank, "traffic class (DSCP << 2; 106 for DSCP 26)"));
  r.push_back(spec_of(kIbServiceLevel, Scope::Rank, "service level"));
  r.push_back(spec_of(kIbAckTimeout, Scope::Rank, "ACK timeout exponent (4.096 us x 2^n)"));
  r.push_back(spec_of(kIbRetryCount, Scope::Rank, "ACK retries"));
  r.push_back(spec_of(kIbMtu, Scope::Rank,
                      "largest path MTU (bytes) of this rank's QPs; a pair uses the smaller of "
                      "its two ranks' (`auto`: the port's active MTU)"));
  r.push_back(
      spec_of(kIbChunk, Scope::Rank, "largest RDMA write (bytes); bigger chunks go as several"));
  r.push_back(spec_of(kIbQpsPerPeer, Scope::Job,
                      "data QPs per peer a write's pieces are dealt over (control messages "
                      "have one of their own)"));
  r.push_back(spec_of(kIbAdaptiveRouting, Scope::Rank,
                      "1: each QP's last piece of a write goes as a plain RDMA WRITE and a "
                      "zero-byte WRITE WITH IMM after it (fabrics with adaptive routing)"));
  r.push_back(spec_of(kIbEagerSlots, Scope::Rank,
                      "slots of the verbs write ring per connected peer (0: SENDs only)"));
  r.push_back(spec_of(kMrCacheMb, Scope::Rank, "registration cache size (MiB)"));
  r.push_back(spec_of(kForkInit, Scope::Rank,
                      "`auto`: ibv_fork_init only on kernels before 5.13; `1` forces it, `0` "
                      "never calls it"));
  auto hook = [&](Spec s) {
    s.test_hook = true;
    r.push_back(std::move(s));
  };
  hook(spec_of(kProgress, Scope::Rank, "rdmacoll-run: ranks report progress lines"));
  hook(spec_of(kTestMaxMessage, Scope::Job, "caps UCX control messages as verbs caps them"));
  hook(spec_of(kTestQpDelayMs, Scope::Rank, "verbs: delay the first QP transition"));
  hook(spec_of(kTestQpDelayRank, Scope::Rank, "the rank RDMACOLL_TEST_QP_DELAY_MS delays"));
  hook(spec_of(kTestSrqReceives, Scope::Rank,
               "verbs: hold the shared receive queue to this many receives"));
  return r;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

uint64_t env_uint(const char* name, uint64_t fallback, uint64_t min, uint64_t max) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  const std::string text = v;
  char* end = nullptr;
  errno = 0;
  // Digits only: strtoull would also take " 5", "+5" and "-5" (wrapped).
  const bool digits = std::isdigit(static_cast<unsigned char>(text[0]));
  const unsigned long long n = digits ? std::strtoull(v, &end, 10) : 0;
  if (!digits || *end != '\0' || errno == ERANGE || n < min || n > max) {
    throw InvalidArgument(std::string(name) + ": expected a whole number from " +
                          std::to_string(min) + " to " + std::to_string(max) + ", got '" +
                          shown(text) + "'");
  }
  return n;
}

std::chrono::milliseconds env_duration(const char* name, std::chrono::milliseconds fallback,
                                       std::chrono::milliseconds min,
                                       std::chrono::milliseconds max) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  const std::string text = v;
  // Plain decimal digits with at most one point, then the unit: strtod alone would also take
  // " 5", "0x10", "1e3" and "infinity".
  const char* number_end = v;
  while (std::isdigit(static_cast<unsigned char>(*number_end)) || *number_end == '.')
    ++number_end;
  const std::string number(v, number_end);
  char* parsed = nullptr;
  double x = std::strtod(number.c_str(), &parsed);
  const bool decimal = !number.empty() && std::isdigit(static_cast<unsigned char>(number[0])) &&
                       parsed == number.c_str() + number.size();
  if (!decimal) x = std::nan("");
  const std::string unit = number_end;
  const double scale = unit.empty() || unit == "s" ? 1e3
                       : unit == "ms"              ? 1.0
                       : unit == "m"               ? 60e3
                       : unit == "h"               ? 3600e3
                                                   : -1;
  const double ms = x * scale;  // not rounded before the range check: 0.0001 s is no 1 ms
  if (scale < 0 || !std::isfinite(x) || !(ms >= static_cast<double>(min.count())) ||
      !(ms <= static_cast<double>(max.count()))) {
    throw InvalidArgument(std::string(name) +
                          ": expected seconds (units ms, s, m, h allowed) from " +
                          std::to_string(min.count() / 1e3) + " s to " +
                          std::to_string(max.count() / 1e3) + " s, got '" + shown(text) + "'");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(ms)));
}

}  // namespace

const std::vector<Spec>& all() {
  static const std::vector<Spec> registry = make_registry();
  return registry;
}

const Spec& spec(std::string_view name) {
  for (const Spec& s : all()) {
    if (s.name == name) return s;
  }
  throw std::logic_error("rdmacoll: setting " + std::string(name) + " is not registered");
}

std::string shown(std::string_view value) {
  if (value.size() <= 64) return std::string(value);
  std::string out(value.substr(0, 61));
  out.append("... (").append(std::to_string(value.size())).append(" bytes)");
  return out;
}

namespace {

std::optional<std::string> text(std::string_view name) {
  (void)spec(name);
  const char* v = std::getenv(std::string(name).c_str());
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

uint64_t count(std::string_view name, uint64_t fallback) {
  const Spec& s = spec(name);
  return env_uint(std::string(name).c_str(), fallback, s.min, s.max);
}

std::chrono::milliseconds duration(std::string_view name, std::chrono::milliseconds fallback) {
  const Spec& s = spec(name);
  return env_duration(std::string(name).c_str(), fallback,
                      std::chrono::milliseconds(static_cast<int64_t>(s.min)),
                      std::chrono::milliseconds(static_cast<int64_t>(s.max)));
}

}  // namespace

std::string_view choice_of(std::string_view name) {
  const Spec& s = spec(name);
  const auto v = text(name);
  if (!v) return s.choices.front();
  const std::string got = lower(*v);
  std::string expected;
  for (std::string_view c : s.choices) {
    if (got == c) return c;
    if (!expected.empty()) expected.append(", ");
    expected.append(c);
  }
  throw InvalidArgument(std::string(name) + ": expected one of " + expected + ", got '" +
                        shown(*v) + "'");
}

uint64_t read(const Number& n) {
  return count(n.name, n.value);
}

std::optional<uint64_t> read(const Count& c) {
  if (!text(c.name)) return std::nullopt;
  return count(c.name, 0);
}

std::optional<std::string> read(const Text& t) {
  return text(t.name);
}

std::chrono::milliseconds read(const Duration& d) {
  return duration(d.name, d.value);
}

void validate_all() {
  for (const Spec& s : all()) {
    switch (s.type) {
      case Type::Choice:
        (void)choice_of(s.name);
        break;
      case Type::Count:
        (void)count(s.name, 0);
        break;
      case Type::Duration:
        (void)duration(s.name, std::chrono::milliseconds(0));
        break;
      case Type::Text:
        break;  // checked where it is used (addresses, subnets, P_Keys)
    }
  }
}

std::string job_wide() {
  std::string out;
  for (const Spec& s : all()) {
    if (s.scope != Scope::Job) continue;
    out.append(s.name).append("=").append(text(s.name).value_or("")).append("\n");
  }
  return out;
}

std::string markdown_table() {
  std::string out =
      "| variable | values (default) | same on every rank | meaning |\n|---|---|---|---|\n";
  for (const Spec& s : all()) {
    if (s.test_hook) continue;
    std::string values;
    switch (s.type) {
      case Type::Choice:
        for (std::string_view c : s.choices) {
          if (!values.empty()) values.append(", ");
          values.append("`").append(c).append("`");
        }
        values.append(" (`").append(s.choices.front()).append("`)");
        break;
      case Type::Count:
        values.append(std::to_string(s.min)).append(" to ").append(std::to_string(s.max));
        values.append(" (").append(s.default_text).append(")");
        break;
      case Type::Duration:
        values.append("1 ms to 30 days (").append(s.default_text).append(" s)");
        break;
      case Type::Text:
        values.append("(").append(s.default_text).append(")");
        break;
    }
    out.append("| `").append(s.name).append("` | ").append(values).append(" | ");
    out.append(s.scope == Scope::Job ? "yes" : "").append(" | ").append(s.help).append(" |\n");
  }
  return out;
}

}  // namespace rdmacoll::settings
