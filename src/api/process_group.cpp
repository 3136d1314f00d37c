// torch.distributed-shaped API: the default process group, subgroups, and the argument checks
// of each collective. Everything below (bootstrap, engine, transports) is reached from here.

#include "rdmacoll/process_group.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

#include "api/debug.hpp"
#include "bootstrap/address_envelope.hpp"
#include "bootstrap/init_method.hpp"
#include "bootstrap/prefixed_store.hpp"
#include "bootstrap/store.hpp"
#include "common/log.hpp"
#include "common/settings.hpp"
#include "engine/engine.hpp"
#include "engine/group_state.hpp"
#include "engine/leaving.hpp"
#include "engine/reduce.hpp"
#include "rdmacoll/errors.hpp"
#include "topology/topology.hpp"
#include "transports/transport.hpp"

namespace rdmacoll {

namespace {

constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(30);
// Group ids (14 bits, in every tag): new_group() numbers its groups 1..8191, in the order every
// rank calls it; member groups take 8192..16383 from a counter in the world's store. Both wrap
// around: an id is reused only once its earlier group is gone (destroyed, or its last handle
// dropped), so a job may make any number of groups, 8191 of each kind alive at once.
constexpr long kFirstMemberGroupId = 8192;
constexpr long kGroupIds = 8192;

struct Context {
  int rank = -1;
  int world_size = 0;
  std::chrono::milliseconds timeout{kDefaultTimeout};
  std::unique_ptr<bootstrap::StoreServer> server;   // rank 0 only
  std::shared_ptr<Store> store;                     // ours (a StoreClient) or the caller's
  bool own_store = false;                           // a StoreClient of rank 0's StoreServer
  std::shared_ptr<transport::Transport> transport;  // groups hold it weakly, to free their slots
  std::unique_ptr<engine::Engine> engine;
  std::shared_ptr<GroupState> world;
  std::vector<std::weak_ptr<GroupState>> groups;  // new_group()'s, drained at destroy
  uint64_t new_groups_made = 0;  // new_group() calls so far: the same on every rank
  std::vector<topology::LocalPlacement> placements;  // every rank's, index = global rank
  uint64_t generation = 0;  // which init_process_group() of this process made it
};

uint64_t next_generation() {
  static uint64_t n = 0;
  return ++n;
}

std::unique_ptr<Context>& context() {
  static std::unique_ptr<Context> ctx;
  return ctx;
}

Context& require_context(const char* what) {
  auto& ctx = context();
  if (!ctx) {
    throw InvalidArgument(std::string(what) +
                          ": the default process group is not initialized; call "
                          "init_process_group() first");
  }
  return *ctx;
}

// At least 1 ms; at most 30 days, so deadlines never overflow (the registry's bounds).
std::chrono::milliseconds timeout_from_env() {
  return settings::duration("RDMACOLL_TIMEOUT_S", kDefaultTimeout);
}

transport::TransportKind transport_from_env() {
  const std::string s = settings::choice("RDMACOLL_TRANSPORT");
  return s == "ucx"     ? transport::TransportKind::Ucx
         : s == "verbs" ? transport::TransportKind::Verbs
                        : transport::TransportKind::Auto;
}

std::string join(const std::vector<int>& v) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < v.size(); ++i)
    os << (i ? ", " : "") << v[i];
  os << ']';
  return os.str();
}

std::string shape_string(const std::vector<int64_t>& sizes) {
  std::ostringstream os;
  os << '(';
  for (size_t i = 0; i < sizes.size(); ++i)
    os << (i ? ", " : "") << sizes[i];
  if (sizes.size() == 1) os << ',';
  os << ')';
  return os.str();
}

GroupState& resolve(const Group& group, const char* what) {
  if (group.is_default()) return *require_context(what).world;
  GroupState& g = *group.state();
  if (g.own_world) {  // a standalone group: its world is its own
    if (g.destroyed) {
      throw InvalidArgument(std::string(what) + ": " + g.describe() +
                            " was destroyed by destroy_group()");
    }
    return g;
  }
  Context& ctx = require_context(what);
  // Its transport (and the memory its eager slots live in) went with that process group.
  if (g.generation != ctx.generation) {
    throw InvalidArgument(std::string(what) + ": " + g.describe() +
                          " belongs to a process group that was destroyed; call new_group() "
                          "again after init_process_group()");
  }
  if (g.destroyed) {
    throw InvalidArgument(std::string(what) + ": " + g.describe() +
                          " was destroyed by destroy_group()");
  }
  return g;
}

// A rank that finds the job misconfigured (world sizes, settings, a malformed address) posts
// why under this key, so that ranks waiting in the rendezvous raise at once, not at the timeout.
constexpr const char* kAbortKey = "rdmacoll/abort";

// After a failure every rank should see, how long rank 0 keeps its store up for the others
// to read why (they look every 250 ms while they wait in the rendezvous).
std::chrono::milliseconds abort_grace(const Context& ctx) {
  return std::min<std::chrono::milliseconds>(ctx.timeout, std::chrono::seconds(10));
}

// Counts this rank among those that know of the abort; the last one tells rank 0.
void acknowledge_abort(Context& ctx) {
  try {
    if (ctx.store->add("rdmacoll/abort_seen", 1) >= ctx.world_size) {
      ctx.store->set("rdmacoll/abort_all_seen", std::string("1"));
    }
  } catch (const Error&) {
  }
}

[[noreturn]] void abort_rendezvous(Context& ctx, const std::string& why) {
  try {
    if (!ctx.store->check(kAbortKey)) {
      ctx.store->set(kAbortKey, "rank " + std::to_string(ctx.rank) + ": " + why);
    }
    acknowledge_abort(ctx);
    // Rank 0's store goes with it: keep it up until every rank has read why.
    if (ctx.server) ctx.store->get("rdmacoll/abort_all_seen", abort_grace(ctx));
  } catch (const Error&) {
  }
  throw InvalidArgument(why);
}

