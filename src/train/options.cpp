// Command line and TOML config of dptrain (CLI11 reads both; the flags come from option_table.cpp), and the
// checks of ranges and combinations.
#include "dptrain/train/options.hpp"

#include <CLI/CLI.hpp>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>
#include <string_view>
#include <thread>
#include <utility>

#include "dptrain/compute/backend.hpp"
#include "dptrain/compute/cpu_gemm.hpp"
#include "dptrain/core/distinct_paths.hpp"
#include "dptrain/core/error.hpp"
#include "dptrain/train/option_table.hpp"

namespace dptrain {

namespace {

constexpr int kThreadsPerHardwareThread = 4;
// A per-rank peak far above any machine's (an H200 is 989 TFLOP/s), and whose FLOP/s stays finite.
constexpr double kMinPeakTflops = 1e-6, kMaxPeakTflops = 1e9;  // 1 MFLOP/s to 1 ZFLOP/s, as dpmodel

// Edits (insertions, deletions, substitutions) between two words: what makes `lyaers` close to `layers`.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);  // [|b| + 1]: distances from a's prefix to b's prefixes
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The config key a mistyped one most likely meant: the long flag name it equals once '_' is read as '-' and case
// is ignored, else the nearest within two edits; empty when none is that close.
std::string suggested_key(std::string key) {
  std::transform(key.begin(), key.end(), key.begin(),
                 [](unsigned char c) { return c == '_' ? '-' : char(std::tolower(c)); });
  std::string best;
  std::size_t best_distance = 3;
  for (const TrainOption& option : train_option_table()) {
    const std::string name = option.flag.substr(2);
    if (const std::size_t d = edit_distance(key, name); d < best_distance) best = name, best_distance = d;
  }
  return best;
}

// CLI11's "INI was not able to parse min_lr" and "config: This option is not allowed in a configuration file" as
// one line naming the file, the key, its line and, for an unknown key, what it may have meant.
std::string config_error_line(const std::string& what, const TomlConfig& config) {
  const auto where = [&](const std::string& key) {
    const std::size_t line = config.line_of(key);
    return fmt::format("--config {}: key '{}'{}", config.path(), key,
                       line > 0 ? fmt::format(" (line {})", line) : std::string());
  };
  constexpr std::string_view kUnknownKey = "INI was not able to parse ", kNotAllowed = ": This option is not allowed";
  if (what.starts_with(kUnknownKey)) {
    const std::string key = what.substr(kUnknownKey.size()), suggestion = suggested_key(key);
    return fmt::format("{} is unknown (keys are the long flag names without their dashes, e.g. `layers = 4`{})",
                       where(key), suggestion.empty() ? "" : fmt::format("; did you mean `{}`?", suggestion));
  }
  if (const auto at = what.find(kNotAllowed); at != std::string::npos)
    return fmt::format("{} is a flag of the command line only, not of a config file", where(what.substr(0, at)));
  return fmt::format("--config {}: {} (keys are the long flag names, e.g. `layers = 4`)", config.path(), what);
}

// CLI11's "The following arguments were not expected: 3 --stepz" (its order reversed) as one line naming the first
// word that is no flag of dptrain's, and the flag it most likely meant.
std::string unexpected_argument_line(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (!arg.starts_with("--")) continue;
    const std::string name(arg.substr(0, arg.find('=')));
    if (app.get_option_no_throw(name) != nullptr) continue;
    const std::string suggestion = suggested_key(name.substr(2));
    return fmt::format("unknown flag '{}'{} (dptrain --help lists them)", name,
                       suggestion.empty() ? "" : fmt::format("; did you mean --{}?", suggestion));
  }
  for (int i = 1; i < argc; ++i) {  // no unknown flag: a value where none was expected (`dptrain 5`)
    const std::string_view arg = argv[i], before = i > 1 ? std::string_view(argv[i - 1]) : std::string_view();
    const bool flag_before = before.starts_with("--") && before.find('=') == std::string_view::npos;
    const CLI::Option* owner = flag_before ? app.get_option_no_throw(std::string(before)) : nullptr;
    if (!arg.starts_with("-") && (owner == nullptr || owner->get_expected_max() == 0))
      return fmt::format("unexpected argument '{}' (flags are --name value, e.g. --steps 100)", arg);
  }
  return "";
}

// Whether argv holds `flag` itself (`--overlap on` or `--overlap=on`), rather than a config's key.
bool given_on_command_line(int argc, char** argv, std::string_view flag) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == flag || (arg.starts_with(flag) && arg.size() > flag.size() && arg[flag.size()] == '=')) return true;
  }
  return false;
}

}  // namespace

