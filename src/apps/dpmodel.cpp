// dpmodel: the α–β systems model on the command line (docs/systems-model.md). Reads which model, GPUs, link and
// device to ask about, lets cost/ do the arithmetic, and prints Markdown tables or one JSON object.
//
//   dpmodel --model llama-7b --gpus 8 --link nvlink-h100            the reference report
//   dpmodel --config configs/gpt2-124m.toml --gpus 2,4,8,...,1024   a sweep over GPU counts
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>

#include "dptrain/core/error.hpp"
#include "dptrain/cost/report.hpp"
#include "dptrain/model/config.hpp"
#include "dptrain/train/cli_checks.hpp"
#include "dptrain/train/link_model.hpp"
#include "dptrain/train/option_table.hpp"
#include "dptrain/train/options.hpp"

namespace cost = dptrain::cost;
using dptrain::fail;
using dptrain::require;
using nlohmann::json;

namespace {

// What the command line (and a config file) said; unset means "not given".
struct Options {
  std::optional<std::string> model, config_file;
  std::optional<std::int64_t> params, tokens, batch;
  std::optional<int> layers, width, seq, vocab, heads;
  std::string gpus = "8", link = "nvlink-h100", device = "h100";
  std::optional<double> peak_tflops;
  double eta = cost::kDefaultMatmulEfficiency;
  std::optional<int> compress;
  bool json = false;
};

// "llama-7b" or "h100, h200, a100": the names a preset list accepts, for error messages.
template <typename Preset>
std::string preset_names(std::span<const Preset> presets) {
  std::string names;
  for (const Preset& preset : presets) names += fmt::format("{}{}", names.empty() ? "" : ", ", preset.name);
  return names;
}

// Counts as users write them: "7e9" as well as "7000000000"; "1.5" or "0" get a line saying what is accepted.
CLI::Validator whole_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error != std::errc() || end != text.data() + text.size() || !(value >= 1 && value <= 9e18) ||
            value != std::floor(value))
          return fmt::format("expected a whole number from 1 to 9e18 (e.g. 7e9 or 7000000000), got '{}'", text);
        text = fmt::format("{:.0f}", value);
        return "";
      },
      "N");
}

// Fills the model keys a project config (configs/*.toml, flat keys) holds that the command line left unset. The
// file is first read as dptrain reads it, so that a file dptrain refuses (an unknown key, a key given twice, a
// value of the wrong type) is refused here with dptrain's line; the training keys (lr, steps, ...) are then not
// the model's business.
void read_config_file(Options& options) {
  std::string program = "dptrain", flag = "--config", path = *options.config_file;
  char* argv[] = {program.data(), flag.data(), path.data()};
  dptrain::parse_train_options(3, argv, false);
  const std::vector<CLI::ConfigItem> items =
      dptrain::TomlConfig(*options.config_file, dptrain::config_value_kind).from_file(*options.config_file);
  auto take = [&](const CLI::ConfigItem& item, auto& field) {
    using Value = typename std::remove_reference_t<decltype(field)>::value_type;
    Value value{};
    require(item.inputs.size() == 1 && CLI::detail::lexical_cast(item.inputs[0], value),
            "config {}: {} must be a whole number from 1 to {}, got '{}'", *options.config_file, item.name,
            std::numeric_limits<Value>::max(),
            fmt::join(item.inputs, " "));
    if (!field) field = value;
  };
  for (const CLI::ConfigItem& item : items) {
    if (!item.parents.empty()) continue;
    if (item.name == "vocab") take(item, options.vocab);
    if (item.name == "seq") take(item, options.seq);
    if (item.name == "layers") take(item, options.layers);
    if (item.name == "width") take(item, options.width);
    if (item.name == "heads") take(item, options.heads);
    if (item.name == "batch") take(item, options.batch);
  }
}

// The most tokens per step, as --tokens takes (9e18, below 2^63).
constexpr std::int64_t kMaxTokens = 9'000'000'000'000'000'000;

