// dpbench: collective benchmark in the manner of nccl-tests, launched by mpirun. Sweeps message sizes from -b to
// -e by factor -f, runs an operation with one or all algorithms (ring, tree, native) and prints one fixed-column
// row per size and algorithm: time = the slowest rank's mean per-iteration time, algbw = size / time, busbw =
// algbw times the nccl-tests factor of the operation, #wrong = wrong elements over all ranks (with -c 1).
// --device cuda runs on GPU buffers over NCCL (one GPU per rank; ring and tree from ncclSend/ncclRecv, native is
// NCCL's own) and adds NCCL's estimate of its own collective (ncclGroupSimulateEnd) to every row.
//
//   mpirun -np 4 dpbench --op allreduce --algo all -b 1K -e 64M -f 4 -c 1 --json sweep.json
//   NCCL_ALGO=Ring NCCL_PROTO=Simple mpirun -np 8 dpbench --device cuda -b 1M -e 1G -c 1
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dptrain/comm/collectives.hpp"
#include "dptrain/comm/mpi_transport.hpp"
#include "dptrain/comm/schedule_text.hpp"
#include "dptrain/compute/backend.hpp"
#include "dptrain/core/atomic_file.hpp"
#include "dptrain/core/available_memory.hpp"
#include "dptrain/core/bf16.hpp"
#include "dptrain/core/distinct_paths.hpp"
#include "dptrain/core/error.hpp"
#include "dptrain/core/timer.hpp"
#include "dptrain/cost/fit.hpp"
#include "dptrain/cost/link.hpp"
#include "dptrain/train/cli_checks.hpp"
#include "dptrain/train/mpi_world.hpp"
#include "dptrain/train/run_transport.hpp"
#if DPTRAIN_HAVE_NCCL
#include "dptrain/comm/nccl_transport.hpp"
#endif

