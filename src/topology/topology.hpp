#pragma once
// Topology: where each rank runs (host, NUMA node, package), which RDMA NIC is nearest to it,
// and the virtual rank orders the schedules use. probe() is the only code that reads hwloc;
// everything else here is plain data and pure functions.

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace rdmacoll::topology {

// What one rank learns about itself; exchanged through the rendezvous store.
struct LocalPlacement {
  std::string host;        // host identity (RDMACOLL_HOST_ID, else the hostname)
  std::string machine;     // kernel boot id: ranks sharing it share CPUs, whatever `host` says
  int numa_node = -1;      // NUMA node holding the rank's CPU binding; -1 if it spans several
  int package = -1;        // likewise for the package (socket)
  size_t cache_bytes = 0;  // its CPUs' last-level cache (the largest), 0 unknown
  std::string nic;         // nearest RDMA device ("" when there is none)
  std::string netdev;      // nearest network interface ("" when there is none)
  std::string nic_why;     // how the NIC was chosen, for the info log (not exchanged)

  std::string serialize() const;
  static LocalPlacement parse(const std::string& text);
};

// A NIC's ports as sysfs shows them (/sys/class/infiniband/<dev>/ports/<n>/{state,link_layer}).
struct NicPorts {
  bool active = false;     // a port is ACTIVE
  std::string link_layer;  // the active port's ("InfiniBand", "Ethernet"), else the first's
};

// Of the NICs that tie on locality, the ones a rank may take: with an ACTIVE port, and of the
// link layer most of those have (InfiniBand on a tie), so that an Ethernet storage port beside
// IB rails, or a rail that is down, is never counted in the local rank's choice. A NIC sysfs
// says nothing of is kept. Hosts with the same NICs in the same states filter the same way.
// `left_out` (if given) says which went and why, for the info log.
std::vector<std::string> usable_nics(const std::vector<std::string>& tied,
                                     const std::map<std::string, NicPorts>& ports,
                                     std::string* left_out = nullptr);

// Reads the ports of `devices` under `sysfs` (/sys/class/infiniband); missing ones are left out.
std::map<std::string, NicPorts> read_nic_ports(const std::string& sysfs,
                                               const std::vector<std::string>& devices);

struct ProbeOptions {
  std::string xml_file;       // hwloc XML to read instead of this machine (tests); "" = live
  std::vector<int> bind_pus;  // PUs (OS indices) the rank is bound to; empty = its binding
  // This rank's index among its host's ranks; -1: the launcher's (LOCAL_RANK from torchrun and
  // rdmacoll-run, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID), else 0.
  int local_rank = -1;
  std::string ib_sysfs = "/sys/class/infiniband";  // where the NICs' port states are read
};

// Reads hwloc. The NIC is the OpenFabrics device whose locality (its non-I/O ancestor) covers
// the most of the binding, the tightest such locality first (same package or NUMA node). Where
// several tie (unbound ranks, as torchrun leaves them, tie over every NIC; ranks bound to a
// socket tie over its NICs), the local rank picks among them in name order, so the ranks of a
// multi-rail host spread over its rails instead of all taking the first. RDMACOLL_IB_DEVICE,
// when set, wins. The network interface is chosen the same way.
LocalPlacement probe(const ProbeOptions& options = {});

// Per rank: host index (hosts numbered by first appearance in rank order) and local index
// (position among the ranks of its host, in rank order).
struct Layout {
  std::vector<int> host_of;   // rank -> host index
  std::vector<int> local_of;  // rank -> local index
  int hosts = 0;
};
Layout layout_of(const std::vector<std::string>& host_of_rank);

// Virtual order for recursive doubling and Bruck (order[v] = rank): ranks dealt round-robin
// over hosts, i.e. sorted by (local index, host index). For k ranks on each of N hosts (N a
// power of two) this is v = local * N + host: the host index sits in the low bits, so the first
// log2(N) steps, which move the fewest chunks, are the ones that cross hosts, and the off-host
// bytes per host fall from k^2 (N-1) m (host-major order) to the minimum k (N-1) m. With uneven
// ranks per host the deal still gives consecutive virtual ranks different hosts for as long as
// hosts have ranks left, which keeps the small early steps off-host and the large late ones
// local; correctness never depends on the order (every chunk lands at its real offset).
std::vector<int> interleaved_order(const Layout& layout);

// Order for the ring: each host's ranks contiguous (sorted by host, then local index), so one
// pass around the ring crosses hosts only N times.
std::vector<int> host_major_order(const Layout& layout);

// The ring's order with rails in mind: host-major as above (hosts in the same order, each
// host's ranks contiguous), but inside each host the rank the ring enters by and the one it
// leaves by are chosen so that every edge between hosts joins two ranks on the same rail
// (`rail_of[rank]`: its NIC's name, the same name being the same rail on every host, as NCCL
// assumes; "" for none). On rail-isolated fabrics an edge across rails is unreachable. Between
// them a host's ranks go rail by rail. Every edge can be kept on one rail when each host has
// two ranks on a rail all hosts share (or one rank in all), and with an even number of hosts
// when it has one rank per rail (the ring snakes); otherwise one edge crosses. Without rails
// this is host_major_order.
std::vector<int> rail_ring_order(const Layout& layout, const std::vector<std::string>& rail_of);

}  // namespace rdmacoll::topology
