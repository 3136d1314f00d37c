#include "api/world.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <sstream>

#include "bootstrap/address_envelope.hpp"
#include "bootstrap/init_method.hpp"
#include "common/log.hpp"
#include "common/settings.hpp"
#include "engine/collectives/registry.hpp"
#include "engine/core/group_factory.hpp"
#include "rdmacoll/errors.hpp"

namespace rdmacoll::api {

using transport::Bytes;

namespace {

uint64_t next_generation() {
  static uint64_t n = 0;
  return ++n;
}

transport::TransportKind transport_from_env() {
  using settings::kTransport;
  const auto s = settings::read(kTransport);
  return s == kTransport.value("ucx")     ? transport::TransportKind::Ucx
         : s == kTransport.value("verbs") ? transport::TransportKind::Verbs
                                          : transport::TransportKind::Auto;
}

// RDMACOLL_TRANSPORT=auto takes verbs only when every rank has an ACTIVE RDMA port, so that
// all ranks agree; =verbs without a usable device is an error, never a silent fallback.
transport::TransportKind agree_on_transport(World& w) {
  const transport::TransportKind wanted = transport_from_env();
  if (wanted != transport::TransportKind::Auto) return wanted;  // checked before the rendezvous
  const std::optional<std::string> why_not = transport::verbs_unusable_reason();
  const std::string mine = why_not ? "0" + *why_not : "1";
  const auto all = w.rendezvous->all_gather("rdmacoll/verbs/", Bytes(mine.begin(), mine.end()));
  std::string first_reason;
  for (int r = 0; r < w.world_size; ++r) {
    const std::string v(all[r].begin(), all[r].end());
    if (v != "1" && first_reason.empty()) {
      first_reason = "rank " + std::to_string(r) + ": " + v.substr(1);
    }
  }
  if (first_reason.empty()) return transport::TransportKind::Verbs;
  if (w.rank == 0) log::info("transport: ucx, since verbs is unusable on " + first_reason);
  return transport::TransportKind::Ucx;
}

// How waits poll before blocking: RDMACOLL_SPIN_US overrides the time. Ranks that fit on this
// host's cores poll 200 us; more ranks than cores poll 2 ms, yielding the core on each round.
engine::SpinPolicy spin_policy(const World& w) {
  int local = 0;
  for (const auto& p : w.placements)
    local += p.machine == w.placements[w.rank].machine;  // one kernel shares its CPUs
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  engine::SpinPolicy policy;
  policy.yield = local > cpus;
  policy.duration = std::chrono::microseconds(policy.yield ? 2000 : 200);
  if (const auto us = settings::read(settings::kSpinUs))
    policy.duration = std::chrono::microseconds(*us);
  return policy;
}

// From the placements every rank holds, so every rank's transport makes the same choices: all
// ranks on one machine (one kernel) that has an online CPU for each. Online CPUs, not this
// rank's affinity: the count must come out the same on every rank.
transport::CreateHints transport_hints(const World& w) {
  transport::CreateHints hints;
  const std::string& machine = w.placements[w.rank].machine;
  const bool one_machine = std::all_of(w.placements.begin(), w.placements.end(),
                                       [&](const auto& p) { return p.machine == machine; });
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  hints.one_uncrowded_machine = one_machine && !machine.empty() && cpus >= w.world_size;
  return hints;
}

}  // namespace

std::string shape_string(const std::vector<int64_t>& sizes) {
  std::ostringstream os;
  os << '(';
  for (size_t i = 0; i < sizes.size(); ++i)
    os << (i ? ", " : "") << sizes[i];
  if (sizes.size() == 1) os << ',';
  os << ')';
  return os.str();
}

namespace {

// Transports kept until the process ends: their shared memory (UCX's SysV segments) then goes
// only when the kernel tears the process down, after marking it exiting, which a peer looks
// for before it maps a segment (peer_liveness.hpp). Freed while the process still runs, a peer
// mapping the segment in between got EINVAL, on which UCX 1.13 crashes (the chaos soak's exit
// runs). Never freed: only for a process that is leaving.
void keep_until_exit(const std::shared_ptr<transport::Transport>& t) {
  static auto* const kept = new std::vector<std::shared_ptr<transport::Transport>>();
  if (t) kept->push_back(t);
}

// The default world's holder: a process that exits without destroy_process_group (exit(),
// returning from main) ends the world here, in its static destructors, and keeps the transport.
struct DefaultWorld {
  std::unique_ptr<World> world;
  ~DefaultWorld() {
    if (world) keep_until_exit(world->transport);
  }
};

}  // namespace

std::unique_ptr<World>& default_world() {
  static DefaultWorld holder;
  return holder.world;
}

World& require_world(const char* what) {
  auto& w = default_world();
  if (!w) {
    throw InvalidArgument(std::string(what) +
                          ": the default process group is not initialized; call "
                          "init_process_group() first");
  }
  return *w;
}

GroupState& resolve(const Group& group, const char* what) {
  if (group.is_default()) return *require_world(what).world;
  GroupState& g = *state_of(group);
  if (g.own_engine) {  // a standalone group: its world is its own
    if (g.destroyed) {
      throw InvalidArgument(std::string(what) + ": " + g.describe() +
                            " was destroyed by destroy_group()");
    }
    return g;
  }
  World& w = require_world(what);
  // Its transport (and the memory its mailbox lives in) went with that process group.
  if (g.generation != w.generation) {
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

// A standalone group runs on its own world's engine, every other group on the default world's.
engine::Engine& engine_of(const GroupState& g, const char* what) {
  if (g.own_engine) return *g.own_engine;
  return *require_world(what).engine;
}

// A rank or world size the caller gave must be the launcher's (PMIx numbers the ranks).
void check_given(const InitOptions& options, const bootstrap::PmixSession& pmix) {
  const auto differs = [](int given, int theirs) { return given >= 0 && given != theirs; };
  if (differs(options.rank, pmix.rank()) || differs(options.world_size, pmix.size())) {
    throw InvalidArgument(
        "init_process_group: rank " + std::to_string(options.rank) + " and world_size " +
        std::to_string(options.world_size) + " were given, but the PMIx launcher (namespace " +
        pmix.nspace() + ") started this process as rank " + std::to_string(pmix.rank()) + " of " +
        std::to_string(pmix.size()) + "; leave them unset (-1) under mpirun or srun");
  }
}

std::unique_ptr<World> make_world(const InitOptions& options) {
  auto w = std::make_unique<World>();
  bootstrap::RendezvousOptions ro;
  if (options.store) {
    if (options.rank < 0 || options.world_size < 1 || options.rank >= options.world_size) {
      throw InvalidArgument(
          "init_process_group: with a store, rank and world_size must be given "
          "(0 <= rank < world_size), got rank " +
          std::to_string(options.rank) + ", world_size " + std::to_string(options.world_size));
    }
    ro.rank = options.rank;
    ro.world_size = options.world_size;
    ro.store = options.store;
  } else {
    ro.target =
        bootstrap::resolve_init_method(options.init_method, options.rank, options.world_size);
    ro.rank = ro.target.rank;
    ro.world_size = ro.target.world_size;
    if (ro.target.pmix) {
      ro.pmix = bootstrap::PmixSession::connect("init_process_group");
      check_given(options, *ro.pmix);
      ro.rank = ro.pmix->rank();
      ro.world_size = ro.pmix->size();
    }
  }
  w->rank = ro.rank;
  w->world_size = ro.world_size;
  ro.where = "init_process_group (rank " + std::to_string(w->rank) + " of " +
             std::to_string(w->world_size) + ")";
  if (transport_from_env() == transport::TransportKind::Verbs) {
    // Fail fast, before any rendezvous, so no rank is left waiting for this one.
    if (const auto why_not = transport::verbs_unusable_reason()) {
      throw TransportError("RDMACOLL_TRANSPORT=verbs, but rank " + std::to_string(w->rank) +
                           " cannot use verbs: " + *why_not);
    }
  }
  w->timeout = options.timeout ? *options.timeout : settings::read(settings::kTimeout);
  ro.timeout = w->timeout;
  // Every setting parsed now, so a bad value raises here, not in the middle of a collective.
  settings::validate_all();
  log::configure();
  transport::check_settings();
  w->tuning = engine::Tuning::from_settings();
  w->rendezvous = std::make_unique<bootstrap::Rendezvous>(ro);
  bootstrap::Rendezvous& rv = *w->rendezvous;
  // The settings every rank must share: the world size and the registry's job-wide ones.
  rv.compare("WORLD_SIZE=" + std::to_string(w->world_size) + "\n" + settings::job_wide());

  // Where every rank runs (hwloc): host, NUMA node, nearest NIC; drives the rank orders.
  const topology::LocalPlacement here = topology::probe();
  if (!here.nic.empty())
    log::info("rank " + std::to_string(w->rank) + ": RDMA device " + here.nic + " (" +
              here.nic_why + ")");
  const std::string text = here.serialize();
  for (const auto& b : rv.all_gather("rdmacoll/topo/", Bytes(text.begin(), text.end()))) {
    w->placements.push_back(topology::LocalPlacement::parse(std::string(b.begin(), b.end())));
  }
  // Serialized: groups run on their own threads (async work, several caller threads).
  w->transport = transport::make_serialized(
      transport::create_transport(agree_on_transport(*w), here.nic, transport_hints(*w)));
  const std::string kind = w->transport->name();
  const std::string token = settings::read(settings::kAuthToken).value_or("");
  std::vector<Bytes> addresses = rv.all_gather(
      "rdmacoll/addr/",
      bootstrap::wrap_address(w->rank, kind, w->transport->address(w->rank, w->world_size), token));
  for (int r = 0; r < w->world_size; ++r) {
    std::string why;
    std::optional<Bytes> unwrapped = bootstrap::unwrap_address(addresses[r], r, kind, why, token);
    if (!unwrapped) {
      rv.abort(ro.where + ": " + why + " (through the " + rv.describe() + ")");
    }
    addresses[r] = std::move(*unwrapped);
  }
  if (w->transport->needs_connection_store()) {
    rv.open_store();  // under PMIx, only now and only for such a transport
    w->transport->set_connection_store(rv.store());
  }
  w->transport->connect(w->rank, addresses);
  w->engine = std::make_unique<engine::Engine>(*w->transport, spin_policy(*w));

  w->generation = next_generation();
  engine::GroupSpec spec;
  spec.members.resize(static_cast<size_t>(w->world_size));
  std::iota(spec.members.begin(), spec.members.end(), 0);
  spec.global_rank = w->rank;
  spec.placements = w->placements;
  spec.transport = w->transport;
  spec.generation = w->generation;
  spec.timeout = w->timeout;
  spec.tuning = w->tuning;
  spec.collectives = engine::collectives::registry();
  w->world = engine::make_group(std::move(spec));
  const GroupState& g = *w->world;
  if (w->rank == 0) {
    log::info("rank 0: " + std::to_string(w->world_size) + " ranks on " + std::to_string(g.hosts) +
              " host(s), transport=" + w->transport->describe() + ", rendezvous: " + rv.describe());
  }
  return w;
}

void end_world(World& w, bool abort) {
  // Outstanding async work finishes (or, leaving, fails at once: the caller raised
  // engine::process_leaving()) before the transport goes.
  if (w.world) w.world->queue.drain();
  for (const auto& weak : w.groups) {
    if (auto g = weak.lock()) g->queue.drain();
  }
  if (abort) {
    if (w.transport) w.transport->close_without_flush();
    w.rendezvous->leave();
    // A leaving process: its transport outlives the world (keep_until_exit).
    keep_until_exit(w.transport);
  } else {
    // After a failure some ranks may never come: a short grace then, not the timeout.
    bool failed = w.world && w.world->broken.has_value();
    for (const auto& weak : w.groups) {
      if (auto g = weak.lock()) failed = failed || g->broken.has_value();
    }
    // Nobody waits for a rank whose process this one knows has exited (a point-to-point
    // failure breaks no group, and a rank may die while this one talks only to others). Not
    // for a rank merely unreachable: it may still need rank 0's store.
    const auto known_dead = [&] {
      std::vector<bool> dead(static_cast<size_t>(w.world_size), false);
      for (int r = 0; r < w.world_size; ++r)
        dead[r] = r != w.rank && w.transport->peer_exited(r);
      return dead;
    };
    w.rendezvous->arrive(failed, known_dead);
    w.engine.reset();
    w.transport.reset();
    w.rendezvous->depart(failed);
  }
  // Connections close with the transport: peers still waiting on us raise PeerFailure.
  w.engine.reset();
  w.transport.reset();
}

void check_id_free(World& ctx, uint32_t id, const char* where) {
  std::erase_if(ctx.groups, [](const auto& w) { return w.expired(); });
  for (const auto& w : ctx.groups) {
    auto g = w.lock();
    if (g && g->id == id && !g->destroyed) {
      throw InvalidArgument(std::string(where) + ": too many groups alive at once (at most " +
                            std::to_string(kFirstShrunkGroupId - 1) + " from new_group, " +
                            std::to_string(kGroupIds) + " member groups); " + g->describe() +
                            " still holds id " + std::to_string(id) +
                            ": destroy_group() the groups you are done with");
    }
  }
}

std::vector<Standalone>& standalone_groups() {
  static std::vector<Standalone> groups;
  return groups;
}

std::mutex& standalone_mutex() {
  static std::mutex m;
  return m;
}

void add_standalone(const std::shared_ptr<GroupState>& group, const std::shared_ptr<World>& world) {
  std::lock_guard lock(standalone_mutex());
  std::erase_if(standalone_groups(), [](const Standalone& s) { return s.group.expired(); });
  standalone_groups().push_back({group, world});
}

StandaloneHandle standalone_of(const GroupState& group) {
  std::lock_guard lock(standalone_mutex());
  for (const Standalone& s : standalone_groups()) {
    if (auto g = s.group.lock(); g.get() == &group) return {std::move(g), s.world.lock()};
  }
  return {};
}

}  // namespace rdmacoll::api