namespace dptrain {
namespace {

enum class BenchOp { allreduce, reduce_scatter, all_gather, sendrecv };

constexpr std::string_view kOpNames[] = {"allreduce", "reduce_scatter", "all_gather", "sendrecv"};

std::string_view name_of(BenchOp op) { return kOpNames[static_cast<int>(op)]; }

BenchOp parse_op(const std::string& name) {
  for (int i = 0; i < 4; ++i) {
    if (name == kOpNames[i]) return static_cast<BenchOp>(i);
  }
  fail("--op: unknown operation '{}' (expected allreduce, reduce_scatter, all_gather, sendrecv or all)", name);
}

CollectiveOp collective_of(BenchOp op) {
  switch (op) {
    case BenchOp::reduce_scatter:
      return CollectiveOp::reduce_scatter;
    case BenchOp::all_gather:
      return CollectiveOp::all_gather;
    default:
      return CollectiveOp::all_reduce;
  }
}

// nccl-tests' bus bandwidth: what each link carries, so every algorithm and rank count compare with the link
// speed. All-reduce moves 2(p−1)/p of the array, reduce-scatter and all-gather (p−1)/p of the full array, and a
// neighbour exchange exactly its message.
double busbw_factor(BenchOp op, int p) {
  switch (op) {
    case BenchOp::allreduce:
      return 2.0 * (p - 1) / p;
    case BenchOp::reduce_scatter:
    case BenchOp::all_gather:
      return static_cast<double>(p - 1) / p;
    case BenchOp::sendrecv:
      return 1.0;
  }
  return 1.0;
}

// "8", "1K", "256M", "2G" (binary multiples, as nccl-tests).
std::size_t parse_size(const std::string& text, const char* flag) {
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string suffix = text.substr(digits);
  int shift = -1;
  if (suffix.empty()) shift = 0;
  if (suffix == "K" || suffix == "k") shift = 10;
  if (suffix == "M" || suffix == "m") shift = 20;
  if (suffix == "G" || suffix == "g") shift = 30;
  require(digits > 0 && shift >= 0,
          "{}: bad size '{}' (expected bytes with an optional K, M or G suffix, e.g. 8, 1K, 256M)", flag, text);
  std::size_t number = 0;
  const bool parsed = std::from_chars(text.data(), text.data() + digits, number).ec == std::errc();
  require(parsed && number <= (SIZE_MAX >> shift), "{}: size '{}' does not fit in 64 bits", flag, text);
  require(number > 0, "{}: size must be at least 1 byte, got '{}'", flag, text);
  return number << shift;
}

struct Options {
  std::size_t min_bytes = 0, max_bytes = 0;
  int factor = 2;
  std::size_t step_bytes = 0;       // -i: sizes b, b + i, b + 2i, ... instead of b, b·f, b·f², ...
  BenchOp op = BenchOp::allreduce;  // the operation being measured
  // --op all: the three collectives one after another (what --fit needs to tell γ from β); else {op}.
  std::vector<BenchOp> ops;
  std::vector<Algorithm> algorithms;
  DType dtype = DType::bf16;
  int iters = 20, warmup = 5;
  bool check = true;  // -c 1, as nccl-tests
  std::string json;
  std::string device = "cpu";
  std::size_t ring_piece_bytes = kRingPieceBytes;  // cuda: kNcclRingPieceBytes
  double comm_timeout = 300;  // cuda: seconds an operation may take before NCCL is aborted and the job ended
  bool nccl_blocking = false;  // cuda: a blocking NCCL communicator (NcclSettings::blocking)
  std::string
      fit;  // --fit FILE: least-squares α, β (and γ) per algorithm, the first algorithm's written as link.json
  int schedule_ranks = 0;          // --schedule RANKS: print the schedules over that many ranks, run nothing
  std::size_t schedule_count = 0;  // --schedule-count: their buffer's elements (default 2 per rank)
};

// Returns nullopt after --help (printed by rank 0). Throws UserError on bad input, CLI::ParseError on bad syntax.
std::optional<Options> parse_options(int argc, char** argv, bool print) {
  CLI::App app{"dpbench: collective benchmark (nccl-tests style); run under mpirun", "dpbench"};
  std::string min_bytes = "8", max_bytes = "256M", op = "allreduce", algo = "all", dtype = "bf16", piece = "";
  int check = 1;
  Options options;
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: last wins
  app.add_option("-b,--minbytes", min_bytes, "smallest message in bytes (K, M, G suffixes)")->capture_default_str();
  app.add_option("-e,--maxbytes", max_bytes, "largest message in bytes")->capture_default_str();
  app.add_option("-f,--stepfactor", options.factor, "size multiplier between rows (integer ≥ 2)")
      ->capture_default_str()
      ->transform(dptrain::whole_number<int>(2));
  std::string step_bytes;
  app.add_option("-i,--stepbytes", step_bytes,
                 "size increment between rows in bytes (K, M, G suffixes), instead of -f's factor");
  app.add_option("-o,--op", op, "allreduce, reduce_scatter, all_gather, sendrecv, or all (the three collectives)")
      ->capture_default_str();
  app.add_option("-a,--algo", algo, "ring, tree, native or all (ignored by sendrecv)")->capture_default_str();
  app.add_option("-d,--datatype", dtype, "bf16 or fp32")->capture_default_str();
  app.add_option("-n,--iters", options.iters, "timed iterations per row")
      ->capture_default_str()
      ->transform(dptrain::whole_number<int>(1));
  app.add_option("-w,--warmup_iters", options.warmup, "untimed iterations before them")
      ->capture_default_str()
      ->transform(dptrain::whole_number<int>(0));
  app.add_option("--fit", options.fit,
                 "fit α and β (and γ, the reduction's cost per byte added, with --op all) to the sweep by least "
                 "squares (per algorithm) and write the first algorithm's to this link.json (for dptrain --link)");
  app.add_option("-c,--check", check,
                 "1: verify every row's results and count wrong elements (a wrong one makes the exit code 1); 0: "
                 "do not")
      ->capture_default_str()
      ->transform(dptrain::whole_number<int>());
  app.add_option("--json", options.json, "also write the rows as a JSON array to this file");
  app.add_option("--ring-piece", piece, "ring message size in bytes (K, M, G suffixes; 'chunk' = unpipelined)");
  app.add_option("--device", options.device, "cpu (MPI, host buffers) or cuda (NCCL, GPU buffers)")
      ->capture_default_str();
  app.add_option("--comm-timeout", options.comm_timeout,
                 "cuda: seconds an operation may take before the job is ended on every rank")
      ->capture_default_str()
      ->check(dptrain::finite_number());
  app.add_flag("--nccl-blocking", options.nccl_blocking,
               "cuda: a blocking NCCL communicator, each group launched on the calling thread (default: "
               "non-blocking, NCCL starts a thread per group)")
      ->check(dptrain::true_or_false());
  app.add_option("--schedule", options.schedule_ranks,
                 "print how the collective (-o; -a ring or tree) moves and adds a buffer's elements over this many "
                 "ranks (1 to 16), round by round, and the sums every rank ends with; then exit, sending nothing")
      ->transform(dptrain::whole_number<int>());
  app.add_option("--schedule-count", options.schedule_count,
                 "with --schedule: the buffer's elements (1 to 64; default: 2 per rank)")
      ->transform(dptrain::whole_number<std::size_t>());
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    if (print) std::printf("%s", app.help().c_str());
    return std::nullopt;
  }
  options.min_bytes = parse_size(min_bytes, "-b");
  options.max_bytes = parse_size(max_bytes, "-e");
  require(options.min_bytes <= options.max_bytes, "-b {} is larger than -e {}", min_bytes, max_bytes);
  require(step_bytes.empty() || !app.count("-f"), "-i and -f: give one (a size increment or a size factor)");
  if (!step_bytes.empty()) options.step_bytes = parse_size(step_bytes, "-i");
  if (op == "all") {
    options.ops = {BenchOp::allreduce, BenchOp::reduce_scatter, BenchOp::all_gather};
  } else {
    options.ops = {parse_op(op)};
  }
  options.op = options.ops.front();
  if (algo == "all") {
    options.algorithms = {Algorithm::ring, Algorithm::tree, Algorithm::native};
  } else {
    require(algo == "ring" || algo == "tree" || algo == "native",
            "--algo: unknown algorithm '{}' (expected ring, tree, native or all)", algo);
    options.algorithms = {parse_algorithm(algo, "--algo")};
  }
  if (options.op == BenchOp::sendrecv) options.algorithms = {Algorithm::ring};  // one row: the transport itself
  options.dtype = parse_dtype(dtype, "-d");
  require(options.min_bytes >= element_size(options.dtype), "-b {}: smaller than one {} element ({} bytes)", min_bytes,
          dtype_name(options.dtype), element_size(options.dtype));
  require(!app.count("--json") || !options.json.empty(), "--json: expected a file name, got ''");
  require(!app.count("--fit") || !options.fit.empty(), "--fit: expected a file name, got ''");
  require(options.fit.empty() || options.op != BenchOp::sendrecv,
          "--fit: sendrecv has no collective formula to fit; use --op allreduce, reduce_scatter or all_gather");
  require(options.fit.empty() || options.algorithms.front() != Algorithm::tree ||
              options.ops.front() == BenchOp::allreduce,
          "--fit: the α–β model has a formula for the tree's all-reduce only, not for its {}; fit the tree with "
          "--op allreduce (or all), or fit ring or native",
          op);
  require_distinct_paths({{"--json", options.json}, {"--fit", options.fit}});
  require(check == 0 || check == 1, "-c: expected 0 or 1, got {}", check);
  options.check = check == 1;
  require(options.device == "cpu" || options.device == "cuda", "--device: unknown device '{}' (expected cpu or cuda)",
          options.device);
  require(options.comm_timeout > 0 && options.comm_timeout <= 1e6,
          "--comm-timeout must be in (0, 1e6] seconds, got {}", options.comm_timeout);
  require(!options.nccl_blocking || options.device == "cuda",
          "--nccl-blocking sets the NCCL communicator of --device cuda; --device {} moves data over MPI",
          options.device);
  if (options.device == "cuda") options.ring_piece_bytes = kNcclRingPieceBytes;
  if (piece == "chunk")
    options.ring_piece_bytes = SIZE_MAX;
  else if (app.count("--ring-piece") > 0)
    options.ring_piece_bytes = parse_size(piece, "--ring-piece");
  require(options.ring_piece_bytes >= element_size(options.dtype),
          "--ring-piece {}: smaller than one {} element ({} bytes)", piece, dtype_name(options.dtype),
          element_size(options.dtype));
  require(app.count("--schedule-count") == 0 || app.count("--schedule") > 0,
          "--schedule-count needs --schedule RANKS");
  if (app.count("--schedule") > 0) {
    require(options.schedule_ranks >= 1 && options.schedule_ranks <= kScheduleTextMaxRanks,
            "--schedule: ranks must be from 1 to {}, got {}", kScheduleTextMaxRanks, options.schedule_ranks);
    if (app.count("--schedule-count") == 0) options.schedule_count = 2 * std::size_t(options.schedule_ranks);
    require(options.schedule_count >= 1 && options.schedule_count <= kScheduleTextMaxCount,
            "--schedule-count: elements must be from 1 to {}, got {}", kScheduleTextMaxCount, options.schedule_count);
    require(options.op != BenchOp::sendrecv,
            "--schedule: sendrecv is one message, not a schedule (use -o allreduce, "
            "reduce_scatter, all_gather or all)");
    require(algo != "native",
            "--schedule: native is the library's own collective, with no schedule of ours to "
            "show (use -a ring, tree or all)");
    require(options.json.empty() && options.fit.empty(),
            "--schedule sends nothing, so --{} has no measurement to write (leave one of them out)",
            options.json.empty() ? "fit" : "json");
    std::erase(options.algorithms, Algorithm::native);
  }
  return options;
}

// Check values: integers in [−m, m] times a power of two per element, with m·p ≤ 256, so every partial sum in
// any order is exact even in BF16 and all algorithms must produce the same exact result.
struct Pattern {
  int p;
  int m = std::min(4, 256 / p);

