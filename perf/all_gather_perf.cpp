// all_gather_perf: all_gather_into_tensor bandwidth and latency, in the nccl-tests tradition;
// with -S, into symmetric memory (rdmacoll::empty; with -o all_reduce, reduce_scatter and
// broadcast, their tensor and input there too); with -o, every other
// call (sendrecv_perf, alltoall_perf, gather_perf, scatter_perf and reduce_perf are this source
// with -o preset).
//   rdmacoll-run -n 4 ./all_gather_perf -b 8 -e 64M -f 4 -n 20 -w 5 -c 1
// Columns: size (bytes per rank), count (elements per rank), type, time (us, slowest rank's
// mean), algbw = world*size/time, busbw = algbw*(world-1)/world, #wrong, then p50/p99.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <unistd.h>
#include <string>
#include <vector>

#include <rdmacoll/rdmacoll.hpp>

namespace {

using namespace rdmacoll;

struct Options {
  size_t min_bytes = 8;
  size_t max_bytes = 64 << 20;
  double factor = 2;
  int iters = 20;
  int warmup = 5;
  int check = 1;
  DType dtype = DType::Float32;
  std::string json;
  std::string csv;
  bool list = false;       // -o list: all_gather into a list of tensors instead of one
  bool symmetric = false;  // -S: the all-gathers' output from rdmacoll::empty (symmetric memory)
  // -o all_reduce | reduce_scatter | broadcast: one column set (sweep_one_column); empty for
  // the all-gathers.
  std::string single;
};

size_t parse_size(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (*end) {
    case 'K':
    case 'k':
      v *= 1024;
      break;
    case 'M':
    case 'm':
      v *= 1024 * 1024;
      break;
    case 'G':
    case 'g':
      v *= 1024.0 * 1024 * 1024;
      break;
    default:
      break;
  }
  return static_cast<size_t>(v);
}

DType parse_dtype(const std::string& s) {
  if (s == "float" || s == "float32") return DType::Float32;
  if (s == "double" || s == "float64") return DType::Float64;
  if (s == "half" || s == "float16") return DType::Float16;
  if (s == "bfloat16") return DType::BFloat16;
  if (s == "int32") return DType::Int32;
  if (s == "int64") return DType::Int64;
  if (s == "int8") return DType::Int8;
  if (s == "uint8") return DType::UInt8;
  std::fprintf(stderr, "unknown dtype %s\n", s.c_str());
  std::exit(2);
}

const char* short_name(DType d) {
  switch (d) {
    case DType::Float32:
      return "float";
    case DType::Float64:
      return "double";
    case DType::Float16:
      return "half";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::Int8:
      return "int8";
    case DType::UInt8:
      return "uint8";
    default:
      return "other";
  }
}

enum class Kind {
  AllReduce,
  ReduceScatter,
  Broadcast,
  Reduce,
  AllToAll,
  Gather,
  Scatter,
  SendRecv
};

struct OneColumnOp {
  Kind kind;  // the timed loop dispatches on it, not on the name
  const char* name;
  const char* title;  // for the header line
  bool pieces;        // size is p pieces of whole elements
  bool reduces;       // a redop column of "sum"
  double (*bus_factor)(int world);
};

const OneColumnOp kOneColumnOps[] = {
    {Kind::AllReduce, "all_reduce", "all_reduce (sum, in place)", false, true,
     [](int p) { return 2.0 * (p - 1) / p; }},
    {Kind::ReduceScatter, "reduce_scatter", "reduce_scatter_tensor (sum)", true, true,
     [](int p) { return (p - 1.0) / p; }},
    {Kind::Broadcast, "broadcast", "broadcast (from rank 0)", false, false,
     [](int) { return 1.0; }},
    {Kind::Reduce, "reduce", "reduce (sum, to rank 0, in place)", false, true,
     [](int) { return 1.0; }},
    {Kind::AllToAll, "alltoall", "all_to_all_single (equal splits)", true, false,
     [](int p) { return (p - 1.0) / p; }},
    {Kind::Gather, "gather", "gather (to rank 0)", true, false,
     [](int p) { return (p - 1.0) / p; }},
    {Kind::Scatter, "scatter", "scatter (from rank 0)", true, false,
     [](int p) { return (p - 1.0) / p; }},
    {Kind::SendRecv, "sendrecv", "send to rank+1, recv from rank-1 (one batch)", false, false,
     [](int) { return 1.0; }},
};

const OneColumnOp* find_one_column_op(const std::string& name) {
  for (const auto& op : kOneColumnOps)
    if (name == op.name) return &op;
  return nullptr;
}

Options parse(int argc, char** argv) {
  Options o;
#ifdef RDMACOLL_PERF_OP  // sendrecv_perf, alltoall_perf, ...: this source with -o preset
  o.single = RDMACOLL_PERF_OP;
#endif
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-b")
      o.min_bytes = parse_size(next());
    else if (a == "-e")
      o.max_bytes = parse_size(next());
    else if (a == "-f")
      o.factor = std::atof(next());
    else if (a == "-n")
      o.iters = std::atoi(next());
    else if (a == "-w")
      o.warmup = std::atoi(next());
    else if (a == "-c")
      o.check = std::atoi(next());
    else if (a == "-d")
      o.dtype = parse_dtype(next());
    else if (a == "-T")
      setenv("RDMACOLL_TIMEOUT_S", next(), 1);
    else if (a == "-J")
      o.json = next();
    else if (a == "--csv")
      o.csv = next();
    else if (a == "-S")
      o.symmetric = true;
    else if (a == "-o") {
      const std::string op = next();
      if (op != "into" && op != "list" && !find_one_column_op(op)) {
        std::fprintf(stderr,
                     "-o: expected into (all_gather_into_tensor), list (all_gather), "
                     "all_reduce, reduce_scatter, broadcast, reduce, alltoall, gather, scatter "
                     "or sendrecv\n");
        std::exit(2);
      }
      o.list = op == "list";
      if (op != "into" && op != "list") o.single = op;
    } else {
      std::fprintf(stderr,
                   "usage: all_gather_perf [-b min] [-e max] [-f factor] [-n iters] [-w warmup] "
                   "[-c 0|1] [-d dtype] [-T timeout_s] [-J json] [--csv file] [-S] "
                   "[-o into|list|all_reduce|reduce_scatter|broadcast|reduce|alltoall|gather|"
                   "scatter|sendrecv]\n");
      std::exit(2);
    }
  }
  if (o.factor <= 1) o.factor = 2;
  return o;
}

