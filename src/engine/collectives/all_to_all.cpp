// all_to_all (equal or uneven splits). Every pair's sizes are checked before anything moves,
// and a disagreement raises on every rank:
//  - while the splits fit in a descriptor, they ride there (all_to_all_sizes.cpp) and every rank
//    checks every pair, so all raise the same error before anything is written;
//  - beyond that (uneven splits on more than 128 ranks across hosts, 256 on one host), each pair
//    swaps its sizes in rounds of small messages of their own (exchange_pairs), which end with
//    every rank knowing of any disagreement: again all raise it before anything is written.
// Equal pieces of up to 2 KiB across hosts from 8 ranks take Bruck's rounds
// (all_to_all_bruck.cpp) when every descriptor offered them. Otherwise each pair moves by what
// the two descriptors say:
//  - a sender whose whole input fits the eager limit put it inline: the receiver copies its
//    piece out of the descriptor (one round, no registration);
//  - else, into a receiver whose output is beyond the eager limit (it exposed it): a one-sided
//    write at the piece's final offset;
//  - else (a small output): the piece as a control message.
// Both sides read the same two descriptors, so they agree on every pair without agreeing on
// an eager limit.

#include "engine/collectives/all_to_all.hpp"

#include <cstring>

#include "engine/call.hpp"
#include "engine/collectives/all_to_all_parts.hpp"
#include "engine/collectives/collectives.hpp"
#include "engine/control/agreement.hpp"
#include "engine/control/control_plane.hpp"
#include "engine/engine.hpp"
#include "engine/message_steps.hpp"
#include "engine/write_steps.hpp"