  float value(int rank, std::size_t i) const {
    const int span = 2 * m + 1;
    const int units = static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 13) % span) - m;
    return std::ldexp(static_cast<float>(units), static_cast<int>(i % 5) - 3);
  }
  float sum(std::size_t i) const {
    float total = 0;
    for (int q = 0; q < p; ++q) total += value(q, i);
    return total;
  }
};

// A buffer of `count` elements of a dtype, read and written as float.
struct Elements {
  DType dtype;
  std::vector<std::byte> bytes;
  Elements(DType dtype, std::size_t count) : dtype(dtype), bytes(count * element_size(dtype)) {}
  void set(std::size_t i, float x) {
    if (dtype == DType::f32)
      reinterpret_cast<float*>(bytes.data())[i] = x;
    else
      reinterpret_cast<bf16*>(bytes.data())[i] = to_bf16(x);
  }
  float get(std::size_t i) const {
    return dtype == DType::f32 ? reinterpret_cast<const float*>(bytes.data())[i]
                               : to_float(reinterpret_cast<const bf16*>(bytes.data())[i]);
  }
};

struct BenchResult {
  BenchOp op;
  std::string algo;
  DType dtype;
  std::size_t size, count;
  double time_us, algbw, busbw;
  std::optional<long> wrong;               // nullopt without -c 1
  std::optional<double> nccl_estimate_us;  // --device cuda: NCCL's estimate of its own collective of this size
  int ranks;
};

// Where the benchmark runs: the transport, the memory its buffers live in and how it adds. On the cpu, MPI on host
// buffers; on cuda, NCCL on the rank's GPU, issuing on a stream of its own.
struct Bench {
  std::unique_ptr<Device> device;  // cuda only
  Stream stream;
  std::unique_ptr<Transport> transport;
  Memory* memory = &host_memory();
  ReduceAdd reduce_add = host_reduce_add;
  std::string transport_name = "MPI";
  // NCCL's own estimate of a native collective on a buffer, in seconds (ncclGroupSimulateEnd); empty on the cpu.
  std::function<std::optional<double>(CollectiveOp, std::size_t, DType, void*)> estimate;

  ~Bench() {
    transport.reset();
    if (device) device->destroy(stream);
  }
};

// This rank's place on its node (and, for cuda, its GPU).
Placement local_placement() {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  const DeviceGroup group = device_group(node);  // the node's ranks that see the same GPUs
  MPI_Comm_free(&node);
  return placement_from_environment(group.rank, group.size);
}

