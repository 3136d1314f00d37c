#include "bootstrap/rendezvous.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "bootstrap/auth.hpp"
#include "bootstrap/prefixed_store.hpp"
#include "bootstrap/socket_util.hpp"
#include "bootstrap/store_gather.hpp"
#include "common/log.hpp"
#include "common/ranks.hpp"
#include "common/settings.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::bootstrap {

namespace {

// A rank that finds the job misconfigured (world sizes, settings, a malformed address) posts
// why under this key, so that ranks waiting in the rendezvous raise at once, not at the timeout.
constexpr const char* kAbortKey = "rdmacoll/abort";
// How long each wait on the store lasts before it looks at the abort key again.
constexpr std::chrono::milliseconds kSlice(250);
constexpr size_t kMaxJobIdBytes = 256;

std::vector<std::string> lines_of(const Bytes& b) {
  std::vector<std::string> out;
  std::string cur;
  for (uint8_t c : b) {
    if (c == '\n') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += static_cast<char>(c);
    }
  }
  return out;
}

std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

// Rank 0 found the port taken. If another job of ours holds it there (no ids told the jobs
// apart), this job's other ranks may be joining that job's rendezvous: tell it, so that every
// rank of both jobs fails saying why instead of two jobs mixing. Best effort, within a second.
void tell_the_port_holder(const InitTarget& target, const StoreCredentials& credentials) {
  try {
    StoreClient other(target.master_addr, target.master_port,
                      Clock::now() + std::chrono::seconds(1), credentials);
    other.set_op_timeout(std::chrono::seconds(1));
    if (!other.check(kAbortKey)) {
      other.set(kAbortKey, "another job's rank 0 (pid " + std::to_string(::getpid()) + " on " +
                               host_name() + ") found MASTER_ADDR:MASTER_PORT " +
                               target.master_addr + ":" + std::to_string(target.master_port) +
                               " taken by this job's store: two jobs on one port, so neither "
                               "can tell its ranks apart; give each job its own MASTER_PORT or "
                               "RDMACOLL_JOB_ID");
    }
  } catch (const Error&) {
    // Not an rdmacoll store of a job like ours (refused, or silent): nothing to tell.
  }
}

}  // namespace

StoreCredentials store_credentials() {
  StoreCredentials c;
  c.token = settings::read(settings::kAuthToken).value_or("");
  // Ours, else the launcher's.
  for (const std::string_view name :
       {settings::kJobId.name, std::string_view("TORCHELASTIC_RUN_ID"),
        std::string_view("SLURM_JOB_ID"), std::string_view("OMPI_MCA_ess_base_jobid")}) {
    const char* v = std::getenv(std::string(name).c_str());
    c.job_id = v ? v : "";
    if (c.job_id.size() > kMaxJobIdBytes) {
      throw InvalidArgument(std::string(name) + " is " + std::to_string(c.job_id.size()) +
                            " bytes long; a job id may have at most " +
                            std::to_string(kMaxJobIdBytes));
    }
    if (!c.job_id.empty()) break;
  }
  return c;
}

Rendezvous::Rendezvous(const RendezvousOptions& o)
    : rank_(o.rank), world_size_(o.world_size), timeout_(o.timeout), where_(o.where) {
  const auto deadline = Clock::now() + timeout_;
  if (o.pmix) {
    pmix_ = o.pmix;
    return;  // PMIx numbered the ranks: no claims, no sizes to compare
  }
  if (o.store) {
    // The k-th world over this store takes the k-th block of world_size tickets: the same k
    // on every rank, since no rank starts world k+1 before every rank has joined k.
    const int64_t ticket = o.store->add("rdmacoll/inits", 1);
    store_ = std::make_shared<PrefixedStore>(
        "rdmacoll/" + std::to_string((ticket - 1) / world_size_) + "/", o.store);
  } else {
    const StoreCredentials credentials = store_credentials();
    if (rank_ == 0) {
      // Bound where the job says rank 0 is reached (MASTER_ADDR), not on every interface.
      const auto bind = settings::read(settings::kStoreBind);
      const std::string address = bind ? *bind : o.target.master_addr;
      try {
        server_ = std::make_unique<StoreServer>(address, o.target.master_port, credentials);
      } catch (const PortInUse&) {
        tell_the_port_holder(o.target, credentials);
        throw;
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(std::string(e.what()) + " (the address is " +
                              (bind ? "RDMACOLL_STORE_BIND's" : "MASTER_ADDR's") + ")");
      }
      if (credentials.token.empty()) {
        log::info("rank 0: the rendezvous store on " + address + ":" +
                  std::to_string(o.target.master_port) +
                  " is open to anyone who can connect (no RDMACOLL_AUTH_TOKEN)");
      }
    }
    auto client = std::make_shared<StoreClient>(o.target.master_addr, o.target.master_port,
                                                deadline, credentials);
    client->set_op_timeout(timeout_);
    store_ = std::move(client);
    own_store_ = true;
  }
  claim_rank();
  // A stale store from an earlier job on the same port would mix up ranks: check world size.
  const std::string size_key = "rdmacoll/world_size";
  if (rank_ == 0) store_->set(size_key, std::to_string(world_size_));
  const std::string their_size = store_->get_string(size_key, timeout_);
  if (their_size != std::to_string(world_size_)) {
    abort(where_ + ": rank " + std::to_string(rank_) + " has world size " +
          std::to_string(world_size_) + " but rank 0 has " + settings::shown(their_size));
  }
}