// Waits (through the store) until every rank has published `prefix`<rank>; on timeout names
// the ranks that never arrived. Waits in slices, raising as soon as a rank posts an abort.
std::vector<transport::Bytes> gather_from_all(Context& ctx, const std::string& prefix) {
  constexpr std::chrono::milliseconds kSlice(250);
  const std::string store_addr = ctx.store->describe();
  const std::string where = "init_process_group (rank " + std::to_string(ctx.rank) + " of " +
                            std::to_string(ctx.world_size) + ")";
  std::vector<transport::Bytes> addrs(ctx.world_size);
  const auto deadline = transport::Clock::now() + ctx.timeout;
  for (int r = 0; r < ctx.world_size; ++r) {
    for (bool got = false; !got;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - transport::Clock::now());
      // Any store call here may find rank 0's store gone (it gave up, or died).
      try {
        try {
          addrs[r] = ctx.store->get(prefix + std::to_string(r),
                                    std::clamp(left, std::chrono::milliseconds(1), kSlice));
          got = true;
        } catch (const Timeout&) {
          if (ctx.store->check(kAbortKey)) {
            const std::string why = ctx.store->get_string(kAbortKey, kSlice);
            acknowledge_abort(ctx);
            throw InvalidArgument(where + ": the job gave up: " + why);
          }
          if (transport::Clock::now() < deadline) continue;
          // Ranks before r have arrived; of the rest, ask the store which are still missing.
          // If rank 0 has given up too and taken the store down, all of them are suspects.
          std::vector<int> missing;
          try {
            for (int m = r; m < ctx.world_size; ++m) {
              if (!ctx.store->check(prefix + std::to_string(m))) missing.push_back(m);
            }
          } catch (const Error&) {
            missing.clear();
            for (int m = r; m < ctx.world_size; ++m)
              missing.push_back(m);
          }
          std::string refused;
          if (ctx.server) {
            for (const auto& r : ctx.server->refusals())
              refused += "; the store refused " + r;
          }
          throw Timeout(where + ": ranks " + join(missing) +
                        " did not join the rendezvous at the " + store_addr + " within " +
                        std::to_string(ctx.timeout.count()) + " ms" + refused);
        }
      } catch (const PeerFailure& e) {
        throw PeerFailure(where + ": " +
                          (ctx.own_store ? "rank 0, the rendezvous host, at the " : "the ") +
                          store_addr + " went away while rank " + std::to_string(r) +
                          " had not joined yet: " + e.what());
      }
    }
  }
  return addrs;
}

// The settings every rank must share, as "NAME=value" lines (unset: empty): the world size and
// the registry's job-wide settings (common/settings.cpp).
std::string shared_settings(const Context& ctx) {
  return "WORLD_SIZE=" + std::to_string(ctx.world_size) + "\n" + settings::job_wide();
}

// Every rank compares every rank's settings, so all raise the same error at once, naming the
// variable and each rank's value.
void check_shared_settings(Context& ctx) {
  ctx.store->set("rdmacoll/settings/" + std::to_string(ctx.rank), shared_settings(ctx));
  const auto all = gather_from_all(ctx, "rdmacoll/settings/");
  auto lines = [](const transport::Bytes& b) {
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
  };
  const std::vector<std::string> ref = lines(all[0]);
  for (size_t i = 0; i < ref.size(); ++i) {
    const std::string name = ref[i].substr(0, ref[i].find('='));
    std::string values;
    bool differ = false;
    for (int r = 0; r < ctx.world_size; ++r) {
      const std::vector<std::string> mine = lines(all[r]);
      const std::string line = i < mine.size() ? mine[i] : name + "=?";
      differ |= line != ref[i];
      values += (r ? ", rank " : "rank ") + std::to_string(r) + " '" +
                settings::shown(line.substr(line.find('=') + 1)) + "'";
    }
    if (differ) {
      abort_rendezvous(ctx, "init_process_group: ranks disagree on " + name + " (" + values +
                                "); every rank must use the same value");
    }
  }
}

transport::Bytes unwrap_address(Context& ctx, int rank, const std::string& transport,
                                const transport::Bytes& in) {
  std::string why;
  std::optional<transport::Bytes> out = bootstrap::unwrap_address(in, rank, transport, why);
  if (!out) {
    abort_rendezvous(ctx, "init_process_group (rank " + std::to_string(ctx.rank) + "): " + why +
                              " (at the " + ctx.store->describe() + ")");
  }
  return std::move(*out);
}

constexpr size_t kMaxJobIdBytes = 256;

// The job's secret and id: RDMACOLL_AUTH_TOKEN; RDMACOLL_JOB_ID, else the launcher's own
// (torchrun's run id, Slurm's job id, Open MPI's job id), else none.
bootstrap::StoreCredentials store_credentials() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  bootstrap::StoreCredentials c;
  c.token = settings::text("RDMACOLL_AUTH_TOKEN").value_or("");
  for (const char* name :
       {"RDMACOLL_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "OMPI_MCA_ess_base_jobid"}) {
    c.job_id = env(name);
    if (c.job_id.size() > kMaxJobIdBytes) {
      throw InvalidArgument(std::string(name) + " is " + std::to_string(c.job_id.size()) +
                            " bytes long; a job id may have at most " +
                            std::to_string(kMaxJobIdBytes));
    }
    if (!c.job_id.empty()) break;
  }
  return c;
}

// Rank 0 found the port taken. If another job of ours holds it there (no ids told the jobs
// apart), this job's other ranks may be joining that job's rendezvous: tell it, so that every
// rank of both jobs fails saying why instead of two jobs mixing. Best effort, within a second.
void tell_the_port_holder(const bootstrap::Rendezvous& rv,
                          const bootstrap::StoreCredentials& credentials) {
  try {
    bootstrap::StoreClient other(rv.master_addr, rv.master_port,
                                 transport::Clock::now() + std::chrono::seconds(1), credentials);
    other.set_op_timeout(std::chrono::seconds(1));
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    if (!other.check(kAbortKey)) {
      other.set(kAbortKey, "another job's rank 0 (pid " + std::to_string(::getpid()) + " on " +
                               host + ") found MASTER_ADDR:MASTER_PORT " + rv.master_addr + ":" +
                               std::to_string(rv.master_port) +
                               " taken by this job's store: two jobs on one port, so neither "
                               "can tell its ranks apart; give each job its own MASTER_PORT or "
                               "RDMACOLL_JOB_ID");
    }
  } catch (const Error&) {
    // Not an rdmacoll store of a job like ours (refused, or silent): nothing to tell.
  }
}

