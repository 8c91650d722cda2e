// Everything a training run is told: model shape, data, optimisation, data parallelism, outputs. Parsed from
// the command line with CLI11; every flag can also be set in a TOML file (--config) under the flag's long name.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dptrain/core/dtype.hpp"
#include "dptrain/model/config.hpp"

namespace dptrain {

struct TrainOptions {
  ModelConfig model;
  std::string data = "/usr/share/games/fortunes";
  double val_fraction = 0.1;  // the last 10 % of the tokens are the validation split

  int steps = 200;
  int batch = 16;             // B: global windows per step, shared by all ranks
  double lr = 1e-3;
  double min_lr = 1e-4;       // cosine decay floor
  int warmup = 20;            // linear warm-up steps
  double weight_decay = 0.1;
  double grad_clip = 1.0;     // global-norm clipping; 0 disables
  std::uint64_t seed = 1337;
  bool skip_nonfinite = false;
  int max_skipped = 10;       // with skip_nonfinite: stop after this many non-finite steps in a row

  int eval_every = 50;        // 0: only at the end
  int eval_windows = 32;      // validation windows per evaluation

  // Data parallelism.
  std::string device = "auto";  // auto, cpu or cuda
  std::string attention = "auto";   // --attention: compute/backend.hpp's kAttentionModes
  std::string matmul_epilogues = "fused";  // --matmul-epilogues: fused or composed
  std::string cpu_gemm = "by-cpu";  // the cpu backend's sgemm library (cpu_gemm.hpp, train/cpu_gemm_choice.hpp)
  std::string allreduce = "ring";
  DType grad_dtype = DType::bf16;
  int check_every = 100;      // weight-hash comparison across ranks
  int zero = 0;               // ZeRO stage 0–3
  double bucket_mb = 25;      // gradient unit size in MiB; 0: one unit per block
  std::string overlap = "auto";  // on, off, or auto: both timed on the first steps, the faster kept
  bool no_overlap = false;    // the same as overlap = "off"
  int grad_accum = 1;         // micro-steps per step
  double comm_timeout = 300;  // seconds a collective may take before the job is ended (a stopped rank, a dead link)
  bool nccl_blocking = false;  // GPU ranks: a blocking NCCL communicator (no launch thread per group)

  std::string link;           // α–β link: preset, link.json, or alpha=..,bw=..; empty: calibrate at start-up
  double peak_tflops = 0;     // per-rank peak for MFU; 0: measured by an sgemm probe

  int threads = 0;            // OpenMP threads per rank; 0: cores / ranks on this node

  std::string log;            // JSONL metrics
  std::string trace;          // Chrome trace events of every rank
  std::string save;           // checkpoint directory
  int save_every = 0;         // 0: only at the end
  std::string resume;         // checkpoint directory to continue from
  bool overwrite = false;     // a fresh run may replace the checkpoints already in --save
  int keep_last = 0;          // step folders kept in --save after each save; 0: all
  bool quiet = false;         // no per-step lines
  bool op_times = false;      // time every Backend operation of steps 2… and print the table at the end
};

// Parses argv (and a --config file). Returns nullopt when help was printed. Throws UserError on bad input.
std::optional<TrainOptions> parse_train_options(int argc, char** argv, bool print_help = true);

// Checks ranges and combinations that CLI11 cannot (world size against batch, ...).
void validate(const TrainOptions& options, int world_size);
// Throws UserError when two of --log, --trace, --save and --data name the same path.
void require_distinct_paths(const TrainOptions& o);

}  // namespace dptrain