// Why this rank cannot run on `device` ("" when it can): no CUDA in the build, no usable GPU, too few GPUs, no NCCL.
std::string device_unavailable(const std::string& device, Placement placement) {
  if (device == "cpu") return "";
  if (std::string why = backend_unavailable("cuda", placement); !why.empty()) return why;
  if (std::string why = multi_rank_unsupported("cuda"); !why.empty()) return "--device cuda: " + why;
  return "";
}

std::unique_ptr<Bench> make_bench(const Options& options, Placement placement) {
  auto bench = std::make_unique<Bench>();
  if (options.device == "cpu") {
    bench->transport = std::make_unique<MpiTransport>(MPI_COMM_WORLD);
    return bench;
  }
#if DPTRAIN_HAVE_NCCL
  bench->device = make_cuda_device(placement.gpu());
  bench->stream = bench->device->create_stream();
  auto nccl = std::make_unique<NcclTransport>(
      MPI_COMM_WORLD, placement.gpu(), static_cast<CUstream_st*>(bench->stream.handle),
      NcclSettings{.timeout_s = options.comm_timeout, .blocking = options.nccl_blocking});
  bench->reduce_add = nccl->reduce_add();
  bench->estimate = [transport = nccl.get()](CollectiveOp op, std::size_t count, DType dtype, void* data) {
    return transport->simulated_seconds(op, count, dtype, data);
  };
  bench->transport_name = nccl->name();
  bench->memory = bench->device.get();
  bench->transport = std::move(nccl);
#else
  (void)placement;
#endif
  return bench;
}

// One operation on `data` (and `incoming` for sendrecv), buffers in the bench's memory; what is timed.
class Runner {
 public:
  Runner(const Options& options, Bench& bench, Algorithm algo)
      : options_(options),
        transport_(*bench.transport),
        collectives_(make_collectives(algo, transport_, bench.reduce_add, *bench.memory, options.ring_piece_bytes)) {}

  void run_once(void* data, void* incoming, std::size_t count) {
    const std::size_t bytes = count * element_size(options_.dtype);
    if (options_.op != BenchOp::sendrecv) {
      collectives_->run(collective_of(options_.op), data, count, options_.dtype);
      collectives_->log().clear();  // the benchmark times itself; keep the log from growing
      return;
    }
    const int p = transport_.size(), r = transport_.rank();
    Request requests[2] = {transport_.irecv((r - 1 + p) % p, incoming, bytes),
                           transport_.isend((r + 1) % p, data, bytes)};
    transport_.wait_all(requests);
  }

  // Fills the inputs with the check pattern: all-gather has only the own chunk valid, the rest a sentinel.
  void fill(Elements& data, std::size_t count) const {
    const int p = transport_.size(), r = transport_.rank();
    const Pattern pattern{p};
    const std::size_t own_begin = chunk_begin(count, p, r), own_end = chunk_begin(count, p, r + 1);
    for (std::size_t i = 0; i < count; ++i) {
      const bool own = i >= own_begin && i < own_end;
      data.set(i, options_.op == BenchOp::all_gather && !own ? 12345.0f : pattern.value(r, i));
    }
  }

  // Wrong elements on this rank after run_once on filled inputs.
  long wrong(const Elements& data, const Elements& incoming, std::size_t count) const {
    const int p = transport_.size(), r = transport_.rank();
    const Pattern pattern{p};
    long wrong = 0;
    switch (options_.op) {
      case BenchOp::allreduce:
        for (std::size_t i = 0; i < count; ++i) wrong += data.get(i) != pattern.sum(i);
        break;
      case BenchOp::reduce_scatter:
        for (std::size_t i = chunk_begin(count, p, r); i < chunk_begin(count, p, r + 1); ++i) {
          wrong += data.get(i) != pattern.sum(i);
        }
        break;
      case BenchOp::all_gather:
        for (int q = 0; q < p; ++q) {
          for (std::size_t i = chunk_begin(count, p, q); i < chunk_begin(count, p, q + 1); ++i) {
            wrong += data.get(i) != pattern.value(q, i);
          }
        }
        break;
      case BenchOp::sendrecv:
        for (std::size_t i = 0; i < count; ++i) wrong += incoming.get(i) != pattern.value((r - 1 + p) % p, i);
        break;
    }
    return wrong;
  }

 private:
  const Options& options_;
  Transport& transport_;
  std::unique_ptr<Collectives> collectives_;
};

// Elements of a row of `bytes`. Reduce-scatter and all-gather round up to a multiple of the rank count, as
// native requires (every algorithm, so the rows of one size compare the same call); the size column says so.
std::size_t row_count(const Options& options, std::size_t bytes, int p) {
  const std::size_t count = bytes / element_size(options.dtype);
  if (options.op != BenchOp::reduce_scatter && options.op != BenchOp::all_gather) return count;
  const auto ranks = static_cast<std::size_t>(p);
  return (count + ranks - 1) / ranks * ranks;
}

