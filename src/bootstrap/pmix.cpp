#include "bootstrap/pmix.hpp"

#include <pmix.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "rdmacoll/errors.hpp"

namespace rdmacoll::bootstrap {

struct PmixSession::State {
  pmix_proc_t me;
  pmix_proc_t all;  // every rank of our namespace
};

namespace {

// Keys are numbered per process, in the order the (collective) exchanges happen, so that a
// second world in the same job never reads the first one's values.
std::atomic<uint64_t> next_exchange{0};

std::string error_of(pmix_status_t rc) {
  return std::string(PMIx_Error_string(rc)) + " (" + std::to_string(rc) + ")";
}

// A number PMIx gives in whichever integer type its server chose.
long number_of(const pmix_value_t& v) {
  switch (v.type) {
    case PMIX_UINT8:
      return v.data.uint8;
    case PMIX_UINT16:
      return v.data.uint16;
    case PMIX_UINT32:
      return v.data.uint32;
    case PMIX_UINT64:
      return static_cast<long>(v.data.uint64);
    case PMIX_INT:
      return v.data.integer;
    case PMIX_INT8:
      return v.data.int8;
    case PMIX_INT16:
      return v.data.int16;
    case PMIX_INT32:
      return v.data.int32;
    case PMIX_INT64:
      return static_cast<long>(v.data.int64);
    case PMIX_SIZE:
      return static_cast<long>(v.data.size);
    case PMIX_PROC_RANK:
      return static_cast<long>(v.data.rank);
    default:
      return -1;
  }
}

// `key` of `proc` as a number; `fallback` when the server does not know it.
long get_number(const pmix_proc_t& proc, const char* key, long fallback) {
  pmix_value_t* v = nullptr;
  if (PMIx_Get(&proc, key, nullptr, 0, &v) != PMIX_SUCCESS || !v) return fallback;
  const long n = number_of(*v);
  PMIX_VALUE_RELEASE(v);
  return n < 0 ? fallback : n;
}

// The fence's options: the data collected, and its time bounded (PMIx counts whole seconds).
struct FenceInfo {
  explicit FenceInfo(bool collect, std::chrono::milliseconds timeout) {
    PMIX_INFO_CREATE(info, 2);
    bool c = collect;
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &c, PMIX_BOOL);
    int seconds = static_cast<int>(std::max<int64_t>(1, (timeout.count() + 999) / 1000));
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
  }
  ~FenceInfo() { PMIX_INFO_FREE(info, 2); }
  FenceInfo(const FenceInfo&) = delete;
  FenceInfo& operator=(const FenceInfo&) = delete;
  pmix_info_t* info = nullptr;
};

// One session per process: PMIx_Init once, PMIx_Finalize at exit (a launcher takes a process
// that ends without finalizing for a failed one; initializing again after a finalize is not
// something every server supports).
std::mutex session_mutex;
std::shared_ptr<PmixSession> the_session;

void finalize_at_exit() {
  std::lock_guard lock(session_mutex);
  if (the_session) PMIx_Finalize(nullptr, 0);
}

}  // namespace

bool pmix_built_in() {
  return true;
}

std::shared_ptr<PmixSession> PmixSession::connect(const std::string& where) {
  std::lock_guard lock(session_mutex);
  if (the_session) return the_session;
  if (!pmix_launched()) {
    throw InvalidArgument(where +
                          ": init_method pmix://, but no PMIx launcher started this process "
                          "(PMIX_NAMESPACE and PMIX_RANK are unset): launch with mpirun, "
                          "srun --mpi=pmix or prun, or use env:// with MASTER_ADDR and "
                          "MASTER_PORT");
  }
  auto s = std::shared_ptr<PmixSession>(new PmixSession());
  s->state_ = std::make_unique<State>();
  pmix_proc_t& me = s->state_->me;
  if (const pmix_status_t rc = PMIx_Init(&me, nullptr, 0); rc != PMIX_SUCCESS) {
    throw InvalidArgument(where + ": the launcher's PMIx server (namespace " +
                          std::getenv("PMIX_NAMESPACE") + ") did not answer: " + error_of(rc) +
                          "; is this process still under the launcher that started it?");
  }
  PMIX_LOAD_PROCID(&s->state_->all, me.nspace, PMIX_RANK_WILDCARD);
  s->rank_ = static_cast<int>(me.rank);
  s->nspace_ = me.nspace;
  s->size_ = static_cast<int>(get_number(s->state_->all, PMIX_JOB_SIZE, -1));
  if (s->size_ < 1 || s->rank_ >= s->size_) {
    PMIx_Finalize(nullptr, 0);
    throw InvalidArgument(where + ": the PMIx server gave rank " + std::to_string(s->rank_) +
                          " but no usable job size (" + std::to_string(s->size_) + ")");
  }
  s->local_size_ = static_cast<int>(get_number(s->state_->all, PMIX_LOCAL_SIZE, 1));
  s->local_rank_ = static_cast<int>(get_number(me, PMIX_LOCAL_RANK, 0));
  the_session = s;
  std::atexit(finalize_at_exit);
  return s;
}