// Value of element i of rank r's chunk: distinct per rank and position, exact in every dtype.
double expected(int r, int64_t i) {
  return static_cast<double>((r * 7 + i) % 61);
}

// A live progress line on rank 0: to our own stderr when that is a terminal, or as status
// lines (ended by '\r') that rdmacoll-run shows when its stderr is one (RDMACOLL_PROGRESS=1).
// Quiet when piped. Written outside the timed region, at most every 200 ms.
class Progress {
 public:
  explicit Progress(bool rank0) {
    if (!rank0) return;
    const char* env = std::getenv("RDMACOLL_PROGRESS");
    direct_ = ::isatty(STDERR_FILENO) == 1;
    on_ = direct_ || (env && std::string(env) == "1");
  }
  void set_phase(std::string phase) {
    phase_ = std::move(phase);
    last_ = {};
  }
  // Called between iterations, never inside a timed one.
  void tick(int done, int total) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(200) && done != 0) return;
    last_ = now;
    std::fprintf(stderr, "%s# all_gather_perf %s %d/%d\r", direct_ ? "\033[K" : "", phase_.c_str(),
                 done, total);
    std::fflush(stderr);
  }
  // Before a result line goes to the same terminal.
  void clear() {
    if (on_ && direct_) {
      std::fputs("\r\033[K", stderr);
      std::fflush(stderr);
    }
  }

 private:
  bool on_ = false;
  bool direct_ = false;
  std::string phase_;
  std::chrono::steady_clock::time_point last_{};
};

struct Result {
  double mean_us, p50_us, p99_us;
  int64_t wrong;
};

// One collective call: all_gather_into_tensor(out, in), or with -o list all_gather into views
// of out's chunks (so the same check reads the result).
void gather(Tensor& out, Tensor& in, bool list, int world) {
  if (!list) {
    all_gather_into_tensor(out, in);
    return;
  }
  const int64_t n = in.numel();
  const size_t es = element_size(out.dtype());
  std::vector<Tensor> outs;
  outs.reserve(world);
  for (int r = 0; r < world; ++r)
    outs.push_back(Tensor::view(static_cast<char*>(out.data()) + r * n * es, out.dtype(), {n}));
  all_gather(outs, in);
}