BenchResult measure(const Options& options, Bench& bench, Algorithm algo, std::size_t bytes) {
  const int p = bench.transport->size();
  const std::size_t count = row_count(options, bytes, p);
  const std::size_t size = count * element_size(options.dtype);
  Runner runner(options, bench, algo);
  Elements host(options.dtype, count), incoming(options.dtype, count);
  Buffer data(*bench.memory, std::max<std::size_t>(size, 1)), received(*bench.memory, std::max<std::size_t>(size, 1));
  runner.fill(host, count);
  bench.memory->upload(data.data(), host.bytes.data(), size);
  for (int i = 0; i < options.warmup; ++i) runner.run_once(data.data(), received.data(), count);
  MPI_Barrier(MPI_COMM_WORLD);
  const Stopwatch stopwatch;
  for (int i = 0; i < options.iters; ++i) runner.run_once(data.data(), received.data(), count);
  double seconds = stopwatch.seconds() / options.iters;
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

  BenchResult result{.op = options.op,
                     .algo = options.op == BenchOp::sendrecv ? "p2p" : std::string(algorithm_name(algo)),
                     .dtype = options.dtype,
                     .size = size,
                     .count = count,
                     .time_us = 1e6 * seconds,
                     .algbw = static_cast<double>(size) / seconds / 1e9,
                     .busbw = 0,
                     .wrong = std::nullopt,
                     .nccl_estimate_us = std::nullopt,
                     .ranks = p};
  result.busbw = result.algbw * busbw_factor(options.op, p);
  if (bench.estimate && options.op != BenchOp::sendrecv && count > 0)
    if (const auto seconds = bench.estimate(collective_of(options.op), count, options.dtype, data.data()))
      result.nccl_estimate_us = 1e6 * *seconds;
  if (options.check) {
    runner.fill(host, count);
    bench.memory->upload(data.data(), host.bytes.data(), size);
    runner.run_once(data.data(), received.data(), count);
    bench.memory->download(host.bytes.data(), data.data(), size);
    bench.memory->download(incoming.bytes.data(), received.data(), size);
    long wrong = runner.wrong(host, incoming, count);
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    result.wrong = wrong;
  }
  return result;
}

// NCCL's choices that decide what native runs: the benchmark's baseline is stated, not implied.
std::string nccl_settings() {
  std::string settings;
  for (const char* name : {"NCCL_ALGO", "NCCL_PROTO", "NCCL_HOSTID", "NCCL_MAX_CTAS"}) {
    const char* value = std::getenv(name);
    settings += fmt::format(", {}={}", name, value ? value : "(NCCL's choice)");
  }
  return settings;
}

void print_header(const Options& options, const Bench& bench, int ranks) {
  std::printf("# dpbench: op %s, %d ranks, type %s, iters %d, warm-up %d, check %s\n",
              std::string(name_of(options.op)).c_str(), ranks, std::string(dtype_name(options.dtype)).c_str(),
              options.iters, options.warmup, options.check ? "on" : "off");
  std::printf("# device %s, transport %s%s, ring pieces of %s\n", options.device.c_str(),
              bench.transport_name.c_str(), bench.estimate ? nccl_settings().c_str() : "",
              options.ring_piece_bytes == SIZE_MAX ? "whole chunks"
                                                   : format_binary_bytes(double(options.ring_piece_bytes)).c_str());
  if (bench.estimate)
    std::printf("# nccl-est: NCCL's own estimate of its native collective of that size (ncclGroupSimulateEnd)\n");
  if (options.op == BenchOp::reduce_scatter || options.op == BenchOp::all_gather) {
    std::printf("# counts rounded up to a multiple of %d ranks (native needs equal chunks)\n", ranks);
  }
  std::printf("# time: slowest rank's mean per iteration; busbw = algbw x %s\n#\n",
              options.op == BenchOp::allreduce  ? "2(p-1)/p"
              : options.op == BenchOp::sendrecv ? "1"
                                                : "(p-1)/p");
  std::printf("%15s %12s %6s %7s %12s %12s %12s %8s%s\n", "# size(B)", "count", "type", "algo", "time(us)",
              "algbw(GB/s)", "busbw(GB/s)", "#wrong",
              bench.estimate ? fmt::format(" {:>14}", "nccl-est(us)").c_str() : "");
}

// with_estimate: the header has the nccl-est column (a row without an estimate shows N/A there).
void print_row(const BenchResult& r, bool with_estimate) {
  const std::string wrong = r.wrong ? std::to_string(*r.wrong) : "N/A";
  const std::string estimate = r.nccl_estimate_us ? fmt::format(" {:14.2f}", *r.nccl_estimate_us)
                               : with_estimate    ? fmt::format(" {:>14}", "N/A")
                                                  : "";
  std::printf("%15zu %12zu %6s %7s %12.2f %12.3f %12.3f %8s%s\n", r.size, r.count,
              std::string(dtype_name(r.dtype)).c_str(), r.algo.c_str(), r.time_us, r.algbw, r.busbw, wrong.c_str(),
              estimate.c_str());
  std::fflush(stdout);
}

// After an operation's rows, as nccl-tests ends its table: the wrong elements of its rows (with -c 1) and each
// algorithm's bus bandwidth averaged over the rows.
void print_footer(const std::vector<BenchResult>& rows, bool checked) {
  long wrong = 0;
  std::vector<std::pair<std::string, std::vector<double>>> busbw;  // per algorithm, in the rows' order
  for (const BenchResult& r : rows) {
    wrong += r.wrong.value_or(0);
    auto it = std::find_if(busbw.begin(), busbw.end(), [&](const auto& a) { return a.first == r.algo; });
    if (it == busbw.end()) it = busbw.insert(busbw.end(), {r.algo, {}});
    it->second.push_back(r.busbw);
  }
  if (checked)
    std::printf("# Out of bounds values : %ld %s\n", wrong, wrong == 0 ? "OK" : "FAILED");
  else
    std::printf("# Out of bounds values : not checked (-c 0)\n");
  std::vector<std::string> means;
  for (const auto& [algo, values] : busbw)
    means.push_back(fmt::format("{} {:.3f}", algo,
                                std::accumulate(values.begin(), values.end(), 0.0) / double(values.size())));
  std::printf("# Avg bus bandwidth    : %s GB/s\n#\n", fmt::format("{}", fmt::join(means, ", ")).c_str());
  std::fflush(stdout);
}

