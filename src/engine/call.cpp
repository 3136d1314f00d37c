#include "engine/call.hpp"

#include "engine/control/agreement.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "engine/control/exchange_scratch.hpp"

namespace rdmacoll::engine {

void check_usable(const GroupState& g, const char* op) {
  if (!g.is_member()) {
    throw InvalidArgument(std::string(op) + ": this process is not a member of " + g.describe() +
                          "; only members may call collectives on it");
  }
  if (g.broken) {
    throw InvalidArgument(std::string(op) + ": " + g.describe() +
                          " is unusable after an earlier failure: " + *g.broken);
  }
}

CallDescriptor make_descriptor(const GroupState& g, Call& call, const RoundArgs& a) {
  CallDescriptor d;
  d.seq = call.seq();
  d.signal_token = call.token();
  d.group = g.id;
  d.rank = g.rank;
  d.op = a.op;
  d.reduce_op = static_cast<uint8_t>(a.reduce_op);
  d.total_numel = a.total_numel;
  d.root = a.root;
  d.ok = a.local_error.empty();
  d.error = a.local_error;
  d.in_dtype = static_cast<uint8_t>(a.in_dtype);
  d.out_dtype = static_cast<uint8_t>(a.out_dtype);
  d.in_numel = static_cast<uint64_t>(a.in_numel);
  d.out_numel = static_cast<uint64_t>(a.out_numel);
  return d;
}

void Call::post_watch() {
  for (int i = 0; i < 2; ++i) {
    std::vector<uint8_t>& buffer = g_.scratch.get<ExchangeScratch>().neighbour_error[i];
    buffer.resize(kMaxErrorBytes);
    const int from = neighbour_[i];
    watch_.push_back({guarded([&] {
                        return t_.recv(
                            global(from),
                            make_tag(TagKind::Error, g_.id, seq_, static_cast<uint32_t>(from)),
                            buffer.data(), buffer.size());
                      }),
                      from, Pending::Kind::Error});
  }
}

void Call::check_neighbours() {
  for (size_t i = 0; i < watch_.size(); ++i) {
    if (!watch_[i].req->done()) continue;
    const std::vector<uint8_t>& buffer = g_.scratch.get<ExchangeScratch>().neighbour_error[i];
    const std::string reason(reinterpret_cast<const char*>(buffer.data()),
                             std::min(watch_[i].req->length(), buffer.size()));
    note_error(reason);  // passed on as it came, so every rank raises the finder's words
    throw InvalidArgument(where() + ": " + reason + " (found by another rank; reported by rank " +
                          std::to_string(global(watch_[i].peer)) + ")");
  }
}

void Call::spread_error() noexcept {
  spreading_ = true;
  try {
    if (watch_.empty()) post_watch();
    if (refused_ && error_text_.empty()) {
      // The successor refused our write because its call is over: its report (sent to us
      // first) says why; pass those words on, not our own failure's.
      wait(watch_, 1, 2);
      const std::vector<uint8_t>& buffer = g_.scratch.get<ExchangeScratch>().neighbour_error[1];
      note_error(std::string(reinterpret_cast<const char*>(buffer.data()),
                             std::min(watch_[1].req->length(), buffer.size())));
    }
    std::string reason = error_text_.empty() ? "rank " + std::to_string(g_.global_rank) +
                                                   " left the call with an error"
                                             : error_text_;
    reason.resize(std::min(reason.size(), kMaxErrorBytes));
    auto report = [&](int to) {
      RequestPtr req = guarded([&] {
        return t_.send(global(to),
                       make_tag(TagKind::Error, g_.id, seq_, static_cast<uint32_t>(g_.rank)),
                       reason.data(), reason.size());
      });
      if (!req->done()) sends_.push_back({std::move(req), to, Pending::Kind::Error});
    };
    report(neighbour_[0]);           // the predecessor: stop writing to us
    wait(sends_, 0, sends_.size());  // our writes to the successor have landed
    report(neighbour_[1]);
    wait(sends_, 0, sends_.size());
    wait(watch_, 0, watch_.size());  // the predecessor's writes to us have landed
    // Their completions (verbs: immediates) may still wait in a queue: take them now, while
    // the expects they match are posted, so none is left over for a later call.
    while (t_.progress()) {
    }
  } catch (...) {
    // fail() marked the group broken, or an unexpected error did: say so.
    if (!g_.broken) g_.broken = "a ring neighbour did not confirm the end of a failed call";
  }
}

}  // namespace rdmacoll::engine