Rendezvous::~Rendezvous() = default;

std::string Rendezvous::describe() const {
  if (pmix_) return "PMIx namespace " + pmix_->nspace();
  return store_->describe();
}

namespace {

// What rank 0 tells every rank through PMIx about its store: "token\nport\naddr,addr,...".
struct StoreRecord {
  std::string token;
  uint16_t port = 0;
  std::vector<std::string> addresses;
};

Bytes encode_record(const StoreRecord& r) {
  std::string text = r.token + "\n" + std::to_string(r.port) + "\n";
  for (size_t i = 0; i < r.addresses.size(); ++i)
    text += (i ? "," : "") + r.addresses[i];
  return Bytes(text.begin(), text.end());
}

bool decode_record(const Bytes& b, StoreRecord& r) {
  const std::string text(b.begin(), b.end());
  const auto a = text.find('\n');
  const auto c = a == std::string::npos ? a : text.find('\n', a + 1);
  if (c == std::string::npos) return false;
  r.token = text.substr(0, a);
  const long port = std::atol(text.substr(a + 1, c - a - 1).c_str());
  if (port < 1 || port > 65535) return false;
  r.port = static_cast<uint16_t>(port);
  for (size_t at = c + 1; at < text.size();) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    if (end > at) r.addresses.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return !r.addresses.empty();
}

}  // namespace

// Rank 0 hosts the store on a port the kernel picks, under a secret it draws, for this
// launcher namespace alone; a PMIx fence tells every rank where and how to prove itself.
// Where: loopback when the whole job shares one host, else RDMACOLL_STORE_BIND or every
// address of rank 0's host, tried in turn (the secret turns away anything else listening).
void Rendezvous::open_store() {
  if (store_ || !pmix_) return;
  StoreCredentials credentials;
  credentials.job_id = "pmix:" + pmix_->nspace();
  StoreRecord record;
  if (rank_ == 0) {
    record.token = random_hex(32);
    credentials.token = record.token;
    const auto bind = settings::read(settings::kStoreBind);
    const bool one_host = pmix_->local_size() == world_size_;
    const std::string address = bind ? *bind : one_host ? "127.0.0.1" : "0.0.0.0";
    server_ = std::make_unique<StoreServer>(address, 0, credentials);
    record.port = server_->port();
    record.addresses = address == "0.0.0.0" ? host_ipv4_addresses() : std::vector{address};
    if (record.addresses.empty()) record.addresses.push_back("127.0.0.1");
  }
  std::vector<Bytes> all;
  try {
    all = pmix_->all_gather("store", rank_ == 0 ? encode_record(record) : Bytes{}, timeout_);
  } catch (const Error& e) {
    rethrow_with_context(e);
  }
  if (rank_ != 0 && !decode_record(all[0], record)) {
    throw InvalidArgument(where_ + ": rank 0's store record in PMIx namespace " + pmix_->nspace() +
                          " is malformed");
  }
  credentials.token = record.token;
  const auto deadline = Clock::now() + timeout_;
  std::string tried;
  for (const std::string& address : record.addresses) {
    try {
      // Rank 0's store is up before the fence: an address that does not answer soon never will.
      const auto until = std::min(deadline, Clock::now() + std::chrono::seconds(5));
      auto client = std::make_shared<StoreClient>(address, record.port, until, credentials);
      client->set_op_timeout(timeout_);
      store_ = std::move(client);
      own_store_ = true;
      return;
    } catch (const Error& e) {
      tried += "; " + address + ":" + std::to_string(record.port) + ": " + e.what();
    }
  }
  throw PeerFailure(where_ + ": rank " + std::to_string(rank_) +
                    " cannot reach rank 0's store at any address of its host" + tried +
                    " (set RDMACOLL_STORE_BIND to the address the ranks reach rank 0's host at)");
}

