// The point-to-point protocol, one step at a time (docs/design.md): a send up to the inline
// limit is one message with its data; a larger one sends a header, the receiver answers with a
// clear-to-send naming its registered buffer (or a refusal when the sizes differ), and the
// sender writes the bytes one-sided with a signal the receiver chose.

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "engine/call.hpp"
#include "engine/p2p.hpp"
#include "engine/p2p_messages.hpp"
#include "engine/p2p_op.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::engine {

using transport::Clock;
using transport::RequestPtr;

bool PointToPoint::step_send(Op& op) {
  const int me = op.me;
  if (!op.started) {
    Refusals& refusals = refusals_[{op.group, op.peer}];
    raise_refused(op, refusals);
    op.started = true;
    const Channel ch{op.group, op.peer, op.tag};
    op.seq = sent_[ch]++;
    const bool inline_send = op.bytes <= inline_limit(op);
    if (inline_send) watch_refusals(op, refusals);
    op.buffer.resize(p2p::kDataHeaderBytes + (inline_send ? op.bytes : 0));
    p2p::encode(p2p::DataHeader{inline_send ? p2p::DataKind::Inline : p2p::DataKind::RequestToSend,
                                op.bytes, op.seq},
                op.buffer.data());
    if (inline_send && op.bytes) {
      std::memcpy(op.buffer.data() + p2p::kDataHeaderBytes, op.data, op.bytes);
    }
    op.data_msg =
        t_.send(op.global(op.peer),
                p2p::tag(op.group, op.tag, p2p::Direction::Data, static_cast<uint32_t>(me)),
                op.buffer.data(), op.buffer.size());
    if (!inline_send) {
      op.cts_buffer.resize(p2p::kMaxClearToSendBytes);
      op.cts = t_.recv(
          op.global(op.peer),
          p2p::tag(op.group, op.tag, p2p::Direction::ClearToSend, static_cast<uint32_t>(op.peer)),
          op.cts_buffer.data(), op.cts_buffer.size());
    }
    return true;
  }
  bool moved = false;
  if (op.data_msg->failed()) raise_failed(op, op.peer, *op.data_msg);
  if (op.cts && !op.transfer) {
    if (op.cts->failed()) raise_failed(op, op.peer, *op.cts);
    if (!op.cts->done()) return false;
    const auto c = p2p::parse_clear_to_send({op.cts_buffer.data(), op.cts->length()});
    if (!c) throw TransportError(op.what() + ": malformed clear-to-send from the receiver");
    if (c->seq < op.seq) {  // left over from a receive that failed: drop it, wait for ours
      op.cts = t_.recv(
          op.global(op.peer),
          p2p::tag(op.group, op.tag, p2p::Direction::ClearToSend, static_cast<uint32_t>(op.peer)),
          op.cts_buffer.data(), op.cts_buffer.size());
      return true;
    }
    if (c->seq != op.seq) {
      throw TransportError(op.what() + ": clear-to-send #" + std::to_string(c->seq) +
                           " came for send #" + std::to_string(op.seq));
    }
    if (!c->ok)
      throw InvalidArgument(op.what() + ": the receiver refused it: " + std::string(c->error));
    if (c->bytes != op.bytes) {
      throw InvalidArgument(op.what() + ": the matching recv on rank " +
                            std::to_string(op.global(op.peer)) + " takes " +
                            std::to_string(c->bytes) + " bytes; sizes must agree");
    }
    op.region = t_.needs_registered_source() ? t_.register_memory(op.data, op.bytes)
                                             : std::make_shared<SourceView>(op.data, op.bytes);
    op.remote = t_.unpack_remote(op.global(op.peer), c->addr, c->bytes, c->key);
    op.transfer =
        t_.write(*op.region, 0, *op.remote, 0, op.bytes, transport::write_signal(c->token, 0));
    moved = true;
  }
  if (op.transfer && op.transfer->failed()) {
    raise_failed(op, op.peer, *op.transfer);
  }
  return moved;
}

void PointToPoint::post_data_receive(Op& op, int peer) {
  const uint64_t tag =
      p2p::tag(op.group, op.tag, p2p::Direction::Data, static_cast<uint32_t>(peer));
  if (op.peer >= 0) {
    op.buffer.resize(p2p::kDataHeaderBytes + inline_limit(op));
    op.data_msg = t_.recv(op.global(peer), tag, op.buffer.data(), op.buffer.size());
    return;
  }
  op.any_buffers[peer].resize(p2p::kDataHeaderBytes + inline_limit(op));
  op.any[peer] =
      t_.recv(op.global(peer), tag, op.any_buffers[peer].data(), op.any_buffers[peer].size());
}