// D: --tokens, or the global batch of sequences times the sequence length.
std::int64_t tokens_per_step(const Options& options, int seq) {
  if (options.tokens) return *options.tokens;
  require(options.batch.has_value(), "give --tokens D, or --batch B (sequences per step) to make D = B·Q");
  require(*options.batch >= 1, "--batch must be at least 1, got {}", *options.batch);
  std::int64_t tokens = 0;
  require(!__builtin_mul_overflow(*options.batch, std::int64_t(seq), &tokens) && tokens <= kMaxTokens,
          "--batch {} × seq {} tokens per step is beyond {:g}: give a smaller batch", *options.batch, seq,
          double(kMaxTokens));
  return tokens;
}

// The model: a preset; a project config or --vocab ... (N = parameter_count); or --params N with L, H, Q.
cost::ModelShape resolve_model(Options& options, std::string& label) {
  if (options.params) {
    require(options.layers && options.width && options.seq, "--params needs --layers, --width and --seq");
    label = "custom";
    return {*options.params, *options.layers, *options.width, *options.seq, tokens_per_step(options, *options.seq)};
  }
  if (options.config_file || options.vocab) {
    if (options.config_file) read_config_file(options);
    std::string missing;
    for (auto [key, given] : {std::pair{"vocab", options.vocab.has_value()}, {"seq", options.seq.has_value()},
                              {"layers", options.layers.has_value()}, {"width", options.width.has_value()},
                              {"heads", options.heads.has_value()}}) {
      if (!given) missing += fmt::format(" {}", key);
    }
    require(missing.empty(), "the model config {} lacks{}: give them in the file or as --vocab --seq --layers "
            "--width --heads", options.config_file.value_or("on the command line"), missing);
    const dptrain::ModelConfig config{*options.vocab, *options.seq, *options.layers, *options.width, *options.heads};
    dptrain::validate(config);
    label = options.config_file ? std::filesystem::path(*options.config_file).stem().string() : "custom";
    return {dptrain::parameter_count(config), config.layers, config.width, config.seq,
            tokens_per_step(options, config.seq)};
  }
  const std::string name = options.model.value_or("llama-7b");
  const cost::ModelPreset* preset = cost::find_model_preset(name);
  if (!preset) {
    fail("unknown model '{}': expected {}, --config FILE, or --params N --layers L --width H --seq Q", name,
         preset_names(cost::model_presets()));
  }
  require(!(options.layers || options.width || options.seq || options.heads),
          "--layers, --width, --seq and --heads describe a custom model: {}, or drop them to use the preset {}",
          options.model ? "drop --model and add --params N, --vocab V or --config FILE"
                        : "add --params N, --vocab V or --config FILE",
          name);
  label = name;
  cost::ModelShape shape = preset->shape;
  // The preset's D, or the step's tokens: --tokens, or --batch sequences of the preset's Q.
  if (options.tokens || options.batch) shape.tokens_per_step = tokens_per_step(options, int(shape.seq));
  return shape;
}

double resolve_peak_flops(const Options& options, std::string& label) {
  if (options.peak_tflops) {
    require(*options.peak_tflops >= 1e-6 && *options.peak_tflops <= 1e9,
            "--peak-tflops must be in [1e-6, 1e9] TFLOP/s per device (1 MFLOP/s to 1 ZFLOP/s), got {}",
            *options.peak_tflops);
    label = "device";
    return *options.peak_tflops * 1e12;
  }
  const cost::DevicePreset* preset = cost::find_device_preset(options.device);
  if (!preset) {
    fail("unknown device '{}': expected {}, or --peak-tflops X", options.device, preset_names(cost::device_presets()));
  }
  label = preset->label;
  return preset->peak_flops;
}

json cost_json(const cost::CollectiveCost& c) {
  return {{"seconds", c.seconds}, {"wire_bytes", c.wire_bytes}, {"payload_bytes", c.payload_bytes}};
}