// The α–β model of one benchmark row: which collective formula (docs/systems-model.md) its time follows; none for
// the tree's reduce-scatter and all-gather (the model has no formula for them: their rows are left out of its fit).
std::optional<cost::Collective> modelled_collective(BenchOp op, const std::string& algo) {
  const bool tree = algo == "tree";
  switch (op) {
    case BenchOp::allreduce:
      return tree ? cost::Collective::tree_all_reduce : cost::Collective::ring_all_reduce;
    case BenchOp::reduce_scatter:
      return tree ? std::nullopt : std::optional(cost::Collective::ring_reduce_scatter);
    case BenchOp::all_gather:
      return tree ? std::nullopt : std::optional(cost::Collective::ring_all_gather);
    case BenchOp::sendrecv:
      break;
  }
  fail("--fit: sendrecv has no collective formula to fit; use --op allreduce, reduce_scatter or all_gather");
}

// Fits α, β and, where the sweep mixes collectives that add with one that does not, γ per algorithm; prints them
// with the fit's residuals, and writes the first algorithm's link.
void fit_links(const std::string& path, const std::vector<BenchResult>& results) {
  nlohmann::json fits = nlohmann::json::array();
  std::vector<std::string> algorithms;
  for (const BenchResult& r : results)
    if (std::find(algorithms.begin(), algorithms.end(), r.algo) == algorithms.end()) algorithms.push_back(r.algo);
  for (const std::string& algo : algorithms) {
    std::vector<cost::TimingSample> samples;
    bool rows_left_out = false;
    for (const BenchResult& r : results)
      if (r.algo == algo && r.size > 0) {
        if (const auto collective = modelled_collective(r.op, algo))
          samples.push_back({*collective, r.ranks, double(r.size), r.time_us * 1e-6});
        else
          rows_left_out = true;
      }
    cost::LinkGammaFit fitted;
    try {
      require(!samples.empty() || !rows_left_out, "the model has no formula for the tree's {}",
              name_of(results.front().op));
      fitted = cost::fit_alpha_beta_gamma(samples, cost::FitWeighting::relative);
    } catch (const UserError& e) {
      // The first algorithm's fit is the link written: without it there is no result. The others are reported.
      if (fits.empty()) fail("--fit: {}: {}", algo, e.what());
      std::printf("# fit %-7s none: %s\n", algo.c_str(), e.what());
      continue;
    }
    const cost::LinkFit& fit = fitted.fit;
    std::printf("# fit %-7s %s%s  (%d rows%s, max |relative residual| %.1f%%)\n", algo.c_str(),
                cost::describe(fit.link).c_str(),
                fitted.gamma_fitted ? (fit.link.gamma_s_per_byte > 0 ? "" : ", γ = 0") : ", γ not determined",
                fit.samples,
                rows_left_out ? " of its all-reduce: the model has no tree reduce-scatter or all-gather" : "",
                100 * fit.max_relative_residual);
    // A link that misses a measured row by this much describes the sweep poorly: said, and written all the same.
    constexpr double kPoorFit = 0.25;
    if (fit.max_relative_residual > kPoorFit)
      std::printf(
          "# fit %-7s warning: a row's measured time and the fitted α + n/B differ by %.0f%% of the measured "
          "(more than %.0f%%)%s: noisy timings, or sizes where another cost dominates; the link is a poor "
          "description of this sweep\n",
          algo.c_str(), 100 * fit.max_relative_residual, 100 * kPoorFit,
          fit.link.alpha_s == 0 ? ", and α was held at 0 (the best fit's was negative)" : "");
    fits.push_back({{"algo", algo},
                    {"alpha_s", fit.link.alpha_s},
                    {"bandwidth_Bps", fit.link.bandwidth_Bps},
                    {"samples", fit.samples},
                    {"max_relative_residual", fit.max_relative_residual}});
    if (fitted.gamma_fitted) fits.back()["gamma_s_per_byte"] = fit.link.gamma_s_per_byte;
  }
  nlohmann::json link = {
      {"alpha_s", fits[0]["alpha_s"]},
      {"bandwidth_Bps", fits[0]["bandwidth_Bps"]},
      {"note", fmt::format("dpbench --fit, {} on {} ranks", std::string(fits[0]["algo"]), results.front().ranks)},
      {"fits", fits}};
  if (fits[0].contains("gamma_s_per_byte")) link["gamma_s_per_byte"] = fits[0]["gamma_s_per_byte"];
  write_file_atomically(path, link.dump(2) + "\n");
  std::printf("# wrote %s\n", path.c_str());
}

void write_json(const std::string& path, const std::vector<BenchResult>& results) {
  nlohmann::json rows = nlohmann::json::array();
  for (const BenchResult& r : results) {
    rows.push_back(
        {{"op", name_of(r.op)},
         {"algo", r.algo},
         {"type", dtype_name(r.dtype)},
         {"size", r.size},
         {"count", r.count},
         {"time_us", r.time_us},
         {"algbw", r.algbw},
         {"busbw", r.busbw},
         {"wrong", r.wrong ? nlohmann::json(*r.wrong) : nlohmann::json(nullptr)},
         {"nccl_estimate_us", r.nccl_estimate_us ? nlohmann::json(*r.nccl_estimate_us) : nlohmann::json(nullptr)},
         {"ranks", r.ranks}});
  }
  write_file_atomically(path, rows.dump(2) + "\n");
}