// Times `call` as nccl-tests does, and every row of perf/compare: after the warm-up, one
// barrier, then `iters` calls back to back; a rank's time is the elapsed time over `iters`, and
// the slowest rank's is reported. Then, for the latency spread, `iters` more calls each timed
// alone after a barrier: p50 and p99 of the slowest rank per call. #wrong is left to the caller.
template <typename Call>
Result time_calls(const Call& call, int iters, int warmup, int world, Progress& progress) {
  for (int i = 0; i < warmup; ++i)
    call();
  barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    progress.tick(i, 2 * iters);
    call();
  }
  const double mean =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
      iters;
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    progress.tick(iters + i, 2 * iters);
    barrier();
    const auto t0 = std::chrono::steady_clock::now();
    call();
    times.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  // The slowest rank decides: gather every rank's mean and per-call times.
  times.push_back(mean);
  Tensor mine = Tensor::view(times.data(), DType::Float64, {static_cast<int64_t>(times.size())});
  Tensor all = zeros({static_cast<int64_t>(world) * (iters + 1)}, DType::Float64);
  all_gather_into_tensor(all, mine);
  std::vector<double> slowest(iters, 0.0);
  Result res{};
  for (int r = 0; r < world; ++r) {
    for (int i = 0; i < iters; ++i)
      slowest[i] = std::max(slowest[i], all.item(r * (iters + 1) + i));
    res.mean_us = std::max(res.mean_us, all.item(r * (iters + 1) + iters));
  }
  std::sort(slowest.begin(), slowest.end());
  res.p50_us = slowest[slowest.size() / 2];
  res.p99_us = slowest[std::min(slowest.size() - 1, static_cast<size_t>(slowest.size() * 0.99))];
  return res;
}

Result run(Tensor& out, Tensor& in, bool list, int iters, int warmup, bool check, int world,
           Progress& progress) {
  Result res = time_calls([&] { gather(out, in, list, world); }, iters, warmup, world, progress);
  if (check) {
    const int64_t n = in.numel();
    for (int r = 0; r < world; ++r) {
      for (int64_t i = 0; i < n; ++i)
        res.wrong += out.item(r * n + i) != expected(r, i);
    }
  }
  return res;
}

// Value of element i of rank r's tensor in the all_reduce sweep: sums over up to 31 ranks stay
// exact in every dtype (int8 included).
double reduce_input(int r, int64_t i) {
  return static_cast<double>((r + i) % 5);
}

// -o OP, for every call but the all-gathers: one column set each, with nccl-tests' sizes and
// bus bandwidths. all_reduce (in place): size = the tensor's bytes, busbw = algbw * 2 (p-1)/p.
// reduce_scatter: size = the input's bytes (p x the output), busbw = algbw * (p-1)/p.
// broadcast and reduce (root 0, in place): size = the tensor's bytes, busbw = algbw.
// alltoall (all_to_all_single, equal splits): size = one rank's input (p pieces), busbw =
// algbw * (p-1)/p. gather and scatter (root 0): size = the root's whole tensor (p pieces),
// busbw = algbw * (p-1)/p. sendrecv (each rank sends to rank+1 and receives from rank-1, as one
// batch): size = the message, busbw = algbw. The timed calls keep working on the same tensors;
// the check rewrites the inputs, fills the outputs with a value no result has, and runs once more.
// Element k of the piece rank `from` sends rank `to` (all_to_all): distinct per pair.
double piece_value(int from, int to, int64_t k) {
  return expected(from * 5 + to, k);
}

