// Command line and TOML config of dptrain (CLI11 reads both).
#include "dptrain/train/options.hpp"

#include <CLI/CLI.hpp>

#include <iostream>

#include "dptrain/core/error.hpp"

namespace dptrain {

std::optional<TrainOptions> parse_train_options(int argc, char** argv, bool print_help) {
  TrainOptions o;
  CLI::App app{"dptrain: data-parallel training of a GPT-2-style model (run under mpirun for several ranks)",
               "dptrain"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag wins
  app.set_config("--config", "", "TOML file whose keys are the long flag names (flags given later win)");
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.get_formatter()->column_width(34);

  auto& m = o.model;
  app.add_option("--vocab", m.vocab, "Vocabulary size V (256 = bytes)")->capture_default_str();
  app.add_option("--seq", m.seq, "Context length Q (tokens per window)")->capture_default_str();
  app.add_option("--layers", m.layers, "Transformer blocks L")->capture_default_str();
  app.add_option("--width", m.width, "Model width H")->capture_default_str();
  app.add_option("--heads", m.heads, "Attention heads (must divide H)")->capture_default_str();

  app.add_option("--data", o.data, "Text file, directory of text files, or llm.c token shard(s)")
      ->capture_default_str();
  app.add_option("--val-fraction", o.val_fraction, "Fraction of tokens held out for validation (the end)")
      ->capture_default_str();
  app.add_option("--steps", o.steps, "Optimizer steps")->capture_default_str();
  app.add_option("--batch", o.batch, "Global batch: windows per step, shared by all ranks")->capture_default_str();
  app.add_option("--lr", o.lr, "Peak learning rate")->capture_default_str();
  app.add_option("--min-lr", o.min_lr, "Learning rate at the end of the cosine decay")->capture_default_str();
  app.add_option("--warmup", o.warmup, "Linear warm-up steps")->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "AdamW decoupled weight decay (2-D weights only)")
      ->capture_default_str();
  app.add_option("--grad-clip", o.grad_clip, "Clip the global gradient norm to this (0: off)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of initialisation and batch sampling")->capture_default_str();
  app.add_flag("--skip-nonfinite", o.skip_nonfinite, "Skip a step whose loss or gradient norm is NaN/Inf");
  app.add_option("--eval-every", o.eval_every, "Validation loss every N steps (0: only at the end)")
      ->capture_default_str();
  app.add_option("--eval-windows", o.eval_windows, "Validation windows per evaluation")->capture_default_str();

  app.add_option("--allreduce", o.allreduce, "Gradient all-reduce: ring, tree or native (the MPI library's)")
      ->capture_default_str();
  std::string grad_dtype = "bf16";
  app.add_option("--grad-dtype", grad_dtype, "Gradient and wire type: bf16 or fp32")->capture_default_str();
  app.add_option("--check-every", o.check_every, "Compare a hash of the weights across ranks every N steps")
      ->capture_default_str();
  app.add_option("--zero", o.zero, "ZeRO stage: 0 (replicated), 1 (optimizer sharded), 2 (+ gradients), 3 (+ weights)")
      ->capture_default_str();
  app.add_option("--bucket-mb", o.bucket_mb,
                 "Gradient unit (bucket) size in MiB: consecutive blocks share a collective up to this; 0: one per block")
      ->capture_default_str();
  app.add_flag("--no-overlap", o.no_overlap, "Issue the gradient collectives after backward ends (for comparison)");
  app.add_option("--grad-accum", o.grad_accum, "Micro-steps per step (gradient accumulation); the batch stays --batch")
      ->capture_default_str();
  app.add_option("--link", o.link,
                 "α–β link of the model: nvlink-h100, ib-400g, wan-100g, a link.json, or alpha=5us,bw=450GB/s "
                 "(default: calibrated at start-up)");
  app.add_option("--peak-tflops", o.peak_tflops, "Per-rank peak TFLOP/s for MFU (0: measured by an sgemm probe)")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "OpenMP threads per rank (0: cores / ranks on the node)")
      ->capture_default_str();

