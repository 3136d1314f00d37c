// topo_sim: what each all-gather algorithm costs on a cluster layout, without a cluster.
//   topo_sim --hosts 128 --ranks-per-host 8 --bytes 1M [--alpha-intra 1 --beta-intra 10
//            --alpha-inter 3 --beta-inter 12.5]
//   topo_sim --layout 1,1,1,3 --bytes 64K     (uneven: ranks per host, host by host)
// For each algorithm (and order): steps, bytes each host sends off-host (max over hosts; all
// equal for uniform layouts), total off-host bytes, and an alpha-beta time estimate.

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "schedule/simulate.hpp"
#include "topology/topology.hpp"

using namespace rdmacoll;

namespace {
uint64_t parse_bytes(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return static_cast<uint64_t>(v);
}
}  // namespace

int main(int argc, char** argv) {
  int hosts = 4, k = 2;
  std::vector<int> per_host;  // --layout
  uint64_t m = 1 << 20;
  schedule::AlphaBeta ab;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--hosts")
      hosts = std::atoi(argv[i + 1]);
    else if (a == "--ranks-per-host")
      k = std::atoi(argv[i + 1]);
    else if (a == "--layout") {
      for (const char* c = argv[i + 1]; *c;) {
        char* end = nullptr;
        per_host.push_back(static_cast<int>(std::strtol(c, &end, 10)));
        if (end == c || per_host.back() < 1) {
          std::fprintf(stderr, "--layout: expected ranks per host like 1,1,1,3\n");
          return 2;
        }
        c = *end == ',' ? end + 1 : end;
      }
    } else if (a == "--bytes")
      m = parse_bytes(argv[i + 1]);
    else if (a == "--alpha-intra")
      ab.alpha_intra_us = std::atof(argv[i + 1]);
    else if (a == "--beta-intra")
      ab.beta_intra_gbps = std::atof(argv[i + 1]);
    else if (a == "--alpha-inter")
      ab.alpha_inter_us = std::atof(argv[i + 1]);
    else if (a == "--beta-inter")
      ab.beta_inter_gbps = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (per_host.empty()) per_host.assign(hosts, k);
  hosts = static_cast<int>(per_host.size());
  int p = 0;
  for (int n : per_host)
    p += n;
  if (p < 1 || p > 4096) {
    std::fprintf(stderr, "need 1..4096 ranks, got %d\n", p);
    return 2;
  }
  std::vector<std::string> host_names;
  for (int h = 0; h < hosts; ++h) {
    // host-major ranks; append(), not "h" + ...: GCC 12 -O3 warns -Wrestrict inside
    // std::string's operator+ (a false positive, GCC bug 105329).
    for (int i = 0; i < per_host[static_cast<size_t>(h)]; ++i)
      host_names.push_back(std::string("h").append(std::to_string(h)));
  }
  const topology::Layout layout = topology::layout_of(host_names);
  const auto interleaved = topology::interleaved_order(layout);
  const auto host_major = topology::host_major_order(layout);
  std::string shape;
  for (int n : per_host)
    shape.append(shape.empty() ? "" : ",").append(std::to_string(n));
  std::printf("# %d hosts, ranks per host %s = %d ranks, %llu bytes per rank\n", hosts,
              shape.c_str(), p, static_cast<unsigned long long>(m));
  std::printf("# alpha/beta intra %.2f us / %.2f GB/s, inter %.2f us / %.2f GB/s per host NIC\n",
              ab.alpha_intra_us, ab.beta_intra_gbps, ab.alpha_inter_us, ab.beta_inter_gbps);
  std::printf("# minimum off-host bytes in all: (N-1) p m = %llu\n",
              static_cast<unsigned long long>(static_cast<uint64_t>(hosts - 1) * p * m));
  std::printf("%-28s %6s %20s %22s %14s\n", "algorithm (order)", "steps", "offhost/host (max)",
              "offhost total", "est time (us)");
  struct Row {
    const char* name;
    schedule::Algorithm a;
    const std::vector<int>* order;
  };
  std::vector<Row> rows;
  if (schedule::is_power_of_two(p)) {
    rows.push_back({"rd (host bits low)", schedule::Algorithm::RecursiveDoubling, &interleaved});
    rows.push_back({"rd (host-major)", schedule::Algorithm::RecursiveDoubling, &host_major});
  }
  rows.push_back({"bruck (host bits low)", schedule::Algorithm::Bruck, &interleaved});
  rows.push_back({"bruck (host-major)", schedule::Algorithm::Bruck, &host_major});
  rows.push_back({"ring (host-major)", schedule::Algorithm::Ring, &host_major});
  rows.push_back({"direct", schedule::Algorithm::Direct, &host_major});
  rows.push_back({"two_level (host blocks)", schedule::Algorithm::TwoLevel, &host_major});
  for (const Row& row : rows) {
    const auto r = schedule::simulate(row.a, layout.host_of, *row.order, m, ab);
    uint64_t worst = 0;
    for (uint64_t b : r.offhost_bytes)
      worst = std::max(worst, b);
    std::printf("%-28s %6d %20llu %22llu %14.1f\n", row.name, r.steps,
                static_cast<unsigned long long>(worst),
                static_cast<unsigned long long>(r.total_offhost), r.time_us);
  }
}