int64_t sweep_one_column(const Options& o, int rank, int world, Progress& progress, FILE* csv,
                         std::string& json) {
  const OneColumnOp& spec = *find_one_column_op(o.single);
  const std::string op = spec.name;
  const size_t es = element_size(o.dtype);
  const char* redop = spec.reduces ? "sum" : "none";
  const double bus_factor = spec.bus_factor(world);
  const int root = 0, next = (rank + 1) % world, prev = (rank + world - 1) % world;
  if (rank == 0) {
    std::printf("#%11s %12s %8s %6s %10s %9s %9s %8s %10s %10s\n", "size", "count", "type", "redop",
                "time(us)", "algbw", "busbw", "#wrong", "p50(us)", "p99(us)");
    if (csv)
      std::fprintf(csv, "size,count,type,redop,ranks,time_us,algbw,busbw,wrong,p50_us,p99_us\n");
  }
  int64_t total_wrong = 0;
  const size_t step = spec.pieces ? es * world : es;  // whole elements per piece
  // At least one size runs: 8 B on 4 ranks is one float each (16 B in all).
  for (size_t bytes = std::max(o.min_bytes, step); bytes <= std::max(o.max_bytes, step);
       bytes = std::max(bytes + step, static_cast<size_t>(bytes * o.factor))) {
    const int64_t count = static_cast<int64_t>(bytes / step) * (spec.pieces ? world : 1);
    const int64_t m = spec.pieces ? count / world : count;  // one piece
    // t: the input (in place: the tensor); out: the output where the call has one.
    const bool small_in = op == "gather";
    const bool has_out = op != "all_reduce" && op != "broadcast" && op != "reduce";
    const bool small_out = op == "reduce_scatter" || op == "scatter";
    // -S: all_reduce's and broadcast's tensor and reduce_scatter's input from rdmacoll::empty
    // (the other calls ignore it).
    Tensor t = o.symmetric && (op == "all_reduce" || op == "reduce_scatter" || op == "broadcast")
                   ? empty({count}, o.dtype)
                   : zeros({small_in ? m : count}, o.dtype);
    Tensor out = zeros({!has_out ? 0 : small_out ? m : count}, o.dtype);
    // Write the inputs before timing, as nccl-tests does. zeros() is calloc: pages never written
    // read as the kernel's one zero page, so a read-only input (reduce_scatter's, broadcast's
    // root) was served from cache and CMA copied it twice as fast (measured 16 MiB
    // reduce_scatter, 2 ranks: 4.1 ms untouched vs 5.7 ms through torch, whose zeros() writes).
    auto write_inputs = [&] {
      for (int64_t i = 0; i < t.numel(); ++i) {
        double v = reduce_input(rank, i);
        if (op == "alltoall") v = piece_value(rank, static_cast<int>(i / m), i % m);
        if (op == "scatter") v = expected(static_cast<int>(i / m), i % m);
        if (op == "gather" || op == "sendrecv") v = expected(rank, i);
        t.set(i, v);
      }
    };
    write_inputs();
    progress.set_phase("size " + std::to_string(count * es) + " " + op);
    // Built before timing, as MPI_Sendrecv's arguments are.
    P2POp send, recv;
    send.tensor = t;
    send.peer = next;
    recv.kind = P2POp::Kind::Recv;
    recv.tensor = out;
    recv.peer = prev;
    const std::vector<P2POp> pair = {send, recv};
    auto call = [&] {
      switch (spec.kind) {
        case Kind::ReduceScatter:
          reduce_scatter_tensor(out, t);
          break;
        case Kind::Broadcast:
          broadcast(t, root);
          break;
        case Kind::AllReduce:
          all_reduce(t);
          break;
        case Kind::Reduce:
          reduce(t, root);
          break;
        case Kind::AllToAll:
          all_to_all_single(out, t);
          break;
        case Kind::Gather:
          gather(rank == root ? &out : nullptr, t, root);
          break;
        case Kind::Scatter:
          scatter(out, rank == root ? &t : nullptr, root);
          break;
        case Kind::SendRecv:
          for (const Work& w : batch_isend_irecv(pair))
            w.wait();
          break;
      }
    };
    Result res = time_calls(call, o.iters, o.warmup, world, progress);
    if (o.check) {
      write_inputs();
      for (int64_t i = 0; i < out.numel(); ++i)
        out.set(i, 99);  // no result has it
      call();
      // What element i of this rank's result must be (where it has one).
      auto want = [&](int64_t i) -> double {
        if (op == "broadcast") return reduce_input(root, i);
        if (op == "alltoall") return piece_value(static_cast<int>(i / m), rank, i % m);
        if (op == "gather") return expected(static_cast<int>(i / m), i % m);
        if (op == "scatter") return expected(rank, i);
        if (op == "sendrecv") return expected(prev, i);
        double sum = 0;
        const int64_t first = op == "reduce_scatter" ? rank * m : 0;
        for (int r = 0; r < world; ++r)
          sum += reduce_input(r, first + i);
        return o.dtype == DType::Bool ? (sum != 0) : sum;
      };
      const bool no_result = (op == "gather" || op == "reduce") && rank != root;
      const Tensor& result = has_out ? out : t;
      for (int64_t i = 0; !no_result && i < result.numel(); ++i)
        res.wrong += result.item(i) != want(i);
    }
    total_wrong += res.wrong;
    const double size_b = static_cast<double>(count * es);
    const double algbw = size_b / res.mean_us / 1e3;
    const double busbw = algbw * bus_factor;
    char rec[512];
    std::snprintf(rec, sizeof rec,
                  "%s{\"size\":%zu,\"count\":%lld,\"type\":\"%s\",\"redop\":\"%s\",\"ranks\":%d,"
                  "\"time_us\":%.3f,\"algbw\":%.4f,\"busbw\":%.4f,\"wrong\":%lld,\"p50_us\":%.3f,"
                  "\"p99_us\":%.3f}",
                  json.size() > 1 ? "," : "", static_cast<size_t>(size_b),
                  static_cast<long long>(count), short_name(o.dtype), redop, world, res.mean_us,
                  algbw, busbw, static_cast<long long>(res.wrong), res.p50_us, res.p99_us);
    json += rec;
    if (rank == 0) {
      progress.clear();
      std::printf("%12zu %12lld %8s %6s %10.3f %9.3f %9.3f %8lld %10.3f %10.3f\n",
                  static_cast<size_t>(size_b), static_cast<long long>(count), short_name(o.dtype),
                  redop, res.mean_us, algbw, busbw, static_cast<long long>(res.wrong), res.p50_us,
                  res.p99_us);
      std::fflush(stdout);
      if (csv) {
        std::fprintf(csv, "%zu,%lld,%s,%s,%d,%.3f,%.4f,%.4f,%lld,%.3f,%.3f\n",
                     static_cast<size_t>(size_b), static_cast<long long>(count),
                     short_name(o.dtype), redop, world, res.mean_us, algbw, busbw,
                     static_cast<long long>(res.wrong), res.p50_us, res.p99_us);
      }
    }
  }
  return total_wrong;
}

}  // namespace

