// PMIx in a build without libpmix: never launched by it, and a clear error when asked for.
#include "bootstrap/pmix.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::bootstrap {

struct PmixSession::State {};

bool pmix_built_in() {
  return false;
}

std::shared_ptr<PmixSession> PmixSession::connect(const std::string& where) {
  throw InvalidArgument(where +
                        ": init_method pmix://, but this build of rdmacoll has no PMIx support "
                        "(libpmix was not found when it was built; install libpmix-dev and "
                        "rebuild, or use env:// with MASTER_ADDR and MASTER_PORT)");
}

PmixSession::~PmixSession() = default;

std::vector<Bytes> PmixSession::all_gather(const std::string&, const Bytes&,
                                           std::chrono::milliseconds) {
  return {};
}

bool PmixSession::fence(std::chrono::milliseconds) {
  return false;
}

void PmixSession::join_fence_without_waiting() {}

}  // namespace rdmacoll::bootstrap