// Every rank number is claimed once: a second claimant (a second job on the same port, a
// launcher that gave two processes one RANK) raises, naming both.
void claim_rank(Context& ctx) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string me = "pid " + std::to_string(::getpid()) + " on host " + host;
  const std::string key = "rdmacoll/claim/" + std::to_string(ctx.rank);
  if (ctx.store->add(key, 1) == 1) {
    ctx.store->set(key + "/by", me);
    return;
  }
  std::string first = "another process";
  try {
    first = ctx.store->get_string(key + "/by", std::chrono::seconds(5));
  } catch (const Error&) {
  }
  // Two jobs without ids met on one port (or a launcher gave two processes one RANK): no rank
  // can tell which processes belong together, so every rank still in the rendezvous fails too.
  abort_rendezvous(ctx, "init_process_group: rank " + std::to_string(ctx.rank) +
                            " is claimed twice: first by " + first + ", now by " + me + " at the " +
                            ctx.store->describe() +
                            "; two jobs on one MASTER_ADDR:MASTER_PORT, or two processes with "
                            "one RANK? (RDMACOLL_JOB_ID tells jobs apart)");
}

// RDMACOLL_TRANSPORT=auto takes verbs only when every rank has an ACTIVE RDMA port, so that
// all ranks agree; =verbs without a usable device is an error, never a silent fallback.
transport::TransportKind agree_on_transport(Context& ctx) {
  const transport::TransportKind wanted = transport_from_env();
  if (wanted != transport::TransportKind::Auto) return wanted;  // checked before the rendezvous
  const std::optional<std::string> why_not = transport::verbs_unusable_reason();
  ctx.store->set("rdmacoll/verbs/" + std::to_string(ctx.rank), why_not ? "0" + *why_not : "1");
  std::string first_reason;
  const auto all = gather_from_all(ctx, "rdmacoll/verbs/");
  for (int r = 0; r < ctx.world_size; ++r) {
    const std::string v(all[r].begin(), all[r].end());
    if (v != "1" && first_reason.empty()) {
      first_reason = "rank " + std::to_string(r) + ": " + v.substr(1);
    }
  }
  if (first_reason.empty()) return transport::TransportKind::Verbs;
  if (ctx.rank == 0) log::info("transport: ucx, since verbs is unusable on " + first_reason);
  return transport::TransportKind::Ucx;
}

// How waits poll before blocking: RDMACOLL_SPIN_US overrides the time. Ranks that fit on this
// host's cores poll 200 us; more ranks than cores poll 2 ms, yielding the core on each round.
engine::SpinPolicy spin_policy(const Context& ctx) {
  int local = 0;
  for (const auto& p : ctx.placements)
    local += p.machine == ctx.placements[ctx.rank].machine;  // one kernel shares its CPUs
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  engine::SpinPolicy policy;
  policy.yield = local > cpus;
  policy.duration = std::chrono::microseconds(policy.yield ? 2000 : 200);
  policy.duration = std::chrono::microseconds(
      settings::count("RDMACOLL_SPIN_US", static_cast<uint64_t>(policy.duration.count())));
  return policy;
}

bool flat_topology() {
  return settings::choice("RDMACOLL_TOPOLOGY") == "flat";
}

// Virtual orders for a group whose members (in group rank order) have these placements.
void apply_topology(GroupState& g, const std::vector<topology::LocalPlacement>& members) {
  std::vector<std::string> hosts;
  for (const auto& m : members)
    hosts.push_back(m.host);
  const topology::Layout layout = topology::layout_of(hosts);
  g.hosts = layout.hosts;
  g.host_of = layout.host_of;
  if (flat_topology()) {
    g.order.resize(members.size());
    std::iota(g.order.begin(), g.order.end(), 0);
    g.ring_order = g.order;
    g.host_of.assign(members.size(), 0);  // flat: no schedule knows hosts
  } else {
    g.order = topology::interleaved_order(layout);
    g.ring_order = topology::host_major_order(layout);
  }
}

void check_all_gather_args(const Tensor& output, const Tensor& input, int p, int rank,
                           std::string& error) {
  const int64_t n = input.numel();
  const auto& os = output.sizes();
  const auto& is = input.sizes();
  if (output.data() == nullptr && output.numel() > 0) {
    error = "output tensor has no storage";
    return;
  }
  if (input.data() == nullptr && n > 0) {
    error = "input tensor has no storage";
    return;
  }
  if (output.numel() != static_cast<int64_t>(p) * n) {
    error = "output has " + std::to_string(output.numel()) + " elements " + shape_string(os) +
            ", expected group size " + std::to_string(p) + " x input's " + std::to_string(n) +
            " elements " + shape_string(is) + " = " + std::to_string(p * n);
    return;
  }
  // Flat (p*n0, ...) or stacked (p, n0, ...): the trailing dimensions must agree with the input.
  std::vector<int64_t> flat = is.empty() ? std::vector<int64_t>{p} : is;
  if (!is.empty()) flat[0] *= p;
  std::vector<int64_t> stacked = is;
  stacked.insert(stacked.begin(), p);
  if (os != flat && os != stacked) {
    error = "output shape " + shape_string(os) + " is neither the flat " + shape_string(flat) +
            " nor the stacked " + shape_string(stacked) + " gather of input shape " +
            shape_string(is) + " over " + std::to_string(p) + " ranks";
    return;
  }
  // An input inside the output is allowed only as this rank's own slot (in-place).
  const auto* ob = static_cast<const uint8_t*>(output.data());
  const auto* ib = static_cast<const uint8_t*>(input.data());
  const bool own_slot =
      ib == ob + static_cast<size_t>(rank) * input.numel() * element_size(output.dtype()) &&
      input.dtype() == output.dtype();
  if (n > 0 && !own_slot && ib < ob + output.nbytes() && ob < ib + input.nbytes()) {
    error =
        "input overlaps the output; in-place use must pass exactly this rank's slot of the "
        "output, with the output's dtype";
  }
}

}  // namespace

