#include "bootstrap/init_method.hpp"

#include <cerrno>
#include <cstdlib>
#include <utility>

#include "bootstrap/pmix.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::bootstrap {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

long parse_int(const std::string& text, const std::string& what, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) {
    throw InvalidArgument(what + ": expected an integer in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "], got '" + text + "'");
  }
  return v;
}

// The first launcher whose pair of variables is present gives rank and world size.
void rank_from_environment(InitTarget& r) {
  static const std::pair<const char*, const char*> kLaunchers[] = {
      {"RANK", "WORLD_SIZE"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMI_RANK", "PMI_SIZE"},
      {"SLURM_PROCID", "SLURM_NTASKS"},
  };
  for (const auto& [rank_var, size_var] : kLaunchers) {
    const char* rv = env(rank_var);
    const char* sv = env(size_var);
    if (!rv || !sv) continue;
    if (r.world_size < 0) r.world_size = static_cast<int>(parse_int(sv, size_var, 1, 1 << 24));
    if (r.rank < 0) r.rank = static_cast<int>(parse_int(rv, rank_var, 0, 1 << 24));
    r.rank_source = std::string(rank_var) + "/" + size_var;
    return;
  }
}

}  // namespace

bool pmix_launched() {
  return env("PMIX_NAMESPACE") && env("PMIX_RANK");
}

InitTarget resolve_init_method(const std::string& init_method, int rank, int world_size) {
  InitTarget r;
  r.rank = rank;
  r.world_size = world_size;
  r.rank_source = "init options";
  if (init_method == "pmix://" || (init_method == "env://" && !env("MASTER_ADDR") &&
                                   !env("MASTER_PORT") && pmix_launched() && pmix_built_in())) {
    r.pmix = true;
    r.rank_source = "PMIx";
    return r;  // rank and world size: the PMIx server's, checked against these when given
  }
  if (init_method == "env://") {
    const char* addr = env("MASTER_ADDR");
    const char* port = env("MASTER_PORT");
    if (!addr && pmix_launched()) {
      throw InvalidArgument(
          "init_method env://: MASTER_ADDR is not set, and this build of rdmacoll has no PMIx "
          "support to meet through the launcher that started it (PMIX_NAMESPACE is set): "
          "rebuild with libpmix-dev installed, or set MASTER_ADDR and MASTER_PORT");
    }
    if (!addr) throw InvalidArgument("init_method env://: MASTER_ADDR is not set");
    if (!port) throw InvalidArgument("init_method env://: MASTER_PORT is not set");
    r.master_addr = addr;
    r.master_port = static_cast<uint16_t>(parse_int(port, "MASTER_PORT", 1, 65535));
  } else if (init_method.rfind("tcp://", 0) == 0) {
    const std::string hostport = init_method.substr(6);
    const auto colon = hostport.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      throw InvalidArgument("init_method: expected tcp://host:port, got '" + init_method + "'");
    }
    r.master_addr = hostport.substr(0, colon);
    r.master_port = static_cast<uint16_t>(
        parse_int(hostport.substr(colon + 1), "port in " + init_method, 1, 65535));
  } else {
    throw InvalidArgument("init_method: expected env://, tcp://host:port or pmix://, got '" +
                          init_method + "'");
  }
  if (r.rank < 0 || r.world_size < 0) rank_from_environment(r);
  if (r.world_size < 1) {
    throw InvalidArgument(
        "world size unknown: set WORLD_SIZE (or launch with rdmacoll-run, torchrun, mpirun or "
        "srun), or pass world_size");
  }
  if (r.rank < 0) {
    throw InvalidArgument(
        "rank unknown: set RANK (or launch with rdmacoll-run, torchrun, mpirun "
        "or srun), or pass rank");
  }
  if (r.rank >= r.world_size) {
    throw InvalidArgument("rank " + std::to_string(r.rank) + " is out of range for world size " +
                          std::to_string(r.world_size) + " (from " + r.rank_source + ")");
  }
  return r;
}

}  // namespace rdmacoll::bootstrap