  app.add_option("--log", o.log, "Write one JSON object per step (and a summary) to this JSONL file");
  app.add_option("--trace", o.trace, "Write Chrome trace events of every rank to this JSON file (Perfetto)");
  app.add_option("--save", o.save, "Checkpoint directory (written at the end and every --save-every steps)");
  app.add_option("--save-every", o.save_every, "Checkpoint every N steps (0: only at the end)")
      ->capture_default_str();
  app.add_option("--resume", o.resume, "Continue from the latest checkpoint in this directory");
  app.add_flag("--quiet", o.quiet, "No per-step lines");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    if (print_help) std::cout << app.help();
    return std::nullopt;
  } catch (const CLI::ConfigError& e) {
    fail("--config: {} (keys are the long flag names, e.g. `layers = 4`)", e.what());
  } catch (const CLI::ParseError& e) {
    fail("{}", e.what());
  }
  require(grad_dtype == "bf16" || grad_dtype == "fp32", "--grad-dtype: unknown type '{}' (expected bf16 or fp32)",
          grad_dtype);
  o.grad_dtype = grad_dtype == "bf16" ? DType::bf16 : DType::f32;
  return o;
}

void validate(const TrainOptions& o, int world_size) {
  validate(o.model);
  require(o.steps >= 1, "--steps must be at least 1, got {}", o.steps);
  require(o.batch >= 1, "--batch must be at least 1, got {}", o.batch);
  require(o.batch % world_size == 0,
          "--batch {} is not divisible by the number of ranks {}: every rank needs the same number of windows",
          o.batch, world_size);
  require(o.lr > 0 && o.lr < 10, "--lr must be in (0, 10), got {}", o.lr);
  require(o.min_lr >= 0 && o.min_lr <= o.lr, "--min-lr must be in [0, --lr], got {}", o.min_lr);
  require(o.warmup >= 0, "--warmup must be non-negative, got {}", o.warmup);
  require(o.weight_decay >= 0, "--weight-decay must be non-negative, got {}", o.weight_decay);
  require(o.grad_clip >= 0, "--grad-clip must be non-negative, got {}", o.grad_clip);
  require(o.val_fraction > 0 && o.val_fraction < 1, "--val-fraction must be in (0, 1), got {}", o.val_fraction);
  require(o.eval_every >= 0, "--eval-every must be non-negative, got {}", o.eval_every);
  require(o.eval_windows >= 1, "--eval-windows must be at least 1, got {}", o.eval_windows);
  require(o.check_every >= 0, "--check-every must be non-negative, got {}", o.check_every);
  require(o.save_every >= 0, "--save-every must be non-negative, got {}", o.save_every);
  require(o.peak_tflops >= 0, "--peak-tflops must be non-negative, got {}", o.peak_tflops);
  require(o.threads >= 0, "--threads must be non-negative, got {}", o.threads);
  require(o.save_every == 0 || !o.save.empty(), "--save-every {} needs --save DIR", o.save_every);
  require(o.zero >= 0 && o.zero <= 3, "--zero: stage {} does not exist (expected 0, 1, 2 or 3)", o.zero);
  require(o.bucket_mb >= 0 && o.bucket_mb <= 1e6, "--bucket-mb must be in [0, 1e6], got {}", o.bucket_mb);
  require(o.grad_accum >= 1, "--grad-accum must be at least 1, got {}", o.grad_accum);
  require(o.batch % (world_size * o.grad_accum) == 0,
          "--batch {} is not divisible by ranks × --grad-accum = {} × {}: every micro-step needs the same number of "
          "windows",
          o.batch, world_size, o.grad_accum);
  require(o.allreduce == "ring" || o.allreduce == "tree" || o.allreduce == "native",
          "--allreduce: unknown algorithm '{}' (expected ring, tree or native)", o.allreduce);
}

}  // namespace dptrain