bool Group::is_member() const {
  return state_ ? state_->is_member() : require_context("Group::is_member").world->is_member();
}
int Group::rank() const {
  return resolve(*this, "Group::rank").rank;
}
int Group::size() const {
  return resolve(*this, "Group::size").size();
}
const std::vector<int>& Group::ranks() const {
  return resolve(*this, "Group::ranks").members;
}

namespace {

// Rendezvous of a world: every rank meets through the store, agrees on the settings and the
// transport, and connects. Shared by init_process_group() and new_standalone_group().
std::unique_ptr<Context> make_world(const InitOptions& options) {
  auto ctx = std::make_unique<Context>();
  bootstrap::Rendezvous rv;
  if (options.store) {
    if (options.rank < 0 || options.world_size < 1 || options.rank >= options.world_size) {
      throw InvalidArgument(
          "init_process_group: with a store, rank and world_size must be given "
          "(0 <= rank < world_size), got rank " +
          std::to_string(options.rank) + ", world_size " + std::to_string(options.world_size));
    }
    rv.rank = options.rank;
    rv.world_size = options.world_size;
  } else {
    rv = bootstrap::resolve_init_method(options.init_method, options.rank, options.world_size);
  }
  ctx->rank = rv.rank;
  ctx->world_size = rv.world_size;
  if (transport_from_env() == transport::TransportKind::Verbs) {
    // Fail fast, before any rendezvous, so no rank is left waiting for this one.
    if (const auto why_not = transport::verbs_unusable_reason()) {
      throw TransportError("RDMACOLL_TRANSPORT=verbs, but rank " + std::to_string(ctx->rank) +
                           " cannot use verbs: " + *why_not);
    }
  }
  ctx->timeout = options.timeout ? *options.timeout : timeout_from_env();
  // Every setting parsed now, so a bad value raises here, not in the middle of a collective.
  settings::validate_all();
  const auto deadline = transport::Clock::now() + ctx->timeout;
  if (options.store) {
    // The k-th process group over this store takes the k-th block of world_size tickets: the
    // same k on every rank, since no rank starts group k+1 before every rank has joined k.
    const int64_t ticket = options.store->add("rdmacoll/inits", 1);
    ctx->store = std::make_shared<bootstrap::PrefixedStore>(
        "rdmacoll/" + std::to_string((ticket - 1) / ctx->world_size) + "/", options.store);
  } else {
    const bootstrap::StoreCredentials credentials = store_credentials();
    if (ctx->rank == 0) {
      // Bound where the job says rank 0 is reached (MASTER_ADDR), not on every interface.
      const auto bind = settings::text("RDMACOLL_STORE_BIND");
      const bool bind_set = bind.has_value();
      try {
        ctx->server = std::make_unique<bootstrap::StoreServer>(bind_set ? *bind : rv.master_addr,
                                                               rv.master_port, credentials);
      } catch (const bootstrap::PortInUse&) {
        tell_the_port_holder(rv, credentials);
        throw;
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(std::string(e.what()) + " (the address is " +
                              (bind_set ? "RDMACOLL_STORE_BIND's" : "MASTER_ADDR's") + ")");
      }
      if (credentials.token.empty()) {
        log::info("rank 0: the rendezvous store on " + (bind_set ? *bind : rv.master_addr) + ":" +
                  std::to_string(rv.master_port) +
                  " is open to anyone who can connect (no RDMACOLL_AUTH_TOKEN)");
      }
    }
    auto client = std::make_shared<bootstrap::StoreClient>(rv.master_addr, rv.master_port, deadline,
                                                           credentials);
    client->set_op_timeout(ctx->timeout);
    ctx->store = std::move(client);
    ctx->own_store = true;
  }
  claim_rank(*ctx);

  // A stale store from an earlier job on the same port would mix up ranks: check world size.
  const std::string size_key = "rdmacoll/world_size";
  if (ctx->rank == 0) ctx->store->set(size_key, std::to_string(ctx->world_size));
  const std::string their_size = ctx->store->get_string(size_key, ctx->timeout);
  if (their_size != std::to_string(ctx->world_size)) {
    abort_rendezvous(*ctx, "init_process_group: rank " + std::to_string(ctx->rank) +
                               " has world size " + std::to_string(ctx->world_size) +
                               " but rank 0 has " + their_size);
  }
  check_shared_settings(*ctx);

  // Where every rank runs (hwloc): host, NUMA node, nearest NIC; drives the rank orders.
  const topology::LocalPlacement here = topology::probe();
  ctx->store->set("rdmacoll/topo/" + std::to_string(ctx->rank), here.serialize());
  for (const auto& b : gather_from_all(*ctx, "rdmacoll/topo/")) {
    ctx->placements.push_back(topology::LocalPlacement::parse(std::string(b.begin(), b.end())));
  }
  // Serialized: groups run on their own threads (async work, several caller threads).
  ctx->transport =
      transport::make_serialized(transport::create_transport(agree_on_transport(*ctx), here.nic));
  const std::string kind = ctx->transport->name();
  ctx->store->set("rdmacoll/addr/" + std::to_string(ctx->rank),
                  bootstrap::wrap_address(ctx->rank, kind,
                                          ctx->transport->address(ctx->rank, ctx->world_size)));
  std::vector<transport::Bytes> addresses = gather_from_all(*ctx, "rdmacoll/addr/");
  for (int r = 0; r < ctx->world_size; ++r)
    addresses[r] = unwrap_address(*ctx, r, kind, addresses[r]);
  ctx->transport->set_connection_store(ctx->store);
  ctx->transport->connect(ctx->rank, addresses);
  ctx->engine = std::make_unique<engine::Engine>(*ctx->transport, spin_policy(*ctx));

  ctx->generation = next_generation();
  ctx->world = std::make_shared<GroupState>();
  ctx->world->generation = ctx->generation;
  ctx->world->transport = ctx->transport;
  ctx->world->id = 0;
  ctx->world->members.resize(ctx->world_size);
  std::iota(ctx->world->members.begin(), ctx->world->members.end(), 0);
  apply_topology(*ctx->world, ctx->placements);
  ctx->world->rank = ctx->rank;
  ctx->world->global_rank = ctx->rank;
  ctx->world->set_identity(0);
  ctx->world->timeout = ctx->timeout;
  if (ctx->rank == 0) {
    log::info("rank 0: " + std::to_string(ctx->world_size) + " ranks on " +
              std::to_string(ctx->world->hosts) + " host(s), transport=" +
              ctx->transport->describe() + ", rendezvous: " + ctx->store->describe());
  }
  return ctx;
}

// Standalone groups, each with a world of its own: abort_process_group() ends them too.
std::vector<std::weak_ptr<GroupState>>& standalone_groups() {
  static std::vector<std::weak_ptr<GroupState>> groups;
  return groups;
}
std::mutex standalone_mutex;

}  // namespace

