// all_to_all (equal or uneven splits). Every pair's sizes are checked before anything moves,
// and a disagreement raises on every rank:
//  - while the splits fit in a descriptor, they ride there (splits_travel below) and every rank
//    checks every pair, so all raise the same error before anything is written;
//  - beyond that (uneven splits on more than 128 ranks across hosts, 256 on one host), each pair
//    swaps its sizes in rounds of small messages of their own (exchange_pairs), which end with
//    every rank knowing of any disagreement: again all raise it before anything is written.
// Then each pair moves by what the two descriptors say:
//  - a sender whose whole input fits the eager limit put it inline: the receiver copies its
//    piece out of the descriptor (one round, no registration);
//  - else, into a receiver whose output is beyond the eager limit (it exposed it): a one-sided
//    write at the piece's final offset;
//  - else (a small output): the piece as a control message.
// Both sides read the same two descriptors, so they agree on every pair without agreeing on
// an eager limit.

#include <cstring>

#include "common/settings.hpp"
#include "engine/agreement.hpp"
#include "engine/call.hpp"
#include "engine/collectives/collectives.hpp"
#include "engine/control_plane.hpp"
#include "engine/engine.hpp"
#include "schedule/bruck_all_to_all.hpp"

namespace rdmacoll::engine {

namespace {

constexpr size_t kWord = sizeof(uint64_t);

// How a rank's splits travel in its descriptor; the length of its splits says which (p >= 2):
//  - 2 words: every piece is the same size each way (input piece, output piece), at any p;
//  - 2p words: its p input splits, then its p output splits, while 16p bytes fit the eager
//    room (the room every rank computes alike);
//  - none: the splits do not fit; every member then runs exchange_pairs.
enum class Travel { Uniform, Full, Pairs };

bool all_equal(const std::vector<int64_t>& v) {
  for (int64_t x : v)
    if (x != v.front()) return false;
  return true;
}

Travel splits_travel(const std::vector<int64_t>& in_splits, const std::vector<int64_t>& out_splits,
                     size_t limit) {
  if (all_equal(in_splits) && all_equal(out_splits)) return Travel::Uniform;
  return 2 * kWord * in_splits.size() <= limit ? Travel::Full : Travel::Pairs;
}

// One member's splits as its descriptor carries them (Uniform or Full).
struct Splits {
  const CallDescriptor& d;
  int p;

