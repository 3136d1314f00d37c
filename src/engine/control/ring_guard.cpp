#include "engine/control/ring_guard.hpp"

#include <algorithm>
#include <string>

#include "engine/call.hpp"
#include "engine/control/exchange_scratch.hpp"

namespace rdmacoll::engine {

RingGuard::~RingGuard() {
  for (auto& p : watch_) {
    if (p.req && !p.req->done()) call_.t_.cancel(p.req);
  }
}

void RingGuard::listen() {
  if (!watch_.empty()) return;
  GroupState& g = call_.g_;
  for (int i = 0; i < 2; ++i) {
    std::vector<uint8_t>& buffer = g.scratch.get<ExchangeScratch>().neighbour_error[i];
    buffer.resize(kMaxErrorBytes);
    const int from = neighbour_[i];
    watch_.push_back({call_.guarded([&] {
                        return call_.t_.recv(
                            call_.global(from),
                            make_tag(TagKind::Error, g.id, call_.seq_, static_cast<uint32_t>(from)),
                            buffer.data(), buffer.size());
                      }),
                      from, Pending::Kind::Error});
  }
}

void RingGuard::check() {
  for (size_t i = 0; i < watch_.size(); ++i) {
    if (!watch_[i].req->done()) continue;
    const std::vector<uint8_t>& buffer = call_.g_.scratch.get<ExchangeScratch>().neighbour_error[i];
    const std::string reason(reinterpret_cast<const char*>(buffer.data()),
                             std::min(watch_[i].req->length(), buffer.size()));
    call_.note_error(reason);  // passed on as it came, so every rank raises the finder's words
    throw InvalidArgument(call_.where() + ": " + reason +
                          " (found by another rank; reported by rank " +
                          std::to_string(call_.global(watch_[i].peer)) + ")");
  }
}

bool RingGuard::spread() noexcept {
  if (spreading_) return false;
  spreading_ = true;
  GroupState& g = call_.g_;
  try {
    listen();
    if (refused_ && call_.error_text_.empty()) {
      // The successor refused our write because its call is over: its report (sent to us
      // first) says why; pass those words on, not our own failure's.
      call_.wait(watch_, 1, 2);
      const std::vector<uint8_t>& buffer = g.scratch.get<ExchangeScratch>().neighbour_error[1];
      call_.note_error(std::string(reinterpret_cast<const char*>(buffer.data()),
                                   std::min(watch_[1].req->length(), buffer.size())));
    }
    std::string reason = call_.error_text_.empty() ? "rank " + std::to_string(g.global_rank) +
                                                         " left the call with an error"
                                                   : call_.error_text_;
    reason.resize(std::min(reason.size(), kMaxErrorBytes));
    std::vector<Pending>& sends = call_.sends_;
    auto report = [&](int to) {
      RequestPtr req = call_.guarded([&] {
        return call_.t_.send(
            call_.global(to),
            make_tag(TagKind::Error, g.id, call_.seq_, static_cast<uint32_t>(g.rank)),
            reason.data(), reason.size());
      });
      if (!req->done()) sends.push_back({std::move(req), to, Pending::Kind::Error});
    };
    report(neighbour_[0]);               // the predecessor: stop writing to us
    call_.wait(sends, 0, sends.size());  // our writes to the successor have landed
    report(neighbour_[1]);
    call_.wait(sends, 0, sends.size());
    call_.wait(watch_, 0, watch_.size());  // the predecessor's writes to us have landed
    // Their completions (verbs: immediates) may still wait in a queue: take them now, while
    // the expects they match are posted, so none is left over for a later call.
    while (call_.t_.progress()) {
    }
  } catch (...) {
    // fail() marked the group broken, or an unexpected error did: say so.
    if (!g.broken) g.broken = "a ring neighbour did not confirm the end of a failed call";
  }
  return true;
}

}  // namespace rdmacoll::engine