void init_process_group(const InitOptions& options) {
  if (context()) {
    throw InvalidArgument(
        "init_process_group: already initialized; call "
        "destroy_process_group() first");
  }
  context() = make_world(options);
}

Group new_standalone_group(const std::shared_ptr<Store>& store, int group_rank, int group_size,
                           std::optional<std::chrono::milliseconds> timeout) {
  if (!store) throw InvalidArgument("new_standalone_group: no store given");
  InitOptions o;
  o.store = store;
  o.rank = group_rank;
  o.world_size = group_size;
  o.timeout = timeout;
  std::shared_ptr<Context> ctx = make_world(o);
  std::shared_ptr<GroupState> g = std::move(ctx->world);
  g->own_world = ctx;
  std::lock_guard lock(standalone_mutex);
  std::erase_if(standalone_groups(), [](const auto& w) { return w.expired(); });
  standalone_groups().push_back(g);
  return Group(std::move(g));
}

bool is_initialized() {
  return context() != nullptr;
}

int get_rank(const Group& group) {
  const GroupState& g = resolve(group, "get_rank");
  return g.rank;
}

int get_world_size(const Group& group) {
  const GroupState& g = resolve(group, "get_world_size");
  return g.size();
}

std::string transport_name() {
  return require_context("transport_name").transport->name();
}

namespace detail {
uint64_t memory_registrations() {
  return require_context("memory_registrations").transport->registrations();
}
std::string transport_counters() {
  const auto c = require_context("transport_counters").transport->counters();
  std::ostringstream o;
  o << "work_requests=" << c.work_requests << " doorbells=" << c.doorbells
    << " signaled=" << c.signaled << " inline_sends=" << c.inline_sends
    << " completions=" << c.completions << " event_syscalls=" << c.event_syscalls
    << " keepalives=" << c.keepalives << " striped_writes=" << c.striped_writes
    << " eager_writes=" << c.eager_writes << " eager_fallbacks=" << c.eager_fallbacks
    << " eager_credit_writes=" << c.eager_credit_writes << " eager_sleeps=" << c.eager_sleeps
    << " eager_rings=" << c.eager_rings << " eager_late=" << c.eager_late;
  return o.str();
}
uint64_t bytes_written_to(int peer) {
  return require_context("bytes_written_to").transport->bytes_written_to(peer);
}
bool eager_slots_active(const Group& group) {
  return resolve(group, "eager_slots_active").scratch.slots.active();
}
uint64_t doorbells_rung() {
  return require_context("doorbells_rung").transport->doorbells_rung();
}

std::string transport_footprint() {
  const auto f = require_context("transport_footprint").transport->footprint();
  std::ostringstream os;
  os << "queue_pairs=" << f.queue_pairs << " pinned_control_bytes=" << f.pinned_control_bytes
     << " cq_entries=" << f.cq_entries;
  return os.str();
}

uint64_t connected_peers() {
  return require_context("connected_peers").transport->footprint().connected_peers;
}

uint64_t control_messages_sent() {
  return require_context("control_messages_sent").transport->control_messages_sent();
}
std::string host_of(int rank) {
  return require_context("host_of").placements.at(rank).host;
}
}  // namespace detail

// Ids wrap around (kGroupIds): the group that had this id before must be gone.
void check_id_free(Context& ctx, uint32_t id, const char* where) {
  std::erase_if(ctx.groups, [](const auto& w) { return w.expired(); });
  for (const auto& w : ctx.groups) {
    auto g = w.lock();
    if (g && g->id == id && !g->destroyed) {
      throw InvalidArgument(std::string(where) + ": too many groups alive at once (at most " +
                            std::to_string(kGroupIds - 1) + " of each kind); " + g->describe() +
                            " still holds id " + std::to_string(id) +
                            ": destroy_group() the groups you are done with");
    }
  }
}

Group new_group(const std::vector<int>& ranks, std::optional<std::chrono::milliseconds> timeout) {
  Context& ctx = require_context("new_group");
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());  // as torch does: group rank order is sorted order
  if (sorted.empty()) throw InvalidArgument("new_group: ranks must not be empty");
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    throw InvalidArgument("new_group: ranks " + join(ranks) + " contain a duplicate");
  }
  if (sorted.front() < 0 || sorted.back() >= ctx.world_size) {
    throw InvalidArgument("new_group: ranks " + join(ranks) + " must lie in [0, " +
                          std::to_string(ctx.world_size) + ")");
  }
  auto g = std::make_shared<GroupState>();
  g->generation = ctx.generation;
  g->transport = ctx.transport;
  g->id = static_cast<uint32_t>(1 + ctx.new_groups_made++ % (kGroupIds - 1));
  check_id_free(ctx, g->id, "new_group");
  g->members = sorted;
  g->global_rank = ctx.rank;
  g->set_identity(ctx.new_groups_made);  // this new_group call's number, from 1
  std::vector<topology::LocalPlacement> member_placements;
  for (int r : sorted)
    member_placements.push_back(ctx.placements[r]);
  apply_topology(*g, member_placements);
  const auto it = std::find(sorted.begin(), sorted.end(), ctx.rank);
  g->rank = it == sorted.end() ? -1 : static_cast<int>(it - sorted.begin());
  g->timeout = timeout ? *timeout : ctx.timeout;
  std::erase_if(ctx.groups, [](const auto& w) { return w.expired(); });
  ctx.groups.push_back(g);
  return Group(std::move(g));
}