// A PMIx failure said with where it happened.
void Rendezvous::rethrow_with_context(const Error& e) const {
  const std::string what = where_ + ": " + e.what();
  if (dynamic_cast<const Timeout*>(&e)) throw Timeout(what);
  if (dynamic_cast<const PeerFailure*>(&e)) throw PeerFailure(what);
  if (dynamic_cast<const InvalidArgument*>(&e)) throw InvalidArgument(what);
  throw Error(what);
}

// Every rank number is claimed once: a second claimant (a second job on the same port, a
// launcher that gave two processes one RANK) fails, naming both, and since no rank can tell
// which processes belong together then, every rank still in the rendezvous fails too.
void Rendezvous::claim_rank() {
  const std::string me = "pid " + std::to_string(::getpid()) + " on host " + host_name();
  const std::string key = "rdmacoll/claim/" + std::to_string(rank_);
  if (store_->add(key, 1) == 1) {
    store_->set(key + "/by", me);
    // Our own store deletes it when this process's connection closes (arrive()'s store_lost).
    if (auto* client = dynamic_cast<StoreClient*>(store_.get()); client && own_store_)
      client->hold(alive_key(rank_), Bytes{1});
    return;
  }
  std::string first = "another process";
  try {
    first = store_->get_string(key + "/by", std::chrono::seconds(5));
  } catch (const Error&) {
  }
  abort(where_ + ": rank " + std::to_string(rank_) + " is claimed twice: first by " + first +
        ", now by " + me + " at the " + store_->describe() +
        "; two jobs on one MASTER_ADDR:MASTER_PORT, or two processes with one RANK? "
        "(RDMACOLL_JOB_ID tells jobs apart)");
}

std::string Rendezvous::alive_key(int rank) {
  return "rdmacoll/alive/" + std::to_string(rank);
}

std::string Rendezvous::arrived_key(int rank) {
  return "rdmacoll/arrived/" + std::to_string(rank);
}

std::chrono::milliseconds Rendezvous::grace() const {
  return std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(10));
}

std::chrono::milliseconds Rendezvous::grace_left() const {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(grace_end_ - Clock::now()));
}

// Counts this rank among those that know of the abort; the last one tells rank 0.
void Rendezvous::acknowledge_abort() {
  try {
    if (store_->add("rdmacoll/abort_seen", 1) >= world_size_) {
      store_->set("rdmacoll/abort_all_seen", std::string("1"));
    }
  } catch (const Error&) {
  }
}

void Rendezvous::abort(const std::string& why) {
  // Under PMIx every rank saw the same exchange and finds the same fault: each raises on its own.
  if (!store_) throw InvalidArgument(why);
  try {
    if (!store_->check(kAbortKey)) {
      store_->set(kAbortKey, "rank " + std::to_string(rank_) + ": " + why);
    }
    acknowledge_abort();
    // Rank 0's store goes with it: keep it up until every rank has read why.
    if (server_) store_->get("rdmacoll/abort_all_seen", grace());
  } catch (const Error&) {
  }
  throw InvalidArgument(why);
}

