// The one place that reads hwloc: this rank's host, NUMA node, package, last-level cache and
// nearest RDMA NIC.

#include <hwloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "common/settings.hpp"
#include "rdmacoll/errors.hpp"
#include "topology/topology.hpp"

namespace rdmacoll::topology {

namespace {

struct TopologyHandle {
  hwloc_topology_t t = nullptr;
  ~TopologyHandle() {
    if (t) hwloc_topology_destroy(t);
  }
};

struct Bitmap {
  hwloc_bitmap_t b = hwloc_bitmap_alloc();
  ~Bitmap() { hwloc_bitmap_free(b); }
};

// The object of `type` whose cpuset contains the whole binding, or -1 when it spans several.
int enclosing_index(hwloc_topology_t t, hwloc_obj_type_t type, hwloc_const_cpuset_t binding) {
  int found = -1;
  for (hwloc_obj_t o = hwloc_get_next_obj_by_type(t, type, nullptr); o;
       o = hwloc_get_next_obj_by_type(t, type, o)) {
    if (hwloc_bitmap_isincluded(binding, o->cpuset)) {
      found = static_cast<int>(o->os_index);
      break;
    }
  }
  return found;
}

std::string host_identity() {
  if (const auto id = settings::read(settings::kHostId)) return *id;
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// The largest data (or unified) cache holding any of the binding's CPUs: the last level, where
// the lines a call stores wait before memory (bound across packages: the largest it touches).
size_t last_level_cache(hwloc_topology_t t, hwloc_const_cpuset_t binding) {
  size_t largest = 0;
  for (hwloc_obj_type_t type : {HWLOC_OBJ_L1CACHE, HWLOC_OBJ_L2CACHE, HWLOC_OBJ_L3CACHE,
                                HWLOC_OBJ_L4CACHE, HWLOC_OBJ_L5CACHE}) {
    for (hwloc_obj_t o = hwloc_get_next_obj_by_type(t, type, nullptr); o;
         o = hwloc_get_next_obj_by_type(t, type, o)) {
      if (o->attr && hwloc_bitmap_intersects(o->cpuset, binding)) {
        largest = std::max<size_t>(largest, o->attr->cache.size);
      }
    }
  }
  return largest;
}

// The OS devices of `type` whose locality (its non-I/O ancestor) covers the most of the binding,
// on equal cover the tightest locality (a package's device over a machine-wide one); in name
// order ("mlx5_2" before "mlx5_10"). Empty when there is none.
std::vector<std::string> nearest_osdevs(hwloc_topology_t t, hwloc_obj_osdev_type_t type,
                                        hwloc_const_cpuset_t binding) {
  std::vector<std::string> best;
  int best_cover = -1;
  int best_width = 0;
  for (hwloc_obj_t o = hwloc_get_next_osdev(t, nullptr); o; o = hwloc_get_next_osdev(t, o)) {
    if (o->attr->osdev.type != type || !o->name) continue;
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, o);
    if (!anc || !anc->cpuset) continue;
    Bitmap common;
    hwloc_bitmap_and(common.b, anc->cpuset, binding);
    const int cover = hwloc_bitmap_weight(common.b);
    const int width = hwloc_bitmap_weight(anc->cpuset);
    if (cover > best_cover || (cover == best_cover && width < best_width)) {
      best_cover = cover;
      best_width = width;
      best.clear();
    }
    if (cover == best_cover && width == best_width) best.emplace_back(o->name);
  }
  std::sort(best.begin(), best.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  return best;
}

// The launcher's local rank, or 0.
int launcher_local_rank() {
  for (const char* name :
       {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    const char* v = std::getenv(name);
    if (!v || !*v) continue;
    char* end = nullptr;
    const long r = std::strtol(v, &end, 10);
    if (*end == '\0' && r >= 0 && r < (1 << 24)) return static_cast<int>(r);
  }
  return 0;
}

}  // namespace

LocalPlacement probe(const ProbeOptions& options) {
  LocalPlacement p;
  p.host = host_identity();
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof buf, f)) p.machine = buf;
    std::fclose(f);
    while (!p.machine.empty() && (p.machine.back() == '\n' || p.machine.back() == ' ')) {
      p.machine.pop_back();
    }
  }
  TopologyHandle topo;
  if (hwloc_topology_init(&topo.t) != 0) throw Error("hwloc_topology_init failed");
  hwloc_topology_set_io_types_filter(topo.t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (!options.xml_file.empty() && hwloc_topology_set_xml(topo.t, options.xml_file.c_str()) != 0) {
    throw InvalidArgument("hwloc cannot read topology XML '" + options.xml_file + "'");
  }
  if (hwloc_topology_load(topo.t) != 0) throw Error("hwloc_topology_load failed");

  Bitmap binding;
  if (!options.bind_pus.empty()) {
    for (int pu : options.bind_pus)
      hwloc_bitmap_set(binding.b, static_cast<unsigned>(pu));
  } else if (hwloc_get_cpubind(topo.t, binding.b, HWLOC_CPUBIND_PROCESS) != 0) {
    hwloc_bitmap_copy(binding.b, hwloc_topology_get_topology_cpuset(topo.t));
  }
  p.numa_node = enclosing_index(topo.t, HWLOC_OBJ_NUMANODE, binding.b);
  p.package = enclosing_index(topo.t, HWLOC_OBJ_PACKAGE, binding.b);
  p.cache_bytes = last_level_cache(topo.t, binding.b);

  const int local = options.local_rank >= 0 ? options.local_rank : launcher_local_rank();
  auto pick = [&](const std::vector<std::string>& tied) {
    return tied.empty() ? std::string() : tied[static_cast<size_t>(local) % tied.size()];
  };
  p.netdev = pick(nearest_osdevs(topo.t, HWLOC_OBJ_OSDEV_NETWORK, binding.b));
  if (const auto dev = settings::read(settings::kIbDevice)) {
    p.nic = *dev;
    p.nic_why = "RDMACOLL_IB_DEVICE";
  } else {
    const auto nearest = nearest_osdevs(topo.t, HWLOC_OBJ_OSDEV_OPENFABRICS, binding.b);
    std::string left_out;
    const auto tied = usable_nics(nearest, read_nic_ports(options.ib_sysfs, nearest), &left_out);
    p.nic = pick(tied);
    if (tied.size() == 1) {
      p.nic_why = "the one nearest this rank's CPU binding";
    } else if (tied.size() > 1) {
      p.nic_why = std::to_string(tied.size()) +
                  " equally near this rank's CPU binding; local rank " + std::to_string(local) +
                  " takes number " + std::to_string(local % tied.size());
    }
    if (!left_out.empty()) p.nic_why += " (" + left_out + ")";
  }
  return p;
}

}  // namespace rdmacoll::topology