std::optional<TrainOptions> parse_train_options(int argc, char** argv, bool print_help) {
  TrainOptions o;
  CLI::App app{"dptrain: data-parallel training of a GPT-2-style model (run under mpirun for several ranks)",
               "dptrain"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later flag wins
  app.set_config("--config", "", "TOML file whose keys are the long flag names (flags on the command line win)");
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.get_formatter()->column_width(34);

  for (const TrainOption& option : train_option_table()) option.add_to_parser(app, o);

  // The file CLI11 reads (the last --config; more than one is refused below) is read by toml++, which knows TOML.
  std::shared_ptr<TomlConfig> config;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if ((arg == "--config" && i + 1 < argc) || arg.starts_with("--config=")) {
      config = std::make_shared<TomlConfig>(arg == "--config" ? argv[i + 1] : std::string(arg.substr(9)),
                                            config_value_kind);
      app.config_formatter(config);
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    if (print_help) std::cout << app.help();
    return std::nullopt;
  } catch (const CLI::ConfigError& e) {
    fail("{}", config ? config_error_line(e.what(), *config) : std::string(e.what()));
  } catch (const CLI::FileError& e) {  // the file --config names
    fail("--config: {} (expected a TOML file of flat keys, e.g. configs/small.toml)", e.what());
  } catch (const CLI::ExtrasError& e) {
    const std::string line = unexpected_argument_line(app, argc, argv);
    fail("{}", line.empty() ? std::string(e.what()) : line);
  } catch (const CLI::ArgumentMismatch& e) {  // a flag without its value: "--steps: 1 required INT missing"
    const std::string text = e.what();
    fail("{}: expected a value after it", text.substr(0, text.find(':')));
  } catch (const CLI::ParseError& e) {
    fail("{}", e.what());
  }
  // CLI11 reads one --config (the last) and lets a repeated key's last value win: both would hide a mistake.
  const std::vector<std::string> configs = app.get_config_ptr()->results();
  require(configs.size() <= 1, "--config is given {} times ({}): give one file (flags after it override its keys)",
          configs.size(), fmt::join(configs, ", "));
  if (configs.size() == 1)  // an output over the config would lose the user's file
    for (const NamedPath& output :
         {NamedPath{"--log", o.log}, NamedPath{"--trace", o.trace}, NamedPath{"--save", o.save}})
      require_distinct_paths({output, {"--config", configs[0]}});
  require(app.count("--max-skipped") == 0 || o.skip_nonfinite,
          "--max-skipped {} needs --skip-nonfinite (without it the first non-finite step stops the run)",
          o.max_skipped);
  // --no-overlap is --overlap off: one value from here on, which the ranks and the checkpoint compare. One of them
  // in the config and the other on the command line: the command line wins, as it does for every key.
  if (o.no_overlap && app.count("--overlap") > 0 && o.overlap != "off") {
    const bool overlap_typed = given_on_command_line(argc, argv, "--overlap"),
               no_overlap_typed = given_on_command_line(argc, argv, "--no-overlap");
    if (overlap_typed == no_overlap_typed)
      fail("--no-overlap contradicts --overlap {} (give one of them)", o.overlap);
    if (overlap_typed) o.no_overlap = false;
  }
  if (o.no_overlap) o.overlap = "off";
  o.no_overlap = o.overlap == "off";
  // A path given empty is a mistake (an unset variable in a script), not "none": the run would silently not save.
  for (const auto& [flag, path] : {std::pair{"--save", o.save},
                                   {"--resume", o.resume},
                                   {"--log", o.log},
                                   {"--trace", o.trace},
                                   {"--data", o.data}})
    require(app.count(flag) == 0 || !path.empty(), "{}: expected a path, got ''", flag);
  require(app.count("--link") == 0 || !o.link.empty(),
          "--link: expected a preset (nvlink-h100, ib-400g, wan-100g), a link.json or alpha=5us,bw=450GB/s, got ''; "
          "leave it out to calibrate the link at start-up");
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
  require(o.peak_tflops == 0 || (o.peak_tflops >= kMinPeakTflops && o.peak_tflops <= kMaxPeakTflops),
          "--peak-tflops must be 0 or in [{:g}, {:g}] TFLOP/s per rank (0: a known GPU's datasheet figure, else a "
          "GEMM probe), got {}",
          kMinPeakTflops, kMaxPeakTflops, o.peak_tflops);
  require(o.max_skipped >= 1, "--max-skipped must be at least 1, got {}", o.max_skipped);
  // More threads than a few per hardware thread only slows a rank down, and very many exhaust the stacks OpenMP
  // reserves (100000 crashed).
  const int hardware = std::max(1, int(std::thread::hardware_concurrency()));
  require(o.threads >= 0 && o.threads <= kThreadsPerHardwareThread * hardware,
          "--threads must be in [0, {}] (0: cores / ranks on the node; at most {} × the {} hardware threads here), "
          "got {}",
          kThreadsPerHardwareThread * hardware, kThreadsPerHardwareThread, hardware, o.threads);
  require(o.save_every == 0 || !o.save.empty(), "--save-every {} needs --save DIR", o.save_every);
  require(o.keep_last >= 0, "--keep-last must be non-negative (0: keep every checkpoint), got {}", o.keep_last);
  require(o.keep_last == 0 || !o.save.empty(), "--keep-last {} needs --save DIR", o.keep_last);
  require(!o.overwrite || !o.save.empty(),
          "--overwrite needs --save DIR (it lets a fresh run replace the checkpoints there)");
  require(o.zero >= 0 && o.zero <= 3, "--zero: stage {} does not exist (expected 0, 1, 2 or 3)", o.zero);
  require(o.bucket_mb >= 0 && o.bucket_mb <= 1e6, "--bucket-mb must be in [0, 1e6], got {}", o.bucket_mb);
  require(o.comm_timeout > 0 && o.comm_timeout <= 1e6, "--comm-timeout must be in (0, 1e6] seconds, got {}",
          o.comm_timeout);
  require(o.grad_accum >= 1, "--grad-accum must be at least 1, got {}", o.grad_accum);
  require(o.batch % (world_size * o.grad_accum) == 0,
          "--batch {} is not divisible by ranks × --grad-accum = {} × {}: every micro-step needs the same number of "
          "windows",
          o.batch, world_size, o.grad_accum);
  require(o.device == "auto" || o.device == "cpu" || o.device == "cuda",
          "--device: unknown device '{}' (expected auto, cpu or cuda)", o.device);
  if (const std::string why = unknown_attention_mode(o.attention); !why.empty()) throw UserError(why);
  require(o.matmul_epilogues == "fused" || o.matmul_epilogues == "composed",
          "--matmul-epilogues: unknown mode '{}' (expected fused or composed)", o.matmul_epilogues);
  if (o.cpu_gemm != "auto" && o.cpu_gemm != "by-cpu")
    if (const std::string why = cpu_gemm_unavailable(o.cpu_gemm); !why.empty()) throw UserError(why);
  require(o.overlap == "on" || o.overlap == "off" || o.overlap == "auto",
          "--overlap: unknown mode '{}' (expected on, off or auto)", o.overlap);
  require(!o.no_overlap || o.overlap != "on", "--no-overlap contradicts --overlap on");
  require(o.allreduce == "ring" || o.allreduce == "tree" || o.allreduce == "native",
          "--allreduce: unknown algorithm '{}' (expected ring, tree or native)", o.allreduce);
  require_distinct_paths(o);
}

// Outputs that would overwrite each other, the training data or a link file (--log run.jsonl --trace run.jsonl,
// --log x --save x, --log corpus.txt, --log link.json --link link.json), or lie where a save rewrites, the run
// resumes from or the next run reads (--log ck/latest, --trace ck/step-000100/meta.json, --log
// corpus/run.jsonl), are refused before anything is written.
void require_distinct_paths(const TrainOptions& o) {
  // A link file, or a preset's name (an output of that name would be read as the link file by the next run); not
  // an `alpha=..,bw=..` spec.
  const std::string link_file = o.link.find('=') == std::string::npos ? o.link : "";
  require_distinct_paths(
      {{"--log", o.log}, {"--trace", o.trace}, {"--save", o.save}, {"--data", o.data}, {"--link", link_file}});
  for (const NamedPath& output : {NamedPath{"--log", o.log}, NamedPath{"--trace", o.trace}}) {
    require_outside(output, {"--save", o.save},
                    "the checkpoint directory is dptrain's (a save would replace the file, or the file damage a "
                    "checkpoint)");
    require_outside(output, {"--resume", o.resume},
                    "the checkpoint directory is dptrain's (the file would damage the checkpoint it resumes from)");
  }
  for (const NamedPath& output :
       {NamedPath{"--log", o.log}, NamedPath{"--trace", o.trace}, NamedPath{"--save", o.save}})
    require_outside(output, {"--data", o.data}, "the next run would read it as training data");
}

}  // namespace dptrain
