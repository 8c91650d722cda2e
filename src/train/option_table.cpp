// The table of dptrain's options and what is generated from it: the parser's flags, the values ranks must agree
// on, and the checkpoint's "training" metadata.
#include "dptrain/train/option_table.hpp"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <type_traits>

#include "dptrain/core/error.hpp"
#include "dptrain/train/cli_checks.hpp"

namespace dptrain {

namespace {

template <typename T>
std::string value_text(const T& value) {
  if constexpr (std::is_same_v<T, bool>) {
    return value ? "true" : "false";
  } else if constexpr (std::is_same_v<T, DType>) {
    return std::string(dtype_name(value));
  } else {
    return fmt::format("{}", value);  // doubles: the shortest text that reads back to the same value
  }
}

template <typename T>
nlohmann::json value_json(const T& value) {
  if constexpr (std::is_same_v<T, DType>) {
    return std::string(dtype_name(value));
  } else {
    return value;
  }
}

// The wire type is written as bf16 or fp32; anything else is refused with the accepted names.
void add_dtype_option(CLI::App& app, const std::string& flag, const std::string& help, DType& target) {
  app.add_option_function<std::string>(
         flag,
         [flag, &target](const std::string& name) {
           require(name == "bf16" || name == "fp32", "{}: unknown type '{}' (expected bf16 or fp32)", flag, name);
           target = name == "bf16" ? DType::bf16 : DType::f32;
         },
         help)
      ->default_str(target == DType::bf16 ? "bf16" : "fp32");
}

enum class Shown { default_value, nothing };  // whether --help shows the default after the help text
enum class Checkpoint { recorded, not_recorded };

// One entry; `field` is a lambda returning a reference to the option's place in a TrainOptions (const or not).
template <typename Field>
TrainOption entry(std::string flag, std::string help, Field field, Agreement agreement, Checkpoint checkpoint,
                  Shown shown = Shown::default_value) {
  using T = std::remove_cvref_t<decltype(field(std::declval<TrainOptions&>()))>;
  TrainOption option;
  option.flag = flag;
  option.help = help;
  option.agreement = agreement;
  option.in_checkpoint = checkpoint == Checkpoint::recorded;
  option.kind = std::is_same_v<T, bool>       ? ValueKind::boolean
                : std::is_integral_v<T>       ? ValueKind::whole_number
                : std::is_floating_point_v<T> ? ValueKind::number
                                              : ValueKind::text;
  option.add_to_parser = [flag, help, field, shown](CLI::App& app, TrainOptions& options) {
    T& target = field(options);
    if constexpr (std::is_same_v<T, bool>) {
      app.add_flag(flag, target, help)->check(true_or_false());
    } else if constexpr (std::is_same_v<T, DType>) {
      add_dtype_option(app, flag, help, target);
    } else {
      CLI::Option* added = app.add_option(flag, target, help);
      if (shown == Shown::default_value) added->capture_default_str();
      if constexpr (std::is_floating_point_v<T>) added->check(finite_number());
      if constexpr (std::is_integral_v<T>) added->transform(whole_number<T>());
    }
  };
  option.text = [field](const TrainOptions& options) { return value_text(field(options)); };
  option.json = [field](const TrainOptions& options) { return value_json(field(options)); };
  return option;
}

#define DPTRAIN_FIELD(member) \
  [](auto& o) -> auto& { return o.member; }

std::vector<TrainOption> make_table() {
  constexpr Agreement all = Agreement::every_rank, own = Agreement::per_rank;
  constexpr Checkpoint saved = Checkpoint::recorded, unsaved = Checkpoint::not_recorded;
  // The model's shape has its own "model" section in the checkpoint, the data path its "data" section.
  return {
      entry("--vocab", "Vocabulary size V (256 = bytes)", DPTRAIN_FIELD(model.vocab), all, unsaved),
      entry("--seq", "Context length Q (tokens per window)", DPTRAIN_FIELD(model.seq), all, unsaved),
      entry("--layers", "Transformer blocks L", DPTRAIN_FIELD(model.layers), all, unsaved),
      entry("--width", "Model width H", DPTRAIN_FIELD(model.width), all, unsaved),
      entry("--heads", "Attention heads (must divide H)", DPTRAIN_FIELD(model.heads), all, unsaved),
      // Per rank as a path (hosts may mount the corpus in different places); the ranks agree on its tokens
      // instead, which the trainer adds to the agreement under this flag's name.
      entry("--data", "Text file, directory of text files, or llm.c token shard(s)", DPTRAIN_FIELD(data), own,
            unsaved),
      entry("--val-fraction", "Fraction of tokens held out for validation (the end)", DPTRAIN_FIELD(val_fraction),
            all, saved),
      entry("--steps", "Optimizer steps", DPTRAIN_FIELD(steps), all, saved),
      entry("--batch", "Global batch: windows per step, shared by all ranks", DPTRAIN_FIELD(batch), all, saved),
      entry("--lr", "Peak learning rate", DPTRAIN_FIELD(lr), all, saved),
      entry("--min-lr", "Learning rate at the end of the cosine decay", DPTRAIN_FIELD(min_lr), all, saved),
      entry("--warmup", "Linear warm-up steps", DPTRAIN_FIELD(warmup), all, saved),
      entry("--weight-decay", "AdamW decoupled weight decay (2-D weights only)", DPTRAIN_FIELD(weight_decay), all,
            saved),
      entry("--grad-clip", "Clip the global gradient norm to this (0: off)", DPTRAIN_FIELD(grad_clip), all, saved),
      entry("--seed", "Seed of initialisation and batch sampling", DPTRAIN_FIELD(seed), all, saved),
      entry("--skip-nonfinite", "Skip a step whose loss or gradient norm is NaN/Inf", DPTRAIN_FIELD(skip_nonfinite),
            all, saved),
      // A run whose every step overflows would otherwise skip to the end and exit 0 having learnt nothing.
      entry("--max-skipped", "With --skip-nonfinite: stop (exit 3) after this many non-finite steps in a row",
            DPTRAIN_FIELD(max_skipped), all, saved),
      entry("--eval-every", "Validation loss every N steps (0: only at the end)", DPTRAIN_FIELD(eval_every), all,
            saved),
      entry("--eval-windows", "Validation windows per evaluation", DPTRAIN_FIELD(eval_windows), all, saved),

      // Agreed as the device it resolves to (auto may differ between hosts), in Trainer::connect.
      entry("--device", "Compute device: auto (cuda where built with it and a GPU is visible), cpu or cuda",
            DPTRAIN_FIELD(device), own, unsaved),
      entry("--allreduce", "Gradient all-reduce: ring, tree or native (the MPI library's)", DPTRAIN_FIELD(allreduce),
            all, saved),
      entry("--grad-dtype", "Gradient and wire type: bf16 or fp32", DPTRAIN_FIELD(grad_dtype), all, saved),
      entry("--attention",
            "How attention is computed: gemm (the score products and a softmax kernel, the probabilities kept for "
            "backward), fused (cuDNN's flash attention on the cuda backend: row statistics kept instead), or auto "
            "(fused where the cuda backend's cuDNN takes the model's heads, else gemm)",
            DPTRAIN_FIELD(attention), all, unsaved),
      entry(
          "--matmul-epilogues",
          "The MLP's GELU and the residual adds on the cuda backend: fused (in the GEMMs' epilogues, where cuBLASLt "
          "has the kernel) or composed (the product, then a kernel apart: what the fusion gains, in comparison); "
          "the cpu backend composes either way",
          DPTRAIN_FIELD(matmul_epilogues), all, unsaved),
      entry("--cpu-gemm",
            "The cpu backend's sgemm library: by-cpu (onednn where the CPU has AVX-512, else openblas), openblas, "
            "onednn where the build has it, onednn-bf16 (products of BF16-rounded operands, where the CPU has "
            "AVX512_BF16 or AMX), one per kind of product (nt=LIB,nn=LIB,tn=LIB), or auto (each fp32 library timed "
            "on the model's products at start-up, the fastest per kind kept)",
            DPTRAIN_FIELD(cpu_gemm), all, unsaved),
      entry("--check-every",
            "Compare a hash of the weights across ranks every N steps and at the end (0: at the end only)",
            DPTRAIN_FIELD(check_every), all, unsaved),
      entry("--zero", "ZeRO stage: 0 (replicated), 1 (optimizer sharded), 2 (+ gradients), 3 (+ weights)",
            DPTRAIN_FIELD(zero), all, saved),
      entry("--bucket-mb",
            "Gradient unit (bucket) size in MiB: consecutive blocks share a collective up to this; 0: one per block",
            DPTRAIN_FIELD(bucket_mb), all, saved),
      entry("--overlap",
            "Gradient collectives during backward: on, off (after backward ends), or auto (both timed on steps 2-7, "
            "the faster kept)",
            DPTRAIN_FIELD(overlap), all, saved),
      // Folded into --overlap by the parser: the checkpoint records the one value.
      entry("--no-overlap", "The same as --overlap off", DPTRAIN_FIELD(no_overlap), all, unsaved),
      entry("--grad-accum", "Micro-steps per step (gradient accumulation); the batch stays --batch",
            DPTRAIN_FIELD(grad_accum), all, saved),
      // Each rank watches its own waits; a rank with a shorter timeout only ends a stuck job sooner.
      entry("--comm-timeout", "Seconds a collective may take before the job is ended on every rank",
            DPTRAIN_FIELD(comm_timeout), own, unsaved),
      entry("--nccl-blocking",
            "GPU ranks: a blocking NCCL communicator, each group launched on the calling thread instead of a "
            "thread NCCL starts per group (a call waiting on a peer is then ended by the job's end, not "
            "--comm-timeout)",
            DPTRAIN_FIELD(nccl_blocking), all, unsaved),
      // A rank without --link calibrates, which is collective: every rank must take the same branch.
      entry("--link",
            "α–β link of the model: nvlink-h100, ib-400g, wan-100g, a link.json, or alpha=5us,bw=450GB/s "
            "(default: calibrated at start-up)",
            DPTRAIN_FIELD(link), all, unsaved, Shown::nothing),
      entry("--peak-tflops", "Per-rank peak TFLOP/s for MFU (0: a known GPU's datasheet figure, else a GEMM probe)",
            DPTRAIN_FIELD(peak_tflops), all, unsaved),
      // Only this rank's speed depends on it: each rank reduces its own windows in a fixed order and the
      // all-reduce leaves every rank the same gradient, so hosts with different core counts may differ.
      entry("--threads", "OpenMP threads per rank (0: cores / ranks on the node)", DPTRAIN_FIELD(threads), own,
            unsaved),

      // Only rank 0 opens the JSONL file; the value of the others is never read.
      entry("--log", "Write one JSON object per step (and a summary) to this JSONL file", DPTRAIN_FIELD(log), own,
            unsaved, Shown::nothing),
      // Every rank records its timeline and the events are gathered at the end (collective).
      entry("--trace", "Write Chrome trace events of every rank to this JSON file (Perfetto)", DPTRAIN_FIELD(trace),
            all, unsaved, Shown::nothing),
      // Saving is collective (barriers, one shard per rank into rank 0's folder).
      entry("--save", "Checkpoint directory (written at the end and every --save-every steps)", DPTRAIN_FIELD(save),
            all, unsaved, Shown::nothing),
      entry("--save-every", "Checkpoint every N steps (0: only at the end)", DPTRAIN_FIELD(save_every), all, unsaved),
      entry("--resume", "Continue from the latest checkpoint in this directory", DPTRAIN_FIELD(resume), all, unsaved,
            Shown::nothing),
      // Rank 0 alone checks and prunes --save, but the run's outcome must not depend on which rank was told.
      entry("--overwrite", "Let a run that does not resume from --save replace the checkpoints already there",
            DPTRAIN_FIELD(overwrite), all, unsaved),
      entry("--keep-last", "Keep only the newest N step folders in --save after each save (0: keep all)",
            DPTRAIN_FIELD(keep_last), all, unsaved),
      // Only rank 0 prints step lines.
      entry("--quiet", "No per-step lines", DPTRAIN_FIELD(quiet), own, unsaved),
      // Each rank times its own operations (only slower for it: a wait for the device after each); rank 0 prints.
      entry("--op-times", "Time every compute operation of the steps after the first and print a table at the end",
            DPTRAIN_FIELD(op_times), own, unsaved),
  };
}

#undef DPTRAIN_FIELD

}  // namespace

std::string TrainOption::key() const {
  std::string name = flag.substr(flag.find_first_not_of('-'));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

const std::vector<TrainOption>& train_option_table() {
  static const std::vector<TrainOption> table = make_table();
  return table;
}

std::optional<ValueKind> config_value_kind(std::string_view key) {
  for (const TrainOption& option : train_option_table())
    if (std::string_view(option.flag).substr(2) == key) return option.kind;
  return std::nullopt;
}

std::vector<AgreedValue> values_every_rank_shares(const TrainOptions& options) {
  std::vector<AgreedValue> values;
  for (const TrainOption& option : train_option_table())
    if (option.agreement == Agreement::every_rank) values.push_back({option.flag, option.text(options), {}});
  return values;
}

nlohmann::json checkpoint_training_section(const TrainOptions& options) {
  nlohmann::json section = nlohmann::json::object();
  for (const TrainOption& option : train_option_table())
    if (option.in_checkpoint) section[option.key()] = option.json(options);
  return section;
}

std::optional<std::string> training_value_check(const std::string& key, const nlohmann::json& value) {
  for (const TrainOption& option : train_option_table()) {
    if (!option.in_checkpoint || option.key() != key) continue;
    const bool right = option.kind == ValueKind::whole_number ? value.is_number_integer()
                       : option.kind == ValueKind::number     ? value.is_number()
                       : option.kind == ValueKind::boolean    ? value.is_boolean()
                                                              : value.is_string();
    return right ? std::nullopt : std::optional<std::string>(value_kind_name(option.kind));
  }
  return std::nullopt;
}

std::vector<std::string> changed_since_checkpoint(const nlohmann::json& saved, const TrainOptions& options) {
  std::vector<std::string> changed;
  for (const TrainOption& option : train_option_table())
    if (option.in_checkpoint && saved.is_object() && saved.contains(option.key()) &&
        saved.at(option.key()) != option.json(options))
      changed.push_back(fmt::format("{} {} (was {})", option.flag, option.text(options),
                                    saved.at(option.key()).is_string() ? saved.at(option.key()).get<std::string>()
                                                                       : saved.at(option.key()).dump()));
  return changed;
}

}  // namespace dptrain