// Everything evaluate() computed for one GPU count; SI units (seconds, bytes, FLOPs), fractions for MFU.
json numbers_json(const cost::Scenario& scenario, const cost::ScenarioNumbers& n) {
  json collectives = {{"ring_all_reduce", cost_json(n.ring_all_reduce)},
                      {"tree_all_reduce", cost_json(n.tree_all_reduce)},
                      {"reduce_scatter", cost_json(n.reduce_scatter)},
                      {"all_gather", cost_json(n.all_gather)}};
  if (n.compressed_all_gather) collectives["compressed_all_gather"] = cost_json(*n.compressed_all_gather);
  json zero = json::array();
  for (int stage = 0; stage < cost::kZeroStages; ++stage) {
    const cost::ZeroMemory& m = n.zero_memory[stage];
    zero.push_back({{"stage", stage}, {"weights_bytes", m.weights_bytes}, {"gradients_bytes", m.gradients_bytes},
                    {"optimizer_bytes", m.optimizer_bytes}, {"total_bytes", m.total_bytes()},
                    {"bytes_sent_per_step", n.zero_bytes_sent[stage]}});
  }
  const cost::StepTime& s = n.step;
  json step = {{"compute_s", s.compute_s},           {"backward_s", s.backward_s},
               {"comm_s", s.comm_s},                 {"waiting_step_s", s.waiting_step_s},
               {"overlapped_step_s", s.overlapped_step_s}, {"waiting_mfu", s.waiting_mfu},
               {"overlapped_mfu", s.overlapped_mfu}};
  return {{"gpus", scenario.gpus}, {"collectives", collectives}, {"zero", zero}, {"step", step}};
}

// The question asked: model, device, link, compression.
json inputs_json(const cost::Scenario& scenario, const cost::ReportLabels& labels) {
  const cost::ModelShape& m = scenario.model;
  json inputs = {
      {"model", {{"name", labels.model}, {"params", m.params}, {"layers", m.layers}, {"width", m.width},
                 {"seq", m.seq}, {"tokens_per_step", m.tokens_per_step},
                 {"flops_per_token", cost::model_flops_per_token(m)}, {"flops_per_step", cost::model_flops_per_step(m)},
                 {"gradient_bytes", cost::kGradientBytesPerParam * static_cast<double>(m.params)}}},
      {"device", {{"name", labels.device}, {"peak_flops", scenario.peak_flops}, {"eta", scenario.eta}}},
      {"link", {{"name", labels.link}, {"alpha_s", scenario.link.alpha_s},
                {"bandwidth_Bps", scenario.link.bandwidth_Bps}}}};
  if (scenario.link.gamma_s_per_byte > 0) inputs["link"]["gamma_s_per_byte"] = scenario.link.gamma_s_per_byte;
  if (scenario.compress_keep_one_in > 0) inputs["compress_keep_one_in"] = scenario.compress_keep_one_in;
  return inputs;
}

