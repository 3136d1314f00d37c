#include "bootstrap/store_protocol.hpp"

#include <algorithm>
#include <cstring>

#include "bootstrap/auth.hpp"

namespace rdmacoll::bootstrap {

Bytes make_frame(uint8_t op, uint8_t status, const std::string& key, const Bytes& value) {
  FrameHeader h{kStoreMagic,
                op,
                status,
                0,
                static_cast<uint32_t>(key.size()),
                static_cast<uint32_t>(value.size())};
  Bytes out(sizeof h + key.size() + value.size());
  std::memcpy(out.data(), &h, sizeof h);
  if (!key.empty()) std::memcpy(out.data() + sizeof h, key.data(), key.size());
  if (!value.empty()) std::memcpy(out.data() + sizeof h + key.size(), value.data(), value.size());
  return out;
}

Bytes int_bytes(int64_t v) {
  Bytes b(sizeof v);
  std::memcpy(b.data(), &v, sizeof v);
  return b;
}

std::vector<int> StoreState::accept(int fd, uint32_t address) {
  Connection& c = conns_[fd];
  c.fd = fd;
  c.address = address;
  c.accepted = Clock::now();
  c.deadline = c.accepted + limits_.hello_deadline;
  nonce_[fd] = random_bytes(kNonceBytes);
  queue(c, StoreOp::Challenge, creds_.token.empty() ? 0 : 1, nonce_[fd]);
  // Unproven connections past the caps: the oldest go first (the new one is the youngest).
  std::vector<int> evict;
  auto oldest_unproven = [&](bool same_address) {
    const Connection* old = nullptr;
    size_t count = 0;
    for (const auto& [f, other] : conns_) {
      if (other.proven || (same_address && other.address != address)) continue;
      if (std::find(evict.begin(), evict.end(), f) != evict.end()) continue;
      ++count;
      if (!old || other.accepted < old->accepted) old = &other;
    }
    return std::make_pair(old, count);
  };
  for (;;) {
    auto [old, count] = oldest_unproven(true);
    if (!old || count <= limits_.max_unproven_per_address) break;
    evict.push_back(old->fd);
  }
  for (;;) {
    auto [old, count] = oldest_unproven(false);
    if (!old || count <= limits_.max_unproven) break;
    evict.push_back(old->fd);
  }
  return evict;
}

std::vector<std::pair<int, std::string>> StoreState::take_overflowed() {
  std::vector<std::pair<int, std::string>> out;
  out.swap(overflowed_);
  return out;
}

bool StoreState::receive(Connection& c, const uint8_t* data, size_t n, std::string& why) {
  // A frame begins: it must end within the frame deadline (before the Hello, the Hello's
  // own deadline from the accept stays).
  if (c.proven && c.inbuf.empty()) c.deadline = Clock::now() + limits_.frame_deadline;
  if (c.buffered() + n > limits_.max_buffered_per_connection ||
      total_buffered() + n > limits_.max_buffered_total) {
    why = "more than the store buffers for one client";
    return false;
  }
  c.inbuf.insert(c.inbuf.end(), data, data + n);
  return consume(c, why);
}

int StoreState::expire(std::vector<std::pair<int, std::string>>& drop) {
  const auto now = Clock::now();
  std::erase_if(pending_, [&](const PendingGet& p) {
    if (p.deadline > now) return false;
    auto it = conns_.find(p.fd);
    if (it != conns_.end()) {
      --it->second.pending_gets;
      if (!queue(it->second, StoreOp::Get, kMissing, {})) {
        drop.push_back({p.fd, "more than the store buffers for one client"});
      }
    }
    return true;
  });
  Clock::time_point next = Clock::time_point::max();
  for (auto& [fd, c] : conns_) {
    const bool waiting = !c.proven || !c.inbuf.empty();  // a Hello or a frame is due
    if (!waiting) continue;
    if (c.deadline <= now) {
      drop.push_back({fd, c.proven ? "a frame it never finished" : "no answer to the challenge"});
    } else {
      next = std::min(next, c.deadline);
    }
  }
  for (const auto& p : pending_)
    next = std::min(next, p.deadline);
  if (next == Clock::time_point::max()) return -1;
  return static_cast<int>(std::min<int64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1, 1 << 30));
}

void StoreState::drop(int fd) {
  if (auto c = conns_.find(fd); c != conns_.end()) {
    for (const std::string& key : c->second.held) {
      if (auto it = data_.find(key); it != data_.end()) {
        stored_ -= it->first.size() + it->second.size();
        data_.erase(it);
      }
    }
  }
  std::erase_if(pending_, [fd](const PendingGet& p) { return p.fd == fd; });
  std::erase_if(overflowed_, [fd](const auto& o) { return o.first == fd; });
  conns_.erase(fd);
  nonce_.erase(fd);
}