// Every rank holds a message and a receive buffer of the largest size, and the collective's scratch may take as
// much again: a sweep that cannot fit is refused before it starts, rather than by the allocator (or the kernel's
// out-of-memory killer) in its middle. On a GPU the ranks placed on it share its free memory, on the cpu the node's
// ranks share the host's. Collective: every rank returns the same answer.
// Per rank: the message, a receive buffer and the collective's scratch (a few pieces on the ring; on the tree up
// to two whole messages, a node's children's vectors added in one round).
bool memory_fits(const Options& options, const Bench& bench, Placement placement, int rank) {
  const std::size_t max_bytes = options.max_bytes;
  const bool tree = std::ranges::find(options.algorithms, Algorithm::tree) != options.algorithms.end();
  const int sharing = bench.device ? placement.ranks_per_gpu : placement.local_size;
  const double per_rank = (tree ? 4.0 : 3.0) * double(max_bytes), needed = per_rank * sharing;
  const double available = bench.device ? double(bench.device->memory_free()) : available_memory_bytes();
  int fits = needed <= available ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &fits, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!fits && rank == 0)
    std::fprintf(stderr,
                 "dpbench: -e: messages of up to %s need about %s per rank (the message, a receive buffer and the "
                 "collective's scratch%s) × %d rank(s) on this %s = %s, but %s is available: lower -e (and -b)\n",
                 format_binary_bytes(double(max_bytes)).c_str(), format_binary_bytes(per_rank).c_str(),
                 tree ? ": two messages on the tree" : "", sharing,
                 bench.device ? "GPU" : "host", format_binary_bytes(needed).c_str(),
                 format_binary_bytes(available).c_str());
  return fits == 1;
}

// Whether every rank can run on the device asked for; otherwise one line (rank 0's, or each failing rank's when
// only some fail) and false on every rank.
// Whether no rank found a problem in what it alone sees (its device, its environment), on every rank. Where some
// did, each of them says so (`dpbench: rank R: ...`), or rank 0 once for all where every rank did. Collective.
bool agreed_everywhere(const std::string& why, int rank) {
  int failed = why.empty() ? 0 : 1, failed_ranks = 0, size = 1;
  MPI_Allreduce(&failed, &failed_ranks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (failed && failed_ranks == size && rank == 0) std::fprintf(stderr, "dpbench: %s\n", why.c_str());
  if (failed && failed_ranks < size) std::fprintf(stderr, "dpbench: rank %d: %s\n", rank, why.c_str());
  return failed_ranks == 0;
}

// The message sizes of the sweep: -b, -b·f, -b·f², … up to -e.
std::vector<std::size_t> sweep_sizes(const Options& options) {
  std::vector<std::size_t> sizes;
  for (std::size_t bytes = options.min_bytes; bytes <= options.max_bytes;) {
    sizes.push_back(bytes);
    // The next size would overflow or pass -e: the last row.
    if (options.step_bytes > 0) {
      if (bytes > options.max_bytes - options.step_bytes) break;
      bytes += options.step_bytes;
    } else {
      if (bytes > options.max_bytes / options.factor) break;
      bytes *= options.factor;
    }
  }
  return sizes;
}

// Runs `problem` on rank 0 (what only rank 0 does: it writes the files) and returns on every rank whether it
// found none; rank 0 prints the problem. Every rank then exits alike: none hangs, none exits 0 alone.
bool agreed_on_first(int rank, const std::function<std::string()>& problem) {
  const std::string found = rank == 0 ? problem() : "";
  int ok = found.empty() ? 1 : 0;
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!ok && rank == 0) std::fprintf(stderr, "dpbench: %s\n", found.c_str());
  return ok == 1;
}

