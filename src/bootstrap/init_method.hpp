#pragma once
// Turns an init_method ("env://", "tcp://host:port", "pmix://") plus the launcher's environment
// into the way the ranks meet: rank 0's store at an address, or the launcher's PMIx server.

#include <cstdint>
#include <string>

namespace rdmacoll::bootstrap {

// Where rank 0 hosts the store, this process's rank and the world size.
struct InitTarget {
  // Through the launcher's PMIx server (rank and world size come from it, no address).
  bool pmix = false;
  std::string master_addr;
  uint16_t master_port = 0;
  int rank = -1;
  int world_size = -1;
  std::string rank_source;  // which variables gave rank/world size, for messages
};

// rank/world_size of -1 mean "from the environment": RANK/WORLD_SIZE (torchrun, rdmacoll-run),
// else OMPI_COMM_WORLD_RANK/SIZE (Open MPI), PMI_RANK/PMI_SIZE (MPICH), SLURM_PROCID/NTASKS.
// "pmix://" meets through PMIx; so does "env://" when MASTER_ADDR and MASTER_PORT are both unset
// and a PMIx launcher started the process (mpirun, srun --mpi=pmix): the cluster's way, with
// nothing to choose. A MASTER_ADDR wins, so torchrun inside an srun allocation keeps its own.
InitTarget resolve_init_method(const std::string& init_method, int rank, int world_size);

}  // namespace rdmacoll::bootstrap