size_t StoreState::total_buffered() const {
  size_t t = 0;
  for (const auto& [fd, c] : conns_)
    t += c.buffered();
  return t;
}

bool StoreState::queue(Connection& c, StoreOp op, uint8_t status, const Bytes& value) {
  const size_t n = sizeof(FrameHeader) + value.size();
  if (c.buffered() + n > limits_.max_buffered_per_connection ||
      total_buffered() + n > limits_.max_buffered_total) {
    return false;
  }
  const Bytes f = make_frame(static_cast<uint8_t>(op), status, {}, value);
  if (c.out_sent == c.outbuf.size()) {
    c.outbuf.clear();
    c.out_sent = 0;
  }
  c.outbuf.insert(c.outbuf.end(), f.begin(), f.end());
  return true;
}

void StoreState::reject(Connection& c, const std::string& why) {
  (void)queue(c, StoreOp::Hello, kRejected, Bytes(why.begin(), why.end()));
  c.closing = true;
  if (refusals_.size() < 16) {
    refusals_.push_back(std::to_string(c.address >> 24) + "." +
                        std::to_string((c.address >> 16) & 255) + "." +
                        std::to_string((c.address >> 8) & 255) + "." +
                        std::to_string(c.address & 255) + ": " + why);
  }
}

std::vector<std::string> StoreState::take_refusals() {
  std::vector<std::string> out;
  out.swap(refusals_);
  return out;
}

bool StoreState::consume(Connection& c, std::string& why) {
  while (!c.closing && c.inbuf.size() >= sizeof(FrameHeader)) {
    FrameHeader h;
    std::memcpy(&h, c.inbuf.data(), sizeof h);
    if (h.magic != kStoreMagic) {
      why = "bad magic";
      return false;
    }
    if (h.op < static_cast<uint8_t>(StoreOp::Set) || h.op > static_cast<uint8_t>(StoreOp::Hold) ||
        h.op == static_cast<uint8_t>(StoreOp::Challenge)) {
      why = "unknown op " + std::to_string(h.op);
      return false;
    }
    const size_t max_value = c.proven ? kMaxValueBytes : limits_.max_hello_frame;
    if (h.key_len > kMaxKeyBytes || h.value_len > max_value) {
      why = "oversized frame (key " + std::to_string(h.key_len) + " B, value " +
            std::to_string(h.value_len) + " B)";
      return false;
    }
    const size_t total = sizeof h + h.key_len + h.value_len;
    if (c.inbuf.size() < total) return true;
    std::string key(reinterpret_cast<const char*>(c.inbuf.data() + sizeof h), h.key_len);
    Bytes value(c.inbuf.begin() + static_cast<ptrdiff_t>(sizeof h + h.key_len),
                c.inbuf.begin() + static_cast<ptrdiff_t>(total));
    c.inbuf.erase(c.inbuf.begin(), c.inbuf.begin() + static_cast<ptrdiff_t>(total));
    c.deadline = Clock::now() + limits_.frame_deadline;  // for the next frame, once begun
    const auto op = static_cast<StoreOp>(h.op);
    if (!c.proven) {
      if (op != StoreOp::Hello) {
        why = "a request before answering the challenge";
        return false;
      }
      hello(c, key, value);
      continue;
    }
    if (op == StoreOp::Hello) {
      why = "a second hello";
      return false;
    }
    if (!handle(c, op, key, std::move(value), why)) return false;
  }
  return true;
}

void StoreState::hello(Connection& c, const std::string& job_id, const Bytes& value) {
  // With a token the Hello's value is our proof on the server's nonce, then the client's nonce
  // for the server's proof; without, it is empty. Refusals never say the job's id: a stranger
  // must not learn it.
  if (job_id != creds_.job_id) {
    return reject(c, "this rendezvous store belongs to another job than this process's ('" +
                         job_id.substr(0, 256) +
                         "'): two jobs on one MASTER_ADDR:MASTER_PORT? (RDMACOLL_JOB_ID, or the "
                         "launcher's job id)");
  }
  if (creds_.token.empty() != value.empty()) {
    return reject(c, creds_.token.empty()
                         ? "this rendezvous store was started without RDMACOLL_AUTH_TOKEN, "
                           "and this process has one; every rank needs the same token"
                         : "this rendezvous store requires RDMACOLL_AUTH_TOKEN, and this "
                           "process has none");
  }
  Bytes answer;
  if (!creds_.token.empty()) {
    const Bytes expected = store_proof(creds_.token, nonce_[c.fd], job_id);
    const Bytes proof(value.begin(), value.begin() + static_cast<ptrdiff_t>(
                                                         std::min(value.size(), expected.size())));
    const Bytes client_nonce(value.begin() + static_cast<ptrdiff_t>(proof.size()), value.end());
    if (!same_proof(proof, expected) || client_nonce.size() != kNonceBytes) {
      return reject(c,
                    "authentication failed: this process's RDMACOLL_AUTH_TOKEN differs from "
                    "rank 0's");
    }
    answer = server_proof(creds_.token, client_nonce, job_id);
  }
  c.proven = true;
  (void)queue(c, StoreOp::Hello, kOk, answer);
}