Group new_member_group(const std::shared_ptr<Store>& store, int group_rank, int group_size,
                       std::optional<std::chrono::milliseconds> timeout) {
  Context& ctx = require_context("new_member_group");
  if (!store) throw InvalidArgument("new_member_group: no store given");
  if (group_size < 1 || group_size > ctx.world_size || group_rank < 0 || group_rank >= group_size) {
    throw InvalidArgument("new_member_group: group rank " + std::to_string(group_rank) +
                          " of size " + std::to_string(group_size) +
                          " is impossible in a world of " + std::to_string(ctx.world_size));
  }
  const auto wait = timeout ? *timeout : ctx.timeout;
  const std::string where = "new_member_group (group rank " + std::to_string(group_rank) + " of " +
                            std::to_string(group_size) + ", world rank " +
                            std::to_string(ctx.rank) + ")";
  // Each member says which world rank it is; the first member draws the group's id from the
  // world's store, so ids are unique in the job whatever groups other ranks make.
  const std::string claim = "rdmacoll/member/" + std::to_string(group_rank);
  if (store->add("rdmacoll/claims/" + std::to_string(group_rank), 1) > 1) {
    const std::string other = store->check(claim) ? store->get_string(claim, wait) : "?";
    throw InvalidArgument(where + ": group rank " + std::to_string(group_rank) +
                          " is already claimed by world rank " + other +
                          "; every member must pass its own group rank");
  }
  store->set(claim, std::to_string(ctx.rank));
  if (group_rank == 0) {
    const int64_t n = ctx.store->add("rdmacoll/member_groups", 1);
    store->set("rdmacoll/group_id", std::to_string(kFirstMemberGroupId + (n - 1) % kGroupIds));
  }
  std::vector<int> members(group_size);
  for (int r = 0; r < group_size; ++r) {
    const std::string v = store->get_string("rdmacoll/member/" + std::to_string(r), wait);
    char* end = nullptr;
    const long m = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || m < 0 || m >= ctx.world_size) {
      throw InvalidArgument(where + ": group rank " + std::to_string(r) +
                            " published world rank '" + v + "', not one of [0, " +
                            std::to_string(ctx.world_size) + ")");
    }
    members[r] = static_cast<int>(m);
  }
  if (members[group_rank] != ctx.rank) {
    throw InvalidArgument(where + ": group rank " + std::to_string(group_rank) +
                          " is claimed by world rank " + std::to_string(members[group_rank]) +
                          " too; every member must pass its own group rank");
  }
  std::vector<int> sorted = members;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    throw InvalidArgument(where + ": world ranks " + join(members) +
                          " contain a duplicate; does every member use its own world rank?");
  }
  const std::string id_text = store->get_string("rdmacoll/group_id", wait);
  const long id = std::strtol(id_text.c_str(), nullptr, 10);
  if (id < kFirstMemberGroupId || id >= kFirstMemberGroupId + kGroupIds) {
    throw InvalidArgument(where + ": the group id '" + id_text + "' in the store is not one of " +
                          "rdmacoll's");
  }
  check_id_free(ctx, static_cast<uint32_t>(id), where.c_str());
  auto g = std::make_shared<GroupState>();
  g->generation = ctx.generation;
  g->transport = ctx.transport;
  g->id = static_cast<uint32_t>(id);
  g->members = members;
  g->global_rank = ctx.rank;
  g->set_identity(static_cast<uint64_t>(id));
  std::vector<topology::LocalPlacement> member_placements;
  for (int r : members)
    member_placements.push_back(ctx.placements[r]);
  apply_topology(*g, member_placements);
  g->rank = group_rank;
  g->timeout = wait;
  std::erase_if(ctx.groups, [](const auto& w) { return w.expired(); });
  ctx.groups.push_back(g);
  return Group(std::move(g));
}

void destroy_group(Group& group) {
  if (group.is_default()) {
    throw InvalidArgument("destroy_group: the default group goes with destroy_process_group()");
  }
  GroupState& g = *group.state();
  if (!g.destroyed) {
    g.destroyed = true;
    g.release();
  }
  group = Group();
}

void destroy_process_group() {
  auto& ctx = context();
  if (!ctx) return;
  // Every rank must be done with the transport before rank 0 takes the store away. No rank
  // connects anew from here on, so rank 0 stops accepting: a rank that re-initializes on the
  // same port must reach the next store, not this one.
  if (ctx->server) ctx->server->stop_accepting();
  // Outstanding async work finishes (or fails) before the transport goes.
  ctx->world->queue.drain();
  for (const auto& w : ctx->groups) {
    if (auto g = w.lock()) g->queue.drain();
  }
  // After a failure some ranks may never come: wait a short grace then, not the timeout.
  bool failed = ctx->world->broken.has_value();
  for (const auto& w : ctx->groups) {
    if (auto g = w.lock()) failed = failed || g->broken.has_value();
  }
  // After a failure the whole of destroy (both waits below) fits in one grace.
  const auto grace = abort_grace(*ctx);
  const auto grace_end = std::chrono::steady_clock::now() + grace;
  auto grace_left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        grace_end - std::chrono::steady_clock::now()));
  };
  // A stopped rank 0 would hold every store call for the op timeout: after a failure, the grace.
  if (auto* client = dynamic_cast<bootstrap::StoreClient*>(ctx->store.get()); client && failed) {
    client->set_op_timeout(grace);
  }
  try {
    const int64_t n = ctx->store->add("rdmacoll/destroy", 1);
    if (n < ctx->world_size) {
      ctx->store->get("rdmacoll/destroyed", failed ? grace_left() : ctx->timeout);
    }
    if (n == ctx->world_size) ctx->store->set("rdmacoll/destroyed", std::string("1"));
  } catch (const Error& e) {
    if (!failed)
      log::warn("destroy_process_group: ranks did not all arrive: " + std::string(e.what()));
  }
  ctx->engine.reset();
  ctx->transport.reset();
  // Rank 0 hosts the store (ours, or torch's TCPStore): it leaves last, once the others have
  // read "destroyed" and closed.
  try {
    const int64_t n = ctx->store->add("rdmacoll/closed", 1);
    if (ctx->rank == 0) {
      if (n < ctx->world_size)
        ctx->store->get("rdmacoll/all_closed", failed ? grace_left() : grace);
    } else if (n == ctx->world_size) {
      ctx->store->set("rdmacoll/all_closed", std::string("1"));
    }
  } catch (const Error&) {
  }
  ctx.reset();
}