int run_sweep(const Options& o);

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  // A failed run says why on every rank and exits 1 (it aborted on the uncaught exception).
  try {
    return run_sweep(o);
  } catch (const Error& e) {
    std::fprintf(stderr, "all_gather_perf: %s\n", e.what());
    return 1;
  }
}

int run_sweep(const Options& o) {
  init_process_group();
  const int rank = get_rank();
  const int world = get_world_size();
  const size_t es = element_size(o.dtype);
  if (rank == 0) {
    std::printf("# rdmacoll all_gather_perf: %d ranks, transport %s, dtype %s, %s\n", world,
                transport_name().c_str(), short_name(o.dtype),
                !o.single.empty() ? find_one_column_op(o.single)->title
                : o.list          ? "all_gather (list of tensors)"
                                  : "all_gather_into_tensor");
  }
  if (rank == 0 && o.single.empty()) {
    std::printf("#%11s %12s %8s %10s %9s %9s %8s %10s %10s %10s %9s %9s %8s\n", "size", "count",
                "type", "time(us)", "algbw", "busbw", "#wrong", "p50(us)", "p99(us)", "in-place",
                "algbw", "busbw", "#wrong");
  }
  FILE* csv = nullptr;
  if (rank == 0 && !o.csv.empty()) {
    csv = std::fopen(o.csv.c_str(), "w");
    if (csv && o.single.empty())
      std::fprintf(csv,
                   "size,count,type,ranks,time_us,algbw,busbw,wrong,p50_us,p99_us,"
                   "inplace_time_us,inplace_algbw,inplace_busbw,inplace_wrong\n");
  }
  Progress progress(rank == 0);
  std::string json = "[";
  int64_t total_wrong = 0;
  if (!o.single.empty()) total_wrong = sweep_one_column(o, rank, world, progress, csv, json);
  for (size_t bytes = std::max(o.min_bytes, es); o.single.empty() && bytes <= o.max_bytes;
       bytes = std::max(bytes + es, static_cast<size_t>(bytes * o.factor))) {
    const int64_t count = static_cast<int64_t>(bytes / es);
    Tensor in = zeros({count}, o.dtype);
    for (int64_t i = 0; i < count; ++i)
      in.set(i, expected(rank, i));
    Tensor out = o.symmetric ? empty({world * count}, o.dtype) : zeros({world * count}, o.dtype);
    progress.set_phase("size " + std::to_string(count * es) + " out-of-place");
    const Result op = run(out, in, o.list, o.iters, o.warmup, o.check, world, progress);
    // In-place: the input is this rank's own slot of the output.
    Tensor slot =
        Tensor::view(static_cast<char*>(out.data()) + rank * count * es, o.dtype, {count});
    for (int64_t i = 0; i < count; ++i)
      slot.set(i, expected(rank, i));
    progress.set_phase("size " + std::to_string(count * es) + " in-place");
    const Result ip = run(out, slot, o.list, o.iters, o.warmup, o.check, world, progress);
    const double size_b = static_cast<double>(count * es);
    auto algbw = [&](double us) { return world * size_b / us / 1e3; };
    const double bus = (world - 1.0) / world;
    total_wrong += op.wrong + ip.wrong;
    char rec[512];
    std::snprintf(rec, sizeof rec,
                  "%s{\"size\":%zu,\"count\":%lld,\"type\":\"%s\",\"ranks\":%d,\"time_us\":%.3f,"
                  "\"algbw\":%.4f,\"busbw\":%.4f,\"wrong\":%lld,\"p50_us\":%.3f,\"p99_us\":%.3f,"
                  "\"inplace_time_us\":%.3f,\"inplace_wrong\":%lld}",
                  json.size() > 1 ? "," : "", static_cast<size_t>(size_b),
                  static_cast<long long>(count), short_name(o.dtype), world, op.mean_us,
                  algbw(op.mean_us), algbw(op.mean_us) * bus, static_cast<long long>(op.wrong),
                  op.p50_us, op.p99_us, ip.mean_us, static_cast<long long>(ip.wrong));
    json += rec;

    if (rank == 0) {
      progress.clear();
      std::printf(
          "%12zu %12lld %8s %10.3f %9.3f %9.3f %8lld %10.3f %10.3f %10.3f %9.3f %9.3f %8lld\n",
          static_cast<size_t>(size_b), static_cast<long long>(count), short_name(o.dtype),
          op.mean_us, algbw(op.mean_us), algbw(op.mean_us) * bus, static_cast<long long>(op.wrong),
          op.p50_us, op.p99_us, ip.mean_us, algbw(ip.mean_us), algbw(ip.mean_us) * bus,
          static_cast<long long>(ip.wrong));
      std::fflush(stdout);
      if (csv) {
        std::fprintf(csv, "%zu,%lld,%s,%d,%.3f,%.4f,%.4f,%lld,%.3f,%.3f,%.3f,%.4f,%.4f,%lld\n",
                     static_cast<size_t>(size_b), static_cast<long long>(count),
                     short_name(o.dtype), world, op.mean_us, algbw(op.mean_us),
                     algbw(op.mean_us) * bus, static_cast<long long>(op.wrong), op.p50_us,
                     op.p99_us, ip.mean_us, algbw(ip.mean_us), algbw(ip.mean_us) * bus,
                     static_cast<long long>(ip.wrong));
      }
    }
  }
  if (csv) std::fclose(csv);
  // -J PATH: rank 0 writes PATH; with "%r" in PATH every rank writes its own file (its own
  // #wrong, the common times), so a multi-host run can check every rank.
  const size_t mark = o.json.find("%r");
  if (!o.json.empty() && (rank == 0 || mark != std::string::npos)) {
    std::string path = o.json;
    if (mark != std::string::npos) path.replace(mark, 2, std::to_string(rank));
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    std::ofstream(path) << "{\"rank\":" << rank << ",\"world\":" << world << ",\"host\":\"" << host
                        << "\",\"transport\":\"" << transport_name() << "\",\"results\":" << json
                        << "]}\n";
  }
  if (rank == 0) std::printf("# total #wrong: %lld\n", static_cast<long long>(total_wrong));
  destroy_process_group();
  return total_wrong == 0 ? 0 : 1;
}