PmixSession::~PmixSession() = default;

std::vector<Bytes> PmixSession::all_gather(const std::string& name, const Bytes& mine,
                                           std::chrono::milliseconds timeout) {
  const std::string key = "rdmacoll." + std::to_string(next_exchange++) + "." + name;
  if (key.size() >= PMIX_MAX_KEYLEN) throw Error("PMIx key too long: " + key);
  // One leading byte, so that no value is empty (an empty byte object has no bytes pointer).
  Bytes framed(mine.size() + 1);
  framed[0] = 'R';
  if (!mine.empty()) std::memcpy(framed.data() + 1, mine.data(), mine.size());
  pmix_value_t v;
  PMIX_VALUE_CONSTRUCT(&v);
  v.type = PMIX_BYTE_OBJECT;
  v.data.bo.bytes = reinterpret_cast<char*>(framed.data());
  v.data.bo.size = framed.size();
  pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key.c_str(), &v);  // copies the bytes
  if (rc == PMIX_SUCCESS) rc = PMIx_Commit();
  if (rc != PMIX_SUCCESS) throw Error("PMIx could not publish " + key + ": " + error_of(rc));
  {
    FenceInfo info(true, timeout);
    rc = PMIx_Fence(&state_->all, 1, info.info, 2);
  }
  if (rc == PMIX_ERR_TIMEOUT) {
    throw Timeout("not every rank of PMIx namespace " + nspace_ + " reached the exchange of " +
                  name + " within " + std::to_string(timeout.count()) + " ms");
  }
  if (rc != PMIX_SUCCESS) {
    throw PeerFailure("the PMIx fence for " + name + " failed: " + error_of(rc) +
                      " (a rank of the job may have exited)");
  }
  std::vector<Bytes> all(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    pmix_proc_t p;
    PMIX_LOAD_PROCID(&p, state_->me.nspace, static_cast<pmix_rank_t>(r));
    pmix_value_t* got = nullptr;
    rc = PMIx_Get(&p, key.c_str(), nullptr, 0, &got);
    if (rc != PMIX_SUCCESS || !got) {
      throw Error("PMIx has no " + name + " from rank " + std::to_string(r) +
                  " after the fence: " + error_of(rc));
    }
    const bool ok = got->type == PMIX_BYTE_OBJECT && got->data.bo.size >= 1 && got->data.bo.bytes &&
                    got->data.bo.bytes[0] == 'R';
    if (ok) {
      const auto* b = reinterpret_cast<const uint8_t*>(got->data.bo.bytes);
      all[r].assign(b + 1, b + got->data.bo.size);
    }
    PMIX_VALUE_RELEASE(got);
    if (!ok) throw Error("PMIx holds a malformed " + name + " from rank " + std::to_string(r));
  }
  return all;
}

bool PmixSession::fence(std::chrono::milliseconds timeout) {
  FenceInfo info(false, timeout);
  return PMIx_Fence(&state_->all, 1, info.info, 2) == PMIX_SUCCESS;
}

void PmixSession::join_fence_without_waiting() {
  FenceInfo info(false, std::chrono::hours(1));
  PMIx_Fence_nb(
      &state_->all, 1, info.info, 2, [](pmix_status_t, void*) {}, nullptr);
}

}  // namespace rdmacoll::bootstrap