void abort_process_group() {
  auto& ctx = context();
  // Running and queued work fails at its next idle round instead of waiting for peers.
  engine::process_leaving().store(true);
  {
    std::lock_guard lock(standalone_mutex);
    for (const auto& w : standalone_groups()) {
      if (auto g = w.lock()) {
        g->queue.drain();
        if (!g->broken) g->broken = "this process left (abort_process_group)";
      }
    }
  }
  if (ctx) {
    if (ctx->server) ctx->server->stop_accepting();
    ctx->world->queue.drain();
    for (const auto& w : ctx->groups) {
      if (auto g = w.lock()) g->queue.drain();
    }
    // Connections close with the transport: peers see this rank leave and raise PeerFailure.
    ctx->engine.reset();
    ctx->transport.reset();
    ctx.reset();
  }
  engine::process_leaving().store(false);
}

bool Work::is_completed() const {
  return !state_ || state_->completed();
}

bool Work::wait(std::optional<std::chrono::milliseconds> timeout) const {
  if (state_) state_->wait(timeout);
  return true;
}

std::exception_ptr Work::exception() const {
  return state_ && state_->completed() ? state_->error() : nullptr;
}

void Work::on_completion(std::function<void(std::exception_ptr)> callback) const {
  if (!state_) return callback(nullptr);
  state_->on_completion(std::move(callback));
}

namespace {

// Runs `body` on this thread (behind the group's outstanding work), or queues what
// `make_async` returns (a body owning copies of the tensor handles) for the group's worker.
// The copies are made only for async work: a blocking call allocates nothing here.
template <typename Body, typename MakeAsync>
Work issue(GroupState& g, bool async_op, const char* what, Body&& body, MakeAsync&& make_async) {
  if (!async_op) {
    g.queue.run(std::forward<Body>(body), what);
    return Work();
  }
  return Work(g.queue.submit(make_async(), what));
}

// A standalone group runs on its own world's engine, every other group on the default world's.
engine::Engine& engine_of(const GroupState& g, const char* what) {
  if (g.own_world) return *static_cast<Context*>(g.own_world.get())->engine;
  return *require_context(what).engine;
}

void all_gather_into_tensor_now(engine::Engine& e, GroupState& g, Tensor& output,
                                const Tensor& input) {
  engine::AllGatherArgs a;
  a.out = output.data();
  a.out_dtype = output.dtype();
  a.out_numel = output.numel();
  a.in = input.data();
  a.in_dtype = input.dtype();
  a.in_numel = input.numel();
  if (g.is_member()) check_all_gather_args(output, input, g.size(), g.rank, a.local_error);
  e.all_gather(g, a);
}

void all_gather_now(engine::Engine& e, GroupState& g, std::vector<Tensor>& outputs,
                    const Tensor& input) {
  // Gather into one contiguous buffer, then copy out: one collective whatever the list.
  std::string error;
  if (g.is_member() && static_cast<int>(outputs.size()) != g.size()) {
    error = "output list has " + std::to_string(outputs.size()) + " tensors, expected group size " +
            std::to_string(g.size());
  }
  for (size_t i = 0; error.empty() && i < outputs.size(); ++i) {
    if (outputs[i].numel() != input.numel()) {
      error = "output tensor " + std::to_string(i) + " has " + std::to_string(outputs[i].numel()) +
              " elements, expected the input's " + std::to_string(input.numel());
    }
  }
  const DType dt = outputs.empty() ? input.dtype() : outputs[0].dtype();
  for (size_t i = 0; error.empty() && i < outputs.size(); ++i) {
    if (outputs[i].dtype() != dt) {
      error = "output tensors disagree on dtype: " + dtype_name(outputs[i].dtype()) + " vs " +
              dtype_name(dt);
    }
  }
  Tensor staging = Tensor::zeros({static_cast<int64_t>(g.size()) * input.numel()}, dt);
  engine::AllGatherArgs a;
  a.out = staging.data();
  a.out_dtype = dt;
  a.out_numel = staging.numel();
  a.in = input.data();
  a.in_dtype = input.dtype();
  a.in_numel = input.numel();
  a.local_error = error;
  e.all_gather(g, a);
  const size_t chunk = static_cast<size_t>(input.numel()) * element_size(dt);
  for (size_t i = 0; i < outputs.size(); ++i) {
    convert_elements(outputs[i].data(), dt, static_cast<uint8_t*>(staging.data()) + i * chunk, dt,
                     static_cast<size_t>(input.numel()));
  }
}

void all_reduce_now(engine::Engine& e, GroupState& g, Tensor& tensor, ReduceOp op) {
  // A dtype the operator cannot reduce still goes to the peers, so that every rank raises.
  const std::string error = g.is_member() ? engine::reduce_unsupported(op, tensor.dtype()) : "";
  e.all_reduce(g, tensor.data(), tensor.dtype(), tensor.numel(), op, error);
}

std::string check_reduce_scatter_args(const Tensor& output, const Tensor& input, ReduceOp op, int p,
                                      int rank) {
  std::string error = engine::reduce_unsupported(op, input.dtype());
  if (!error.empty()) return error;
  if (output.dtype() != input.dtype()) {
    return "output dtype " + dtype_name(output.dtype()) + " differs from input dtype " +
           dtype_name(input.dtype()) + "; reduce_scatter_tensor needs one dtype";
  }
  if ((output.data() == nullptr && output.numel() > 0) ||
      (input.data() == nullptr && input.numel() > 0)) {
    return "a tensor has no storage";
  }
  if (input.numel() != static_cast<int64_t>(p) * output.numel()) {
    return "input has " + std::to_string(input.numel()) + " elements " +
           shape_string(input.sizes()) + ", expected group size " + std::to_string(p) +
           " x output's " + std::to_string(output.numel()) + " elements " +
           shape_string(output.sizes()) + " = " + std::to_string(p * output.numel());
  }
  // The input is shaped as the all-gather of the output (flat or stacked), and the output
  // may be this rank's piece of it: the all-gather's checks with the roles swapped.
  check_all_gather_args(input, output, p, rank, error);
  if (!error.empty()) {
    return "input " + shape_string(input.sizes()) + " must be the flat or stacked " +
           std::to_string(p) + "-rank gather of output " + shape_string(output.sizes()) + ": " +
           error;
  }
  return "";
}

void reduce_scatter_now(engine::Engine& e, GroupState& g, Tensor& output, const Tensor& input,
                        ReduceOp op) {
  const std::string error =
      g.is_member() ? check_reduce_scatter_args(output, input, op, g.size(), g.rank) : "";
  e.reduce_scatter(g, output.data(), input.data(), output.dtype(), output.numel(), op, error);
}

void broadcast_now(engine::Engine& e, GroupState& g, Tensor& tensor, int src) {
  std::string error;
  int root = 0;
  if (g.is_member()) {
    const auto it = std::find(g.members.begin(), g.members.end(), src);
    if (it == g.members.end()) {
      error = "src " + std::to_string(src) + " is not a member of " + g.describe() +
              "; src is a global rank, as in torch";
    } else {
      root = static_cast<int>(it - g.members.begin());
    }
    if (tensor.data() == nullptr && tensor.numel() > 0) error = "tensor has no storage";
  }
  e.broadcast(g, tensor.data(), tensor.dtype(), tensor.numel(), root, error);
}

}  // namespace