  bool uniform() const { return d.splits.size() == 2 * kWord; }
  uint64_t word(size_t i) const {
    uint64_t v;
    std::memcpy(&v, d.splits.data() + i * kWord, kWord);
    return v;
  }
  // Elements the member sends member j, and expects from member j.
  uint64_t sends_to(int j) const { return uniform() ? word(0) : word(j); }
  uint64_t expects_from(int j) const { return uniform() ? word(1) : word(p + j); }
  // Elements ahead of member k's piece in the member's input, and in its output.
  uint64_t sent_before(int k) const {
    if (uniform()) return static_cast<uint64_t>(k) * word(0);
    uint64_t n = 0;
    for (int j = 0; j < k; ++j)
      n += word(j);
    return n;
  }
  uint64_t expected_before(int k) const {
    if (uniform()) return static_cast<uint64_t>(k) * word(1);
    uint64_t n = 0;
    for (int j = 0; j < k; ++j)
      n += word(p + j);
    return n;
  }
};

std::string disagreement(const Call& call, int i, uint64_t sent, int j, uint64_t expected) {
  return "ranks disagree on the all_to_all's splits: rank " + std::to_string(call.global(i)) +
         " sends " + std::to_string(sent) + " elements to rank " + std::to_string(call.global(j)) +
         ", which expects " + std::to_string(expected) +
         "; input_split_sizes[j] on rank i must equal output_split_sizes[i] on rank j";
}

// Every member's splits travelled: every pair's sizes, checked alike on every rank.
void check_splits(const Call& call, const std::vector<CallDescriptor>& all, int p) {
  bool every_uniform = true;
  for (int i = 0; i < p; ++i) {
    const size_t got = all[i].splits.size();
    if (got != 2 * kWord && got != 2 * kWord * p) {
      reject(call, "rank " + std::to_string(call.global(i)) + " sent " + std::to_string(got) +
                       " bytes of splits, expected " + std::to_string(2 * kWord) + " or " +
                       std::to_string(2 * kWord * p));
    }
    every_uniform = every_uniform && Splits{all[i], p}.uniform();
  }
  if (every_uniform) {  // every pair agrees iff every member's two sizes match member 0's
    const Splits first{all[0], p};
    for (int i = 0; i < p; ++i) {
      const Splits s{all[i], p};
      if (s.sends_to(0) != first.expects_from(i))
        reject(call, disagreement(call, i, s.sends_to(0), 0, first.expects_from(i)));
      if (first.sends_to(i) != s.expects_from(0))
        reject(call, disagreement(call, 0, first.sends_to(i), i, s.expects_from(0)));
    }
    return;
  }
  for (int i = 0; i < p; ++i) {
    const Splits s{all[i], p};
    for (int j = 0; j < p; ++j) {
      const uint64_t expected = Splits{all[j], p}.expects_from(i);
      if (s.sends_to(j) != expected)
        reject(call, disagreement(call, i, s.sends_to(j), j, expected));
    }
  }
}

// What one member tells another in exchange_pairs' first message, in elements: what it sends
// the other, what it expects from it, and where those two pieces start in its input and its
// output.
struct PairSizes {
  uint64_t sends;
  uint64_t expects;
  uint64_t sent_before;
  uint64_t expected_before;
};
// Its second message: the first disagreement it found (rank `from` sends `sent` elements to
// rank `to`, which expects `expected`), or from = kAgreed.
struct Finding {
  uint64_t from;
  uint64_t sent;
  uint64_t to;
  uint64_t expected;
};
constexpr uint64_t kAgreed = ~uint64_t{0};
constexpr size_t kPairWords = 4;
static_assert(sizeof(PairSizes) == kPairWords * kWord && sizeof(Finding) == kPairWords * kWord);

// The pair rounds, where the splits did not travel in the descriptors. First every pair swaps
// its sizes (one message each way, tag index p + sender: apart from the pieces', the sender);
// then every member tells every other member what it found (tag index 2p + sender), so all
// raise the same disagreement before anything moves, as when the descriptors carry the
// splits. Two rounds of p - 1 messages of 32 bytes, in place of 16p^2 bytes in descriptors.
// Returns the disagreement ("" if none), the same on every rank; the sizes stay in the group's
// scratch for pair_from().
std::string exchange_pairs(transport::Transport& t, GroupState& g, Call& call,
                           const std::vector<int64_t>& in_splits,
                           const std::vector<int64_t>& out_splits) {
  const int p = g.size();
  const int me = g.rank;
  // Our sizes to each member at [j], each member's to us at [p + r], each member's finding at
  // [2p + r]: one buffer kept per group.
  auto& words = g.scratch.pair_words;
  words.assign(3 * kPairWords * p, 0);
  auto at = [&](int k) { return words.data() + kPairWords * static_cast<size_t>(k); };
  auto read = [&]<typename T>(int k, T& v) { std::memcpy(&v, at(k), sizeof v); };
  // Posts every receive of a round (slots [base + r]), sends what slot(j) holds, waits.
  auto round = [&](int base, auto slot) {
    for (int i = 1; i < p; ++i) {
      const int r = (me + p - i) % p;
      const uint64_t tag =
          make_tag(TagKind::Piece, g.id, call.seq(), static_cast<uint32_t>(base + r));
      call.recvs().push_back({call.guarded([&] {
                                return t.recv(call.global(r), tag, at(base + r),
                                              kPairWords * kWord);
                              }),
                              r, Pending::Kind::Descriptor});
    }
    for (int i = 1; i < p; ++i) {
      const int j = (me + i) % p;
      const uint64_t tag =
          make_tag(TagKind::Piece, g.id, call.seq(), static_cast<uint32_t>(base + me));
      call.sends().push_back(
          {call.guarded([&] { return t.send(call.global(j), tag, slot(j), kPairWords * kWord); }),
           j, Pending::Kind::Descriptor});
    }
    call.wait(call.recvs(), 0, call.recvs().size());
    call.wait(call.sends(), 0, call.sends().size());
    for (const Pending& a : call.recvs()) {
      if (a.req->length() != kPairWords * kWord) {
        throw TransportError(call.where() + ": rank " + std::to_string(call.global(a.peer)) +
                             " sent " + std::to_string(a.req->length()) +
                             " bytes in the all_to_all's pair round, expected " +
                             std::to_string(kPairWords * kWord));
      }
    }
    call.recvs().clear();
    call.sends().clear();
  };
  uint64_t sent = 0, expected = 0;
  for (int j = 0; j < p; ++j) {
    const PairSizes s{static_cast<uint64_t>(in_splits[j]), static_cast<uint64_t>(out_splits[j]),
                      sent, expected};
    std::memcpy(at(j), &s, sizeof s);
    sent += s.sends;
    expected += s.expects;
  }
  round(p, [&](int j) { return at(j); });
  Finding mine{kAgreed, 0, 0, 0};
  for (int r = 0; r < p && mine.from == kAgreed; ++r) {
    if (r == me) continue;
    PairSizes ours, theirs;
    read(r, ours);
    read(p + r, theirs);
    // Both ranks of a pair report the same direction first: the lower rank's sends.
    const Finding to_me{uint64_t(r), theirs.sends, uint64_t(me), ours.expects};
    const Finding from_me{uint64_t(me), ours.sends, uint64_t(r), theirs.expects};
    const bool bad_to_me = to_me.sent != to_me.expected;
    const bool bad_from_me = from_me.sent != from_me.expected;
    if (bad_to_me && (r < me || !bad_from_me))
      mine = to_me;
    else if (bad_from_me)
      mine = from_me;
  }
  std::memcpy(at(2 * p + me), &mine, sizeof mine);
  round(2 * p, [&](int) { return at(2 * p + me); });
  for (int r = 0; r < p; ++r) {
    Finding f;
    read(2 * p + r, f);
    if (f.from == kAgreed) continue;
    if (f.from >= static_cast<uint64_t>(p) || f.to >= static_cast<uint64_t>(p)) {
      throw TransportError(call.where() + ": rank " + std::to_string(call.global(r)) +
                           " reported a disagreement between ranks outside the group");
    }
    return disagreement(call, static_cast<int>(f.from), f.sent, static_cast<int>(f.to), f.expected);
  }
  return "";
}

// The first pair round's message from member r.
PairSizes pair_from(const GroupState& g, int r) {
  PairSizes s;
  std::memcpy(&s, g.scratch.pair_words.data() + kPairWords * static_cast<size_t>(g.size() + r),
              sizeof s);
  return s;
}

// RDMACOLL_ALLTOALL, read once: the all-to-all of equal pieces by `auto` (the selector),
// `direct` or `bruck`.
schedule::Algorithm forced_all_to_all(bool& forced) {
  static const std::string choice = settings::choice("RDMACOLL_ALLTOALL");
  forced = choice != "auto";
  return choice == "bruck" ? schedule::Algorithm::Bruck : schedule::Algorithm::Direct;
}

// Whether this rank offers Bruck's rounds for equal pieces of `piece` bytes: they carry up to
// p/2 pieces per control message. An input that fits inline goes with the descriptors instead:
// their log p rounds alone, where Bruck's add log p more.
bool offers_bruck(int p, size_t piece, bool fits_inline, int hosts, size_t max_message) {
  if (piece == 0 || piece * static_cast<size_t>(p / 2) > max_message) return false;
  bool forced = false;
  const schedule::Algorithm a = forced_all_to_all(forced);
  if (forced) return a == schedule::Algorithm::Bruck;
  return !fits_inline && schedule::choose_all_to_all(p, piece, hosts) == schedule::Algorithm::Bruck;
}

// Bruck's rounds (schedule/bruck_all_to_all.hpp): log p steps of one control message each way,
// the slots staged in the group's scratch. Receives are posted up front: each step's sender is
// a different member, so the pieces' tags (index: the sender) stay apart.
void bruck_rounds(transport::Transport& t, GroupState& g, Call& call, uint8_t* out,
                  const uint8_t* in, size_t piece) {
  const int p = g.size();
  const int me = g.rank;
  const std::vector<schedule::SlotStep> steps = schedule::bruck_all_to_all(p, me);
  const size_t most = static_cast<size_t>(p / 2) * piece;  // a step's message at most
  auto& buf = g.scratch.bruck;
  buf.resize(static_cast<size_t>(p) * piece + (steps.size() + 1) * most);
  uint8_t* staging = buf.data();
  uint8_t* packed = staging + static_cast<size_t>(p) * piece;  // the message being sent
  uint8_t* arrived = packed + most;                            // step k's at k * most
  // Slot i starts with our piece for member me + i: the input rotated by me pieces.
  const size_t head = static_cast<size_t>(me) * piece;
  std::memcpy(staging, in + head, static_cast<size_t>(p) * piece - head);
  std::memcpy(staging + static_cast<size_t>(p) * piece - head, in, head);
  const size_t recvs_before = call.recvs().size();
  for (size_t k = 0; k < steps.size(); ++k) {
    const int from = steps[k].from;
    const uint64_t tag = make_tag(TagKind::Piece, g.id, call.seq(), static_cast<uint32_t>(from));
    call.recvs().push_back(
        {call.guarded([&] { return t.recv(call.global(from), tag, arrived + k * most, most); }),
         from, Pending::Kind::Arrival, from, 1});
  }
  for (size_t k = 0; k < steps.size(); ++k) {
    const schedule::SlotStep& step = steps[k];
    size_t bytes = 0;
    for (const schedule::Transfer& run : step.slots) {
      const size_t n = static_cast<size_t>(run.count) * piece;
      std::memcpy(packed + bytes, staging + static_cast<size_t>(run.first) * piece, n);
      bytes += n;
    }
    const uint64_t tag = make_tag(TagKind::Piece, g.id, call.seq(), static_cast<uint32_t>(me));
    // The transport keeps its own copy of a control message: `packed` is free again at once.
    call.sends().push_back(
        {call.guarded([&] { return t.send(call.global(step.to), tag, packed, bytes); }), step.to,
         Pending::Kind::Write, me, 1});
    const size_t at = recvs_before + k;
    call.wait(call.recvs(), at, at + 1);
    if (call.recvs()[at].req->length() != bytes) {
      throw TransportError(call.where() + ": rank " + std::to_string(call.global(step.from)) +
                           " sent " + std::to_string(call.recvs()[at].req->length()) +
                           " bytes in all_to_all step " + std::to_string(k) + ", expected " +
                           std::to_string(bytes));
    }
    const uint8_t* src = arrived + k * most;
    for (const schedule::Transfer& run : step.slots) {
      const size_t n = static_cast<size_t>(run.count) * piece;
      std::memcpy(staging + static_cast<size_t>(run.first) * piece, src, n);
      src += n;
    }
  }
  for (int r = 0; r < p; ++r) {
    std::memcpy(out + static_cast<size_t>(r) * piece,
                staging + static_cast<size_t>(schedule::final_slot(p, me, r)) * piece, piece);
  }
  call.wait(call.sends(), 0, call.sends().size());
}

}  // namespace

void Engine::all_to_all(GroupState& g, void* out_ptr, const void* in_ptr, DType dtype,
                        const std::vector<int64_t>& out_splits,
                        const std::vector<int64_t>& in_splits, const std::string& local_error) {
  check_usable(g, "all_to_all");
  transport::Transport& t = transport_;
  const int p = g.size();
  const size_t es = element_size(dtype);
  auto* out = static_cast<uint8_t*>(out_ptr);
  const auto* in = static_cast<const uint8_t*>(in_ptr);
  const size_t limit = eager_limit(p, g.hosts, t.max_message_bytes());
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
  Call call(t, g, "all_to_all", spin_);
  std::shared_ptr<transport::MemoryRegion> region;  // our output, once registered
  call.run(
      [&] {
        if (p == 1) {
          if (!usable) throw InvalidArgument(call.where() + ": " + local_error);
          if (out_bytes > 0) std::memcpy(out, in, out_bytes);
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
        splits.clear();
        transport::Bytes key;
        // Equal pieces that Bruck's rounds would carry travel neither inline nor written.
        const bool bruck_offer =
            usable && splits_travel(in_splits, out_splits, limit) == Travel::Uniform &&
            in_splits[0] == out_splits[0] &&
            offers_bruck(p, static_cast<size_t>(in_splits[0]) * es, in_bytes + 2 * kWord <= limit,
                         g.hosts, t.max_message_bytes());
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
        } else if (const std::string why = exchange_pairs(t, g, call, in_splits, out_splits);
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
          bruck_rounds(t, g, call, out, in, out_bytes / static_cast<size_t>(p));
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
              const size_t offset = expected_before_me(j) * es;  // where our piece lands
              if (offset > dst.out_bytes || bytes > dst.out_bytes - offset) {
                // never write outside what j advertised
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