bool StoreState::handle(Connection& c, StoreOp op, const std::string& key, Bytes value,
                        std::string& why) {
  // A reply that would pass a cap ends the connection (its client pipelines more than it reads).
  auto reply = [&](uint8_t status, const Bytes& v) {
    if (queue(c, op, status, v)) return true;
    why = "more than the store buffers for one client";
    return false;
  };
  switch (op) {
    case StoreOp::Set:
    case StoreOp::Hold: {
      const bool held = std::find(c.held.begin(), c.held.end(), key) != c.held.end();
      if (op == StoreOp::Hold && !held && c.held.size() >= limits_.max_held_per_connection) {
        why = "more than " + std::to_string(limits_.max_held_per_connection) + " held keys";
        return false;
      }
      if (!store(key, std::move(value), why)) return false;
      if (op == StoreOp::Hold && !held) c.held.push_back(key);
      if (!reply(kOk, {})) return false;
      wake_waiters(key);
      return true;
    }
    case StoreOp::Get: {
      auto it = data_.find(key);
      if (it != data_.end()) return reply(kOk, it->second);
      if (c.pending_gets >= limits_.max_pending_gets_per_connection) {
        why = "more than " + std::to_string(limits_.max_pending_gets_per_connection) +
              " waiting gets";
        return false;
      }
      int64_t timeout_ms = 0;
      if (value.size() == sizeof timeout_ms)
        std::memcpy(&timeout_ms, value.data(), sizeof timeout_ms);
      timeout_ms = std::clamp<int64_t>(timeout_ms, 0, int64_t{1} << 40);
      ++c.pending_gets;
      pending_.push_back({c.fd, key, Clock::now() + std::chrono::milliseconds(timeout_ms)});
      return true;
    }
    case StoreOp::Add: {
      int64_t delta = 0;
      if (value.size() == sizeof delta) std::memcpy(&delta, value.data(), sizeof delta);
      int64_t current = 0;
      auto it = data_.find(key);
      if (it != data_.end() && it->second.size() == sizeof current) {
        std::memcpy(&current, it->second.data(), sizeof current);
      }
      current = static_cast<int64_t>(static_cast<uint64_t>(current) + static_cast<uint64_t>(delta));
      if (!store(key, int_bytes(current), why)) return false;
      if (!reply(kOk, int_bytes(current))) return false;
      wake_waiters(key);
      return true;
    }
    case StoreOp::Check:
      return reply(data_.count(key) ? kOk : kMissing, {});
    case StoreOp::Delete: {
      auto it = data_.find(key);
      if (it != data_.end()) {
        stored_ -= it->first.size() + it->second.size();
        data_.erase(it);
      }
      return reply(kOk, {});
    }
    case StoreOp::Ping:
      return reply(kOk, value);
    case StoreOp::GetPresent: {
      std::vector<std::string> keys;
      if (!decode_keys(value, keys)) {
        why = "a malformed list of keys";
        return false;
      }
      std::vector<const Bytes*> found;
      found.reserve(keys.size());
      size_t bytes = 0;
      for (const std::string& k : keys) {
        auto it = data_.find(k);
        found.push_back(it == data_.end() ? nullptr : &it->second);
        bytes += 5 + (it == data_.end() ? 0 : it->second.size());
      }
      if (bytes > kMaxValueBytes) {
        why = "a multi-key reply past " + std::to_string(kMaxValueBytes) + " bytes";
        return false;
      }
      return reply(kOk, encode_present(found));
    }
    default:
      why = "unexpected op";
      return false;
  }
}

bool StoreState::store(const std::string& key, Bytes value, std::string& why) {
  auto it = data_.find(key);
  const size_t old = it == data_.end() ? 0 : key.size() + it->second.size();
  if (stored_ - old + key.size() + value.size() > limits_.max_stored_bytes) {
    why = "more than the store keeps (" + std::to_string(limits_.max_stored_bytes) + " bytes)";
    return false;
  }
  stored_ = stored_ - old + key.size() + value.size();
  data_[key] = std::move(value);
  return true;
}

void StoreState::wake_waiters(const std::string& key) {
  const Bytes& v = data_[key];
  std::erase_if(pending_, [&](const PendingGet& p) {
    if (p.key != key) return false;
    auto it = conns_.find(p.fd);
    if (it != conns_.end()) {
      --it->second.pending_gets;
      if (!queue(it->second, StoreOp::Get, kOk, v)) {
        overflowed_.push_back({p.fd, "more than the store buffers for one client"});
      }
    }
    return true;
  });
}

}  // namespace rdmacoll::bootstrap