Work all_gather_into_tensor(Tensor& output, const Tensor& input, const Group& group,
                            bool async_op) {
  constexpr const char* what = "all_gather_into_tensor";
  GroupState& g = resolve(group, what);
  engine::Engine& e = engine_of(g, what);
  return issue(
      g, async_op, what, [&] { all_gather_into_tensor_now(e, g, output, input); },
      [&] {
        return
            [&e, &g, output, input]() mutable { all_gather_into_tensor_now(e, g, output, input); };
      });
}

Work all_gather(std::vector<Tensor>& outputs, const Tensor& input, const Group& group,
                bool async_op) {
  constexpr const char* what = "all_gather";
  GroupState& g = resolve(group, what);
  engine::Engine& e = engine_of(g, what);
  return issue(
      g, async_op, what, [&] { all_gather_now(e, g, outputs, input); },
      [&] { return [&e, &g, outputs, input]() mutable { all_gather_now(e, g, outputs, input); }; });
}

Work all_reduce(Tensor& tensor, ReduceOp op, const Group& group, bool async_op) {
  constexpr const char* what = "all_reduce";
  GroupState& g = resolve(group, what);
  engine::Engine& e = engine_of(g, what);
  return issue(
      g, async_op, what, [&] { all_reduce_now(e, g, tensor, op); },
      [&] { return [&e, &g, tensor, op]() mutable { all_reduce_now(e, g, tensor, op); }; });
}

Work reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op, const Group& group,
                           bool async_op) {
  constexpr const char* what = "reduce_scatter_tensor";
  GroupState& g = resolve(group, what);
  engine::Engine& e = engine_of(g, what);
  return issue(
      g, async_op, what, [&] { reduce_scatter_now(e, g, output, input, op); },
      [&] {
        return
            [&e, &g, output, input, op]() mutable { reduce_scatter_now(e, g, output, input, op); };
      });
}

Work broadcast(Tensor& tensor, int src, const Group& group, bool async_op) {
  constexpr const char* what = "broadcast";
  GroupState& g = resolve(group, what);
  engine::Engine& e = engine_of(g, what);
  return issue(
      g, async_op, what, [&] { broadcast_now(e, g, tensor, src); },
      [&] { return [&e, &g, tensor, src]() mutable { broadcast_now(e, g, tensor, src); }; });
}

Work barrier(const Group& group, bool async_op) {
  GroupState& g = resolve(group, "barrier");
  engine::Engine& e = engine_of(g, "barrier");
  auto body = [&e, &g] { e.barrier(g); };
  return issue(g, async_op, "barrier", body, [&] { return body; });
}

Work reject(Collective collective, const std::string& why, const Group& group, bool async_op) {
  if (why.empty()) throw InvalidArgument("reject: the reason must not be empty");
  constexpr const char* what = "reject";
  GroupState& g = resolve(group, what);
  engine::Engine& e = engine_of(g, what);
  // This rank's part of the call, with no data: its descriptor says why, so the peers raise.
  auto body = [&e, &g, collective, why] {
    switch (collective) {
      case Collective::AllGather: {
        engine::AllGatherArgs a;
        a.local_error = why;
        return e.all_gather(g, a);
      }
      case Collective::AllReduce:
        return e.all_reduce(g, nullptr, DType::Float32, 0, ReduceOp::Sum, why);
      case Collective::ReduceScatter:
        return e.reduce_scatter(g, nullptr, nullptr, DType::Float32, 0, ReduceOp::Sum, why);
      case Collective::Broadcast:
        return e.broadcast(g, nullptr, DType::Float32, 0, 0, why);
      case Collective::Barrier:
        return e.barrier(g, why);
    }
    throw InvalidArgument("reject: unknown collective " +
                          std::to_string(static_cast<int>(collective)));
  };
  return issue(g, async_op, what, body, [&] { return body; });
}

}  // namespace rdmacoll
