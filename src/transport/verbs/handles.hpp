#pragma once
// Owning handles for verbs objects: each frees its object with the matching verbs call when it
// goes, so a constructor that throws halfway (after ibv_open_device, say) leaks nothing. They
// convert to the raw pointer, so verbs calls take them as they are. The transport's destructor
// still resets them in an explicit order (QPs before the SRQ and CQ, registrations before the
// PD, the device last), which verbs requires.

#include <infiniband/verbs.h>

#include <utility>

namespace rdmacoll::transport::verbs_handles {

template <typename T, int (*Free)(T*)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(T* p) : p_(p) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  // Takes ownership of `p` (what an ibv_create_* call returned, maybe null).
  Handle& operator=(T* p) {
    reset();
    p_ = p;
    return *this;
  }

  operator T*() const { return p_; }
  T* operator->() const { return p_; }
  T* get() const { return p_; }
  void reset() {
    if (p_) Free(p_);
    p_ = nullptr;
  }

 private:
  T* p_ = nullptr;
};

using Context = Handle<ibv_context, ibv_close_device>;
using ProtectionDomain = Handle<ibv_pd, ibv_dealloc_pd>;
using CompletionChannel = Handle<ibv_comp_channel, ibv_destroy_comp_channel>;
using CompletionQueue = Handle<ibv_cq, ibv_destroy_cq>;
using SharedReceiveQueue = Handle<ibv_srq, ibv_destroy_srq>;
using QueuePair = Handle<ibv_qp, ibv_destroy_qp>;
using Registration = Handle<ibv_mr, ibv_dereg_mr>;

}  // namespace rdmacoll::transport::verbs_handles