// Whether every rank was started with rank 0's arguments (an MPMD launch may give them others): compared as text
// before anything is parsed, so that every rank then parses the same text, fails alike, and none waits in a
// collective another never enters. Where they differ, rank 0 names the first rank that differs and both argument
// lists. Collective.
bool same_arguments_everywhere(int argc, char** argv, int rank) {
  std::string joined;  // the arguments as a shell would show them
  for (int i = 1; i < argc; ++i) joined += (i > 1 ? " " : "") + std::string(argv[i]);
  std::string first = joined;
  int length = int(first.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  first.resize(std::size_t(length));
  MPI_Bcast(first.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const int mine = first == joined ? ranks : rank;  // `ranks` where they agree with rank 0
  int differing = ranks;
  MPI_Allreduce(&mine, &differing, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (differing == ranks) return true;
  if (rank == differing) {
    length = int(joined.size());
    MPI_Send(&length, 1, MPI_INT, 0, 0, MPI_COMM_WORLD);
    MPI_Send(joined.data(), length, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
  } else if (rank == 0) {
    std::string theirs;
    MPI_Recv(&length, 1, MPI_INT, differing, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    theirs.resize(std::size_t(length));
    MPI_Recv(theirs.data(), length, MPI_CHAR, differing, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    std::fprintf(stderr,
                 "dpbench: rank %d was started with other arguments than rank 0 ('%s' against '%s'): give every "
                 "rank the same, in the same order\n",
                 differing, theirs.c_str(), joined.c_str());
  }
  return false;
}

int run(int argc, char** argv, int rank) {
  if (!same_arguments_everywhere(argc, argv, rank)) return kExitBadInput;
  std::optional<Options> options;
  try {
    options = parse_options(argc, argv, rank == 0);
  } catch (const UserError& e) {  // every rank parses the same argv, so every rank gets here: no one hangs
    if (rank == 0) std::fprintf(stderr, "dpbench: %s\n", e.what());
    return kExitBadInput;
  } catch (const CLI::ParseError& e) {
    if (rank == 0) std::fprintf(stderr, "dpbench: %s\n", e.what());
    return kExitBadInput;
  }
  if (!options) return 0;
  if (options->schedule_ranks > 0) {  // words only: no buffer, no transport
    if (rank == 0)
      for (BenchOp op : options->ops)
        for (Algorithm algo : options->algorithms)
          std::printf(
              "%s\n",
              schedule_text(algo, collective_of(op), options->schedule_ranks, options->schedule_count).c_str());
    return 0;
  }
  // Only rank 0 writes the files: find out now, on every rank, whether it can, rather than after the sweep.
  const auto outputs_writable = [&options] {
    for (const auto& [flag, path] : {std::pair{"--json", options->json}, std::pair{"--fit", options->fit}})
      if (const std::string why = path.empty() ? "" : atomic_write_problem(path); !why.empty())
        return fmt::format("{}: cannot write '{}': {}", flag, path, why);
    return std::string();
  };
  if (!agreed_on_first(rank, outputs_writable)) return kExitBadInput;
  const std::vector<std::size_t> sizes = sweep_sizes(*options);
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  // The rows of the first operation (the one the fit needs) after reduce-scatter's and all-gather's rounding.
  std::set<std::size_t> fitted_counts;
  for (std::size_t bytes : sizes) fitted_counts.insert(row_count(*options, bytes, ranks));
  if (!options->fit.empty() && (ranks < 2 || fitted_counts.size() < 2)) {  // known on every rank alike
    const std::string why =
        ranks < 2 ? "one rank sends nothing over a link, so α and B are undetermined: run on 2 ranks or more"
        : sizes.size() < 2
            ? fmt::format("the sweep has one message size ({} bytes); a fit needs two or more (-b below -e)",
                          sizes.front())
            : fmt::format("the sweep's sizes are one row once {} rounds them up to whole chunks of {} elements; a "
                          "fit needs two or more (raise -e)",
                          name_of(options->op), ranks);
    if (rank == 0) std::fprintf(stderr, "dpbench: --fit: %s\n", why.c_str());
    return kExitBadInput;
  }

  Placement placement;
  try {
    placement = local_placement();
  } catch (const UserError& e) {  // the environment, the same on every rank
    if (rank == 0) std::fprintf(stderr, "dpbench: %s\n", e.what());
    return kExitBadInput;
  }
  if (!agreed_everywhere(device_unavailable(options->device, placement), rank)) return kExitBadInput;
  // The transport's variables, which each rank reads from its own environment.
  if (!agreed_everywhere(transport_environment_problem(options->device == "cuda"), rank)) return kExitBadInput;
  const std::unique_ptr<Bench> bench = make_bench(*options, placement);
  if (!memory_fits(*options, *bench, placement, rank)) return kExitBadInput;

  std::vector<BenchResult> results;
  for (BenchOp op : options->ops) {
    Options sweep = *options;
    sweep.op = op;
    if (rank == 0) print_header(sweep, *bench, bench->transport->size());
    std::size_t previous_count = 0;
    const std::size_t first_row = results.size();
    for (std::size_t bytes : sizes) {
      // Reduce-scatter and all-gather round sizes up to whole chunks: a size that rounds onto the last row's is
      // that row again.
      const std::size_t count = row_count(sweep, bytes, ranks);
      if (count == previous_count) continue;
      previous_count = count;
      for (Algorithm algo : sweep.algorithms) {
        results.push_back(measure(sweep, *bench, algo, bytes));
        if (rank == 0) print_row(results.back(), bool(bench->estimate));
      }
    }
    if (rank == 0)
      print_footer(std::vector<BenchResult>(results.begin() + std::ptrdiff_t(first_row), results.end()),
                   options->check);
  }
  // After the last collective, rank 0 writes; a fit that cannot be made (too few or too noisy sizes) ends every
  // rank with exit 2.
  const auto write_results = [&] {
    try {
      if (!options->json.empty()) write_json(options->json, results);
      if (!options->fit.empty()) fit_links(options->fit, results);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  if (!agreed_on_first(rank, write_results)) return kExitBadInput;
  // Every rank holds the counts (summed over ranks): wrong results end every rank with exit 1, a failure of the
  // collectives, as nccl-tests ends with EXIT_FAILURE.
  long wrong = 0, wrong_rows = 0;
  for (const BenchResult& r : results) {
    wrong += r.wrong.value_or(0);
    wrong_rows += r.wrong.value_or(0) > 0;
  }
  if (wrong == 0) return 0;
  if (rank == 0)
    std::fprintf(stderr,
                 "dpbench: %ld wrong element(s) in %ld of %zu rows (-c 1): the collectives' results are wrong\n",
                 wrong, wrong_rows, results.size());
  return 1;
}

}  // namespace
}  // namespace dptrain

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int code = 0;
  try {
    code = dptrain::run(argc, argv, rank);
  } catch (const std::bad_alloc&) {  // what memory_fits did not foresee: the sizes asked for are too large
    std::fprintf(stderr, "dpbench: rank %d: out of memory (%s available on this host): lower -e\n", rank,
                 dptrain::format_binary_bytes(dptrain::available_memory_bytes()).c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, dptrain::kExitBadInput);
  } catch (const std::exception& e) {  // a failure on some ranks only: end the whole job rather than hang
    std::fprintf(stderr, "dpbench: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    // The transport's deadline ends the job with the exit of dptrain's --comm-timeout.
    MPI_Abort(MPI_COMM_WORLD, dynamic_cast<const dptrain::CommTimeout*>(&e) ? dptrain::kExitCommunication : 1);
  }
  MPI_Finalize();
  return code;
}