void add_options(CLI::App& app, Options& o) {
  auto* model = app.add_option("--model", o.model, "Model preset: llama-7b (the default when no model is given)");
  auto* config = app.add_option("--config", o.config_file,
                                "Project config (configs/*.toml): vocab, seq, layers, width, heads, batch; N from "
                                "the parameter count, D = batch·seq")
                     ->check(CLI::ExistingFile);
  // Ranges are checked by cost::validate and dptrain::validate, whose messages say what would be accepted.
  auto* params =
      app.add_option("--params", o.params, "N: parameters, embeddings included")->transform(whole_number());
  app.add_option("--layers", o.layers, "L: transformer blocks")->transform(dptrain::whole_number<int>(1));
  app.add_option("--width", o.width, "H: model width")->transform(dptrain::whole_number<int>(1));
  app.add_option("--seq", o.seq, "Q: sequence length")->transform(dptrain::whole_number<int>(1));
  auto* vocab = app.add_option("--vocab", o.vocab, "V: vocabulary (N is then the GPT-2 parameter count)")
                    ->transform(dptrain::whole_number<int>(1));
  auto* heads =
      app.add_option("--heads", o.heads, "attention heads (with --vocab)")->transform(dptrain::whole_number<int>(1));
  auto* tokens =
      app.add_option("--tokens", o.tokens, "D: tokens per step, all GPUs together")->transform(whole_number());
  app.add_option("--batch", o.batch, "global batch in sequences: D = batch·seq")
      ->transform(whole_number())
      ->excludes(tokens);
  model->excludes(config)->excludes(params)->excludes(vocab);
  params->excludes(config)->excludes(vocab)->excludes(heads);
  app.add_option("--gpus", o.gpus, "GPU count, or a sweep: 2,4,8 or 2,4,8,...,1024")->capture_default_str();
  app.add_option("--link", o.link,
                 "nvlink-h100, ib-400g, wan-100g, a link.json (as dpbench --fit writes: the calibrated link), or "
                 "alpha=5us,bw=450GB/s[,gamma=0.07ns/B] (γ: the reduction's cost per byte added)")
      ->capture_default_str();
  auto* device = app.add_option("--device", o.device, "h100, h200 or a100")->capture_default_str();
  app.add_option("--peak-tflops", o.peak_tflops, "peak dense BF16 TFLOP/s per device")
      ->excludes(device)
      ->check(dptrain::finite_number());
  app.add_option("--eta", o.eta, "matmul efficiency η in (0, 1]")
      ->capture_default_str()
      ->check(dptrain::finite_number());
  app.add_option("--compress", o.compress, "also model an all-gather of gradients keeping one value in K")
      ->transform(dptrain::whole_number<int>(1));
  app.add_flag("--json", o.json, "print one JSON object instead of tables");
}

int run(const Options& given) {
  Options options = given;
  cost::ReportLabels labels;
  cost::Scenario scenario;
  scenario.model = resolve_model(options, labels.model);
  scenario.peak_flops = resolve_peak_flops(options, labels.device);
  // The calibrated link is what dpbench --fit measured and wrote: dpmodel reads its file, as dptrain does.
  require(options.link != "calibrated",
          "--link calibrated: dpmodel measures nothing; give the link.json that `mpirun -np P dpbench ... --fit "
          "link.json` writes (or alpha=..,bw=..)");
  scenario.link = dptrain::link_from_spec(options.link).link;
  labels.link = options.link;
  const cost::LinkPreset* preset = cost::find_link_preset(options.link);
  labels.where = preset ? std::string(preset->where) : cost::describe(scenario.link);
  scenario.eta = options.eta;
  scenario.compress_keep_one_in = options.compress.value_or(0);  // 0: no compressed all-gather
  const std::vector<int> gpu_counts = cost::parse_gpu_list(options.gpus);
  scenario.gpus = gpu_counts.front();

  if (gpu_counts.size() == 1) {
    const cost::ScenarioNumbers numbers = cost::evaluate(scenario);
    if (options.json) {
      json out = inputs_json(scenario, labels);
      out.update(numbers_json(scenario, numbers));
      std::cout << out.dump(2) << '\n';
    } else {
      std::cout << cost::format_report(scenario, numbers, labels);
    }
    return 0;
  }
  if (options.json) {
    json out = inputs_json(scenario, labels), sweep = json::array();
    for (int gpus : gpu_counts) {
      scenario.gpus = gpus;
      sweep.push_back(numbers_json(scenario, cost::evaluate(scenario)));
    }
    out["sweep"] = std::move(sweep);
    std::cout << out.dump(2) << '\n';
  } else {
    std::cout << cost::format_sweep(scenario, gpu_counts, labels);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dpmodel: the α–β systems model of data-parallel training (docs/systems-model.md)"};
  Options options;
  add_options(app, options);
  try {
    app.parse(argc, argv);
    return run(options);
  } catch (const CLI::ParseError& error) {
    if (error.get_exit_code() == 0) return app.exit(error);  // --help
    std::cerr << "dpmodel: " << error.what() << '\n';
  } catch (const dptrain::UserError& error) {
    std::cerr << "dpmodel: " << error.what() << '\n';
  } catch (const std::exception& error) {
    std::cerr << "dpmodel: internal error: " << error.what() << '\n';
    return 1;
  }
  return dptrain::kExitBadInput;
}