// A receive past the inline limit tells its sender where to write; with `refusal`, that it must
// not (the sizes differ).
void PointToPoint::send_clear_to_send(Op& op, int peer, const std::string& refusal) {
  p2p::ClearToSend c;
  c.seq = op.seq;
  c.bytes = op.bytes;
  transport::Bytes key;
  if (refusal.empty()) {
    op.region = t_.register_memory(op.data, op.bytes);
    op.token = t_.reserve_token();
    key = op.region->packed_key();
    c.addr = reinterpret_cast<uint64_t>(op.data);
    c.token = *op.token;
    c.key = key;
    op.transfer =
        t_.expect(op.global(peer), *op.region, 0, op.bytes, transport::write_signal(*op.token, 0));
  } else {
    c.ok = false;
    c.error = refusal;
  }
  op.cts_buffer = p2p::encode(c);
  op.cts =
      t_.send(op.global(peer),
              p2p::tag(op.group, op.tag, p2p::Direction::ClearToSend, static_cast<uint32_t>(op.me)),
              op.cts_buffer.data(), op.cts_buffer.size());
  op.cts_sent = true;
}

void PointToPoint::start_recv(Op& op) {
  op.started = true;
  if (op.peer < 0) {
    // From any source: whichever member's data message comes first (a stashed one first).
    const int p = op.g->size();
    for (int r = 0; r < p; ++r) {
      if (r == op.me) continue;
      auto it = stash_.find({op.group, r, op.tag});
      if (it != stash_.end() && !it->second.empty()) {
        std::vector<uint8_t> message = std::move(it->second.front());
        it->second.pop_front();
        if (it->second.empty()) stash_.erase(it);
        op.peer = r;
        op.seq = received_[{op.group, r, op.tag}]++;
        op.work->set_source(op.global(r));
        if (!take_data(op, r, message)) post_data_receive(op, r);
        return;
      }
    }
    op.any.resize(p);
    op.any_buffers.resize(p);
    for (int r = 0; r < p; ++r) {
      if (r != op.me) post_data_receive(op, r);
    }
    return;
  }
  op.seq = received_[{op.group, op.peer, op.tag}]++;
  op.work->set_source(op.global(op.peer));
  if (op.bytes > inline_limit(op)) send_clear_to_send(op, op.peer, "");
  auto it = stash_.find({op.group, op.peer, op.tag});
  if (it != stash_.end() && !it->second.empty()) {
    std::vector<uint8_t> message = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) stash_.erase(it);
    if (take_data(op, op.peer, message)) return;
  }
  post_data_receive(op, op.peer);
}

// The sender's data message: checks it against this receive and takes its bytes (inline) or
// lets the write come. False when it was a leftover of an earlier, failed receive (dropped).
bool PointToPoint::take_data(Op& op, int peer, std::span<const uint8_t> message) {
  const auto h = p2p::parse_data(message);
  // Messages are built only on the error paths: this runs once per received message.
  auto from = [&] { return "rank " + std::to_string(op.global(peer)); };
  if (!h) throw TransportError(op.what() + ": malformed data message from " + from());
  if (h->seq < op.seq) return false;
  if (h->seq != op.seq) {
    throw TransportError(op.what() + ": message #" + std::to_string(h->seq) + " from " + from() +
                         " came for receive #" + std::to_string(op.seq));
  }
  auto sizes = [&] {
    return op.what() + ": " + from() + " sends " + std::to_string(h->bytes) +
           " bytes with this tag, this recv takes " + std::to_string(op.bytes) +
           "; sizes must agree";
  };
  if (h->bytes != op.bytes) {
    // A sender waiting for our clear-to-send learns why it will not come; one whose message
    // came inline (its send has completed), at its next send to us.
    if (h->kind == p2p::DataKind::RequestToSend && !op.cts_sent) {
      send_clear_to_send(op, peer, sizes());
    } else if (h->kind == p2p::DataKind::Inline) {
      send_refusal(op, peer, h->seq, sizes());
    }
    throw InvalidArgument(sizes());
  }
  op.data_done = true;
  if (h->kind == p2p::DataKind::Inline) {
    if (op.cts_sent) throw TransportError(sizes());  // cannot happen with equal sizes
    if (op.bytes) std::memcpy(op.data, message.data() + p2p::kDataHeaderBytes, op.bytes);
    return true;
  }
  if (!op.cts_sent) send_clear_to_send(op, peer, "");  // a receive from any source
  return true;
}

