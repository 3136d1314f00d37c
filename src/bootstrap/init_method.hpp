#pragma once
// Turns an init_method ("env://", "tcp://host:port") plus the launcher's environment into the
// rendezvous address, this process's rank and the world size.

#include <cstdint>
#include <string>

namespace rdmacoll::bootstrap {

// Where rank 0 hosts the store, this process's rank and the world size.
struct InitTarget {
  std::string master_addr;
  uint16_t master_port = 0;
  int rank = -1;
  int world_size = -1;
  std::string rank_source;  // which variables gave rank/world size, for messages
};

// rank/world_size of -1 mean "from the environment": RANK/WORLD_SIZE (torchrun, rdmacoll-run),
// else OMPI_COMM_WORLD_RANK/SIZE (Open MPI), PMI_RANK/PMI_SIZE (MPICH), SLURM_PROCID/NTASKS.
InitTarget resolve_init_method(const std::string& init_method, int rank, int world_size);

}  // namespace rdmacoll::bootstrap