namespace rdmacoll::engine {

using all_to_all_parts::bruck_rounds;
using all_to_all_parts::check_splits;
using all_to_all_parts::exchange_pairs;
using all_to_all_parts::kWord;
using all_to_all_parts::offers_bruck;
using all_to_all_parts::pair_from;
using all_to_all_parts::Splits;
using all_to_all_parts::splits_travel;
using all_to_all_parts::Travel;

void all_to_all(Engine& e, GroupState& g, const AllToAllArgs& args) {
  void* const out_ptr = args.out;
  const void* const in_ptr = args.in;
  const DType dtype = args.dtype;
  const std::span<const int64_t> out_splits = args.out_splits;
  const std::span<const int64_t> in_splits = args.in_splits;
  const std::string& local_error = args.local_error;
  check_usable(g, "all_to_all");
  transport::Transport& t = e.transport();
  const int p = g.size();
  const size_t es = element_size(dtype);
  auto* out = static_cast<uint8_t*>(out_ptr);
  const auto* in = static_cast<const uint8_t*>(in_ptr);
  const size_t limit = g.eager_limit(t.max_message_bytes());
  const bool usable = local_error.empty();
  auto& in_off = g.scratch.get<all_to_all_parts::AllToAllScratch>().in_offsets;
  auto& out_off = g.scratch.get<all_to_all_parts::AllToAllScratch>().out_offsets;
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
  Call call(t, g, "all_to_all", e.spin());
  std::shared_ptr<transport::MemoryRegion> region;  // our output, once registered
  call.run(
      [&] {
        if (p == 1) {
          if (!usable) throw InvalidArgument(call.where() + ": " + local_error);
          if (out_bytes > 0) std::memcpy(out, in, out_bytes);
          return;
        }
        RoundArgs args;
        args.collective = &collectives::kAllToAll;
        args.in_dtype = args.out_dtype = dtype;
        args.in_numel = static_cast<int64_t>(in_bytes / es);
        args.out_numel = static_cast<int64_t>(out_bytes / es);
        args.local_error = local_error;
        CallDescriptor mine = make_descriptor(call, args);
        auto& splits = g.scratch.get<all_to_all_parts::AllToAllScratch>().splits;
        splits.clear();
        transport::Bytes key;
        // Equal pieces that Bruck's rounds would carry travel neither inline nor written.
        const bool bruck_offer =
            usable && splits_travel(in_splits, out_splits, limit) == Travel::Uniform &&
            in_splits[0] == out_splits[0] &&
            offers_bruck(p, static_cast<size_t>(in_splits[0]) * es, in_bytes + 2 * kWord <= limit,
                         g.hosts, t.max_message_bytes(), g.tuning.all_to_all);
        if (usable) {
          switch (splits_travel(in_splits, out_splits, limit)) {
            case Travel::Uniform:
              splits = {static_cast<uint64_t>(in_splits[0]), static_cast<uint64_t>(out_splits[0])};
              break;
            case Travel::Full:
              splits.resize(2 * static_cast<size_t>(p));
              for (int j = 0; j < p; ++j) {
                splits[j] = static_cast<uint64_t>(in_splits[j]);
                splits[p + j] = static_cast<uint64_t>(out_splits[j]);
              }
              break;
            case Travel::Pairs:
              break;
          }
          mine.splits = {reinterpret_cast<const uint8_t*>(splits.data()), splits.size() * kWord};
          if (in_bytes > 0 && in_bytes + mine.splits.size() <= limit && !bruck_offer)
            mine.inline_data = {in, in_bytes};
          if (out_bytes > limit && !bruck_offer) {
            region = expose_target(call, mine, out, out_bytes, key);
          }
        }
        const std::vector<CallDescriptor>& all = exchange_descriptors(call, mine);
        if (!usable) throw InvalidArgument(call.where() + ": " + local_error);
        check_descriptors(call, all);
        for (int r = 0; r < p; ++r) {
          if (!all[r].inline_data.empty() && all[r].inline_data.size() != all[r].in_numel * es) {
            throw TransportError(call.where() + ": rank " + std::to_string(call.global(r)) +
                                 " sent " + std::to_string(all[r].inline_data.size()) +
                                 " inline bytes, expected " + std::to_string(all[r].in_numel * es));
          }
        }
        // Every rank sees the same descriptors, so all run the pair round or none does.
        bool pairs = false;
        for (int r = 0; r < p; ++r)
          pairs = pairs || all[r].splits.empty();
        if (!pairs) {
          check_splits(call, all, p);
        } else if (const std::string why = exchange_pairs(call, in_splits, out_splits);
                   !why.empty()) {
          reject(call, why);
        }
        // Bruck's rounds when every member offered them: every descriptor says equal pieces
        // (all the same size, once checked), nothing inline and nothing exposed.
        bool bruck = !pairs;
        for (int r = 0; r < p && bruck; ++r) {
          bruck =
              Splits{all[r], p}.uniform() && all[r].inline_data.empty() && all[r].out_bytes == 0;
        }
        if (bruck && out_bytes > 0 &&
            out_bytes / static_cast<size_t>(p) * static_cast<size_t>(p / 2) <=
                t.max_message_bytes()) {
          bruck_rounds(call, out, in, out_bytes / static_cast<size_t>(p));
          return;
        }
        // Elements ahead of our piece in member r's input, and in its output.
        auto sent_before_me = [&](int r) {
          return pairs ? pair_from(g, r).sent_before : Splits{all[r], p}.sent_before(me);
        };
        auto expected_before_me = [&](int r) {
          return pairs ? pair_from(g, r).expected_before : Splits{all[r], p}.expected_before(me);
        };
        if (out_off[me + 1] > out_off[me]) {
          std::memcpy(out + out_off[me], in + in_off[me], out_off[me + 1] - out_off[me]);
        }
        // Writes into exposed outputs run on the data phase's executor (engine/write_steps.hpp)
        // as one step; pieces for members that exposed nothing travel as messages beside it.
        DataPhase& data = g.scratch.get<DataPhase>();
        WritePlan& plan = data.plan;
        plan.clear("output");
        WriteSteps steps(call, t, plan, data.remotes);
        MessageSteps messages(call, TagKind::Piece, MessageSteps::Carries::Data);
        // Arrivals first: pieces copied out of descriptors, expected writes, posted receives.
        for (int i = 1; i < p; ++i) {
          const int r = (me + p - i) % p;
          const size_t bytes = out_off[r + 1] - out_off[r];
          if (bytes == 0) continue;
          const std::span<const uint8_t> inline_in = all[r].inline_data;
          if (!inline_in.empty()) {
            const size_t from = sent_before_me(r) * es;
            if (from > inline_in.size() || bytes > inline_in.size() - from) {
              throw TransportError(call.where() + ": rank " + std::to_string(call.global(r)) +
                                   "'s inline input of " + std::to_string(inline_in.size()) +
                                   " bytes has no bytes [" + std::to_string(from) + ", " +
                                   std::to_string(from + bytes) + ") for this rank");
            }
            std::memcpy(out + out_off[r], inline_in.data() + from, bytes);
          } else if (region) {
            plan.arrive({r, out_off[r], bytes, static_cast<uint32_t>(r), r, 1});
          } else {
            messages.expect(r, static_cast<uint32_t>(r), out + out_off[r], bytes);
          }
        }
        if (region) steps.expect_all(*region);
        // Then our pieces that did not travel inline.
        std::shared_ptr<transport::MemoryRegion> source;
        if (mine.inline_data.empty()) {
          for (int i = 1; i < p; ++i) {
            const int j = (me + i) % p;
            const size_t bytes = in_off[j + 1] - in_off[j];
            if (bytes == 0) continue;
            const CallDescriptor& dst = all[j];
            if (dst.out_bytes > 0) {
              if (!source) {
                source = t.needs_registered_source()
                             ? t.register_memory(const_cast<uint8_t*>(in), in_bytes)
                             : std::make_shared<SourceView>(const_cast<uint8_t*>(in), in_bytes);
              }
              plan.write({j, 0, in_off[j], expected_before_me(j) * es, bytes,
                          static_cast<uint32_t>(me), me, 1});
            } else {
              messages.send(j, static_cast<uint32_t>(me), in + in_off[j], bytes);
            }
          }
        }
        plan.end_step();
        const transport::MemoryRegion* sources[] = {source.get()};
        steps.run(all, sources);
        // A piece that came as a message is as long as its sender's split says.
        for (size_t k = 0; k < messages.arrivals(); ++k) {
          const int r = messages.arrival(k).peer;
          messages.wait_exactly(k, out_off[r + 1] - out_off[r], "the all_to_all's pieces");
        }
        messages.wait_all();
      },
      &region);
}

}  // namespace rdmacoll::engine