bool PointToPoint::step_recv(Op& op) {
  if (!op.started) {
    // Behind a receive from any source of the group, receives wait: which message it takes
    // decides which the later ones may.
    for (const auto& other : ops_) {
      if (other.get() == &op) break;
      if (other->work && other->kind == Op::Kind::Recv && other->group == op.group &&
          other->peer < 0) {
        return false;
      }
    }
    start_recv(op);
    return true;
  }
  bool moved = false;
  if (op.peer < 0) {
    // Which member's message came first; the others' receives are cancelled, and a message
    // that came meanwhile is kept for the next receive from its sender.
    int first = -1;
    for (size_t r = 0; r < op.any.size(); ++r) {
      if (!op.any[r]) continue;
      if (op.any[r]->failed()) raise_failed(op, static_cast<int>(r), *op.any[r]);
      if (op.any[r]->done() && first < 0) first = static_cast<int>(r);
    }
    if (first < 0) return false;
    for (size_t r = 0; r < op.any.size(); ++r) {
      if (!op.any[r] || static_cast<int>(r) == first) continue;
      t_.cancel(op.any[r]);
      if (op.any[r]->done()) {
        const auto& b = op.any_buffers[r];
        stash_[{op.group, static_cast<int>(r), op.tag}].emplace_back(
            b.begin(), b.begin() + static_cast<std::ptrdiff_t>(op.any[r]->length()));
      }
    }
    op.peer = first;
    op.seq = received_[{op.group, first, op.tag}]++;
    op.work->set_source(op.global(first));
    op.buffer = std::move(op.any_buffers[first]);
    const size_t length = op.any[first]->length();
    op.any.clear();
    op.any_buffers.clear();
    if (!take_data(op, first, {op.buffer.data(), length})) post_data_receive(op, first);
    moved = true;
  } else if (!op.data_done && op.data_msg) {
    if (op.data_msg->failed()) raise_failed(op, op.peer, *op.data_msg);
    if (!op.data_msg->done()) return false;
    if (!take_data(op, op.peer, {op.buffer.data(), op.data_msg->length()})) {
      post_data_receive(op, op.peer);  // a leftover, dropped
    }
    moved = true;
  }
  if (op.cts && op.cts->failed()) raise_failed(op, op.peer, *op.cts);
  if (op.transfer && op.transfer->failed()) raise_failed(op, op.peer, *op.transfer);
  return moved;
}

// The sender of an inline message cannot be told in its send (it has completed; waiting for
// the receiver would turn a send before a receive on both ranks into a deadlock), so the
// receiver's refusal waits on a receive posted once per peer for the group's life.
void PointToPoint::watch_refusals(const Op& op, Refusals& r) {
  if (r.recv) return;
  r.buffer.resize(p2p::kMaxClearToSendBytes);
  r.recv = t_.recv(op.global(op.peer), p2p::refusal_tag(op.group, static_cast<uint32_t>(op.peer)),
                   r.buffer.data(), r.buffer.size());
}

bool PointToPoint::collect_refusal(Refusals& r) {
  const auto c = p2p::parse_clear_to_send({r.buffer.data(), r.recv->length()});
  r.recv.reset();
  if (!c || c->ok) return false;
  r.unreported.emplace_back(c->error);
  return true;
}

void PointToPoint::raise_refused(const Op& op, Refusals& r) {
  while (r.recv && r.recv->done()) {
    const bool well_formed = collect_refusal(r);
    watch_refusals(op, r);
    if (!well_formed) throw TransportError(op.what() + ": malformed refusal from the receiver");
  }
  if (r.unreported.empty()) return;
  const std::string why = std::move(r.unreported.front());
  r.unreported.pop_front();
  throw InvalidArgument(op.what() + ": not started: an earlier send of this rank's to rank " +
                        std::to_string(op.global(op.peer)) +
                        " completed (it went inline) and was then refused there: " + why);
}

void PointToPoint::send_refusal(const Op& op, int peer, uint64_t seq, const std::string& why) {
  p2p::ClearToSend c;
  c.ok = false;
  c.seq = seq;
  c.bytes = op.bytes;
  c.error = why;
  std::vector<uint8_t> message = p2p::encode(c);
  RequestPtr sent =
      t_.send(op.global(peer), p2p::refusal_tag(op.group, static_cast<uint32_t>(op.me)),
              message.data(), message.size());
  if (sent && !sent->done() && !sent->failed())
    refusing_.emplace_back(std::move(sent), std::move(message));
}

}  // namespace rdmacoll::engine
