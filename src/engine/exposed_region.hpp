#pragma once
// A user buffer whose registration was sent to peers for one call. When the call fails, a peer
// may still write into it later (its writes were posted before it saw the failure); the
// transport then drops the registration from its cache, so it is deregistered when the call
// lets go of it and such a late write fails at the peer instead of landing in memory the user
// frees and reuses. In ring-step mode the call first waits for the word of its ring
// neighbours (Call::leave_failed), after which the predecessor's writes have all landed.

#include <exception>
#include <memory>

#include "engine/call.hpp"
#include "transports/transport.hpp"

namespace rdmacoll::engine {

class ExposedRegion {
 public:
  ExposedRegion(transport::Transport& t, const std::shared_ptr<transport::MemoryRegion>& region,
                Call& call)
      : transport_(t), region_(region), call_(call), exceptions_(std::uncaught_exceptions()) {}
  ExposedRegion(const ExposedRegion&) = delete;
  ExposedRegion& operator=(const ExposedRegion&) = delete;
  ~ExposedRegion() {
    if (region_ && std::uncaught_exceptions() > exceptions_) {
      call_.leave_failed();
      transport_.forget_registration(*region_);
    }
  }

 private:
  transport::Transport& transport_;
  const std::shared_ptr<transport::MemoryRegion>& region_;
  Call& call_;
  int exceptions_;
};

}  // namespace rdmacoll::engine