// The exchange follows StoreGather's plan (blocks of about sqrt(p) values, each posted by its
// leader), so rank 0's store serves about p sqrt(p) requests, not p^2.
std::vector<Bytes> Rendezvous::all_gather(const std::string& prefix, const Bytes& mine) {
  if (pmix_) {
    try {
      return pmix_->all_gather(prefix, mine, timeout_);
    } catch (const Error& e) {
      rethrow_with_context(e);
    }
  }
  const StoreGather plan(world_size_);
  const std::string store_addr = store_->describe();
  const auto value_key = [&](int r) { return prefix + std::to_string(r); };
  const auto block_key = [&](int b) { return prefix + "block/" + std::to_string(b); };
  std::vector<Bytes> all(world_size_);
  all[rank_] = mine;
  std::vector<bool> have(world_size_, false);  // whose values this rank has
  have[rank_] = true;
  const auto deadline = Clock::now() + timeout_;
  const auto ranks_of = [&](int b) {
    return "ranks " + std::to_string(plan.first_of(b)) + "-" + std::to_string(plan.end_of(b) - 1);
  };
  std::string doing;  // the current step, for messages
  try {
    for (const StoreGather::Step& s : plan.steps(rank_)) {
      using Kind = StoreGather::Step::Kind;
      switch (s.kind) {
        case Kind::PostValue:
          doing = "posting its value";
          store_->set(value_key(rank_), mine);
          break;
        case Kind::PostBlock:
          doing = "posting the values of " + ranks_of(s.index);
          store_->set(block_key(s.index),
                      encode_block(all, plan.first_of(s.index), plan.end_of(s.index)));
          break;
        case Kind::ReadValue:
          doing = "waiting for rank " + std::to_string(s.index);
          all[s.index] = wait_for(value_key(s.index), deadline);
          have[s.index] = true;
          break;
        case Kind::ReadBlock: {
          doing = "waiting for the values of " + ranks_of(s.index);
          const Bytes block = wait_for(block_key(s.index), deadline);
          if (!decode_block(block, all, plan.first_of(s.index), plan.end_of(s.index))) {
            throw InvalidArgument(where_ + ": the " + store_addr + " holds a malformed block " +
                                  block_key(s.index) + " (" + std::to_string(block.size()) +
                                  " bytes); something other than this job's ranks wrote it");
          }
          for (int r = plan.first_of(s.index); r < plan.end_of(s.index); ++r)
            have[r] = true;
          break;
        }
      }
    }
  } catch (const Timeout&) {
    // Of the ranks, ask the store which never posted; if all did, a leader never passed its
    // block on. If rank 0 has given up too and taken the store down, every rank whose value
    // this rank has not got is a suspect.
    std::vector<int> missing;
    std::string what = " did not join the rendezvous";
    try {
      for (int m = 0; m < world_size_; ++m) {
        if (!store_->check(value_key(m))) missing.push_back(m);
      }
      if (missing.empty()) {
        for (int b = 0; b < plan.blocks(); ++b) {
          if (!store_->check(block_key(b))) missing.push_back(plan.first_of(b));
        }
        what = " joined but did not pass on their blocks of the rendezvous";
      }
    } catch (const Error&) {
      // The store is gone: rank 0 gave up first. This rank can only say whose values it
      // lacks, which may be live ranks whose blocks never reached it.
      missing.clear();
      what =
          " were not heard from before the store went away (rank 0 gave up first; its error "
          "names the ranks that did not join)";
      for (int m = 0; m < world_size_; ++m)
        if (!have[m]) missing.push_back(m);
    }
    std::string refused;
    if (server_) {
      for (const auto& line : server_->refusals())
        refused += "; the store refused " + line;
    }
    throw Timeout(where_ + ": ranks " + join_ranks(missing) + what + " at the " + store_addr +
                  " within " + std::to_string(timeout_.count()) + " ms" + refused);
  } catch (const PeerFailure& e) {
    throw PeerFailure(where_ + ": " +
                      (own_store_ ? "rank 0, the rendezvous host, at the " : "the ") + store_addr +
                      " went away while this rank was " + doing + ": " + e.what());
  }
  return all;
}

// Reads `key`, waiting until `deadline`: raises InvalidArgument at once when a rank posts an
// abort, Timeout at the deadline.
Bytes Rendezvous::wait_for(const std::string& key, Clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    try {
      return store_->get(key, std::clamp(left, std::chrono::milliseconds(1), kSlice));
    } catch (const Timeout&) {
      if (store_->check(kAbortKey)) {
        const std::string why = store_->get_string(kAbortKey, kSlice);
        acknowledge_abort();
        throw InvalidArgument(where_ + ": the job gave up: " + why);
      }
      if (Clock::now() >= deadline) throw;
    }
  }
}

void Rendezvous::compare(const std::string& lines) {
  const auto all = all_gather("rdmacoll/settings/", Bytes(lines.begin(), lines.end()));
  const std::vector<std::string> ref = lines_of(all[0]);
  for (size_t i = 0; i < ref.size(); ++i) {
    const std::string name = ref[i].substr(0, ref[i].find('='));
    std::string values;
    bool differ = false;
    for (int r = 0; r < world_size_; ++r) {
      const std::vector<std::string> theirs = lines_of(all[r]);
      const std::string line = i < theirs.size() ? theirs[i] : name + "=?";
      differ |= line != ref[i];
      values += (r ? ", rank " : "rank ") + std::to_string(r) + " '" +
                settings::shown(line.substr(line.find('=') + 1)) + "'";
    }
    if (differ) {
      abort(where_ + ": ranks disagree on " + name + " (" + values +
            "); every rank must use the same value");
    }
  }
}

}  // namespace rdmacoll::bootstrap
