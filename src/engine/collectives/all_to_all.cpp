// all_to_all (equal or uneven splits). Every descriptor carries its sender's splits, so every
// rank checks every pair (what i sends j is what j expects from i) and raises the same error
// before anything is written. Then each pair moves by what the two descriptors say:
//  - a sender whose whole input fits the eager limit put it inline: the receiver copies its
//    piece out of the descriptor (one round, no registration);
//  - else, into a receiver whose output is beyond the eager limit (it exposed it): a one-sided
//    write at the piece's final offset;
//  - else (a small output): the piece as a control message.
// Both sides read the same two descriptors, so they agree on every pair without agreeing on
// an eager limit.

#include <cstring>

#include "engine/agreement.hpp"
#include "engine/call.hpp"
#include "engine/collectives/collectives.hpp"
#include "engine/control_plane.hpp"
#include "engine/engine.hpp"

namespace rdmacoll::engine {

namespace {

uint64_t split_at(const CallDescriptor& d, int i) {
  uint64_t v;
  std::memcpy(&v, d.splits.data() + static_cast<size_t>(i) * sizeof v, sizeof v);
  return v;
}
// The sender's split for member j (elements), and what it expects from member j.
uint64_t sends_to(const CallDescriptor& d, int j) {
  return split_at(d, j);
}
uint64_t expects_from(const CallDescriptor& d, int p, int j) {
  return split_at(d, p + j);
}

// Every pair's sizes, checked alike on every rank.
void check_splits(const Call& call, const std::vector<CallDescriptor>& all, int p) {
  for (int i = 0; i < p; ++i) {
    if (all[i].splits.size() != 2 * static_cast<size_t>(p) * sizeof(uint64_t)) {
      reject(call, "rank " + std::to_string(call.global(i)) + " sent " +
                       std::to_string(all[i].splits.size()) + " bytes of splits, expected " +
                       std::to_string(2 * p * sizeof(uint64_t)));
    }
  }
  for (int i = 0; i < p; ++i) {
    for (int j = 0; j < p; ++j) {
      const uint64_t sent = sends_to(all[i], j);
      const uint64_t expected = expects_from(all[j], p, i);
      if (sent != expected) {
        reject(call, "ranks disagree on the all_to_all's splits: rank " +
                         std::to_string(call.global(i)) + " sends " + std::to_string(sent) +
                         " elements to rank " + std::to_string(call.global(j)) +
                         ", which expects " + std::to_string(expected) +
                         "; input_split_sizes[j] on rank i must equal output_split_sizes[i] on "
                         "rank j");
      }
    }
  }
}

}  // namespace

void Engine::all_to_all(GroupState& g, void* out_ptr, const void* in_ptr, DType dtype,
                        const std::vector<int64_t>& out_splits,
                        const std::vector<int64_t>& in_splits, const std::string& error_in) {
  check_usable(g, "all_to_all");
  transport::Transport& t = transport_;
  const int p = g.size();
  const size_t es = element_size(dtype);
  auto* out = static_cast<uint8_t*>(out_ptr);
  const auto* in = static_cast<const uint8_t*>(in_ptr);
  const size_t limit = eager_limit(p, g.hosts, t.max_message_bytes());
  std::string local_error = error_in;
  // Splits ride in every descriptor (16 bytes per member), within the room the eager limit
  // leaves a descriptor; every rank computes the same, so all raise alike.
  if (local_error.empty() && 2 * sizeof(uint64_t) * p > limit) {
    local_error = "all_to_all on " + std::to_string(p) + " ranks (" + std::to_string(g.hosts) +
                  " hosts): the splits do not fit a call descriptor (" + std::to_string(limit) +
                  " bytes); use groups of at most " + std::to_string(limit / 16) + " ranks";
  }
  const bool usable = local_error.empty();
  auto& in_off = g.scratch.in_offsets;
  auto& out_off = g.scratch.out_offsets;
  in_off.assign(p + 1, 0);
  out_off.assign(p + 1, 0);
  if (usable) {
    for (int j = 0; j < p; ++j) {
      in_off[j + 1] = in_off[j] + static_cast<size_t>(in_splits[j]) * es;
      out_off[j + 1] = out_off[j] + static_cast<size_t>(out_splits[j]) * es;
    }
  }
  const size_t in_bytes = in_off[p];
  const size_t out_bytes = out_off[p];
  const int me = g.rank;
  if (usable && out_off[me + 1] > out_off[me]) {
    std::memcpy(out + out_off[me], in + in_off[me], out_off[me + 1] - out_off[me]);
  }
  Call call(t, g, "all_to_all", spin_);
  std::shared_ptr<transport::MemoryRegion> region;  // our output, once registered
  call.run(
      [&] {
        if (p == 1) {
          if (!usable) throw InvalidArgument(call.where() + ": " + local_error);
          return;
        }
        AllGatherArgs args;
        args.op = CollectiveOp::AllToAll;
        args.in_dtype = args.out_dtype = dtype;
        args.in_numel = static_cast<int64_t>(in_bytes / es);
        args.out_numel = static_cast<int64_t>(out_bytes / es);
        args.local_error = local_error;
        CallDescriptor mine = make_descriptor(g, call, args);
        auto& splits = g.scratch.splits;
        transport::Bytes key;
        if (usable) {
          splits.resize(2 * static_cast<size_t>(p));
          for (int j = 0; j < p; ++j) {
            splits[j] = static_cast<uint64_t>(in_splits[j]);
            splits[p + j] = static_cast<uint64_t>(out_splits[j]);
          }
          mine.splits = {reinterpret_cast<const uint8_t*>(splits.data()),
                         splits.size() * sizeof(uint64_t)};
          if (in_bytes > 0 && in_bytes + mine.splits.size() <= limit)
            mine.inline_data = {in, in_bytes};
          if (out_bytes > limit) {
            region = t.register_memory(out, out_bytes);
            mine.out_addr = reinterpret_cast<uint64_t>(out);
            mine.out_bytes = out_bytes;
            key = region->packed_key();
            mine.key = key;
          }
        }
        const std::vector<CallDescriptor>& all = exchange_descriptors(t, g, call, mine);
        if (!usable) throw InvalidArgument(call.where() + ": " + local_error);
        check_descriptors(call, all);
        check_splits(call, all, p);
        for (int r = 0; r < p; ++r) {
          if (!all[r].inline_data.empty() && all[r].inline_data.size() != all[r].in_numel * es) {
            throw TransportError(call.where() + ": rank " + std::to_string(call.global(r)) +
                                 " sent " + std::to_string(all[r].inline_data.size()) +
                                 " inline bytes, expected " + std::to_string(all[r].in_numel * es));
          }
        }
        // Arrivals first: pieces copied out of descriptors, expected writes, posted receives.
        for (int i = 1; i < p; ++i) {
          const int r = (me + p - i) % p;
          const size_t bytes = out_off[r + 1] - out_off[r];
          if (bytes == 0) continue;
          if (!all[r].inline_data.empty()) {
            size_t from = 0;  // where our piece starts in r's input
            for (int j = 0; j < me; ++j)
              from += sends_to(all[r], j) * es;
            std::memcpy(out + out_off[r], all[r].inline_data.data() + from, bytes);
          } else if (region) {
            const uint64_t tag = transport::write_signal(call.token(), static_cast<uint32_t>(r));
            call.recvs().push_back({call.guarded([&] {
                                      return t.expect(call.global(r), *region, out_off[r], bytes,
                                                      tag);
                                    }),
                                    r, Pending::Kind::Arrival, r, 1});
          } else {
            const uint64_t tag =
                make_tag(TagKind::Piece, g.id, call.seq(), static_cast<uint32_t>(r));
            call.recvs().push_back(
                {call.guarded([&] { return t.recv(call.global(r), tag, out + out_off[r], bytes); }),
                 r, Pending::Kind::Arrival, r, 1});
          }
        }
        const size_t arrivals = call.recvs().size();
        // Then our pieces that did not travel inline.
        std::shared_ptr<transport::MemoryRegion> source;
        std::vector<std::unique_ptr<transport::RemoteRegion>> remotes(p);
        if (mine.inline_data.empty()) {
          for (int i = 1; i < p; ++i) {
            const int j = (me + i) % p;
            const size_t bytes = in_off[j + 1] - in_off[j];
            if (bytes == 0) continue;
            const CallDescriptor& dst = all[j];
            if (dst.out_bytes > 0) {
              size_t offset = 0;  // where our piece lands in j's output
              for (int r = 0; r < me; ++r)
                offset += expects_from(dst, p, r) * es;
              if (offset + bytes > dst.out_bytes) {  // never write outside what j advertised
                throw TransportError(call.where() + ": refusing to write bytes [" +
                                     std::to_string(offset) + ", " +
                                     std::to_string(offset + bytes) + ") into rank " +
                                     std::to_string(call.global(j)) + "'s output of " +
                                     std::to_string(dst.out_bytes) + " bytes");
              }
              if (!source) {
                source = t.needs_registered_source()
                             ? t.register_memory(const_cast<uint8_t*>(in), in_bytes)
                             : std::make_shared<SourceView>(const_cast<uint8_t*>(in), in_bytes);
              }
              remotes[j] = call.guarded([&] {
                return t.unpack_remote(call.global(j), dst.out_addr, dst.out_bytes, dst.key);
              });
              const uint64_t tag =
                  transport::write_signal(dst.signal_token, static_cast<uint32_t>(me));
              call.sends().push_back({call.guarded([&] {
                                        return t.write(*source, in_off[j], *remotes[j], offset,
                                                       bytes, tag);
                                      }),
                                      j, Pending::Kind::Write, me, 1});
            } else {
              const uint64_t tag =
                  make_tag(TagKind::Piece, g.id, call.seq(), static_cast<uint32_t>(me));
              call.sends().push_back(
                  {call.guarded([&] { return t.send(call.global(j), tag, in + in_off[j], bytes); }),
                   j, Pending::Kind::Write, me, 1});
            }
          }
        }
        call.wait(call.recvs(), 0, arrivals);
        // Without an exposed output every arrival was a message: its length is the sender's.
        for (size_t k = 0; k < arrivals && !region; ++k) {
          const Pending& a = call.recvs()[k];
          const size_t bytes = out_off[a.peer + 1] - out_off[a.peer];
          if (a.req->length() != bytes) {
            throw TransportError(call.where() + ": rank " + std::to_string(call.global(a.peer)) +
                                 " sent a piece of " + std::to_string(a.req->length()) +
                                 " bytes, expected " + std::to_string(bytes));
          }
        }
        call.wait(call.sends(), 0, call.sends().size());
      },
      &region);
}

}  // namespace rdmacoll::engine
