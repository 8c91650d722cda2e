// Runs the dpmodel binary: the reference command prints docs/systems-model.md's numbers, --json agrees, project
// configs work, and bad input is one line `dpmodel: ...` with exit code 2.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

std::string dpmodel_path() {
#ifdef DPMODEL_PATH
  return DPMODEL_PATH;
#else
  const char* dir = std::getenv("DPTRAIN_BINARY_DIR");
  return std::string(dir ? dir : ".") + "/dpmodel";
#endif
}

struct ProcessResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};

ProcessResult run_dpmodel(const std::string& arguments) {
  const std::string command = dpmodel_path() + " " + arguments + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return {-1, "popen failed"};
  std::string output;
  std::array<char, 4096> buffer;
  while (std::size_t read = std::fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), read);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(Dpmodel, ReferenceCommandPrintsSystemsModelNumbers) {
  const ProcessResult run = run_dpmodel("--model llama-7b --gpus 8 --link nvlink-h100 --compress 16");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const char* part : {"Gradient M = 13.48 GB in BF16.",
                           "| NVLink, 8 GPUs | ring all-reduce | 52.5 ms | 23.58 GB |",
                           "| NVLink, 8 GPUs | binary-tree all-reduce (not pipelined) | 179.7 ms | 26.95 GB |",
                           "| NVLink, 8 GPUs | reduce-scatter | 26.2 ms | 11.79 GB |",
                           "| NVLink, 8 GPUs | all-gather | 26.2 ms | 11.79 GB |",
                           "| 2 | 13.48 GB | 1.68 GB | 10.11 GB | 25.27 GB | 23.58 GB |",
                           "all-gather of compressed pieces (1 in 16; BF16 value + 4-byte index)",
                           "| overlapped | 13.13 s |"}) {
    EXPECT_TRUE(contains(run.output, part)) << "missing: " << part << "\n" << run.output;
  }
}

TEST(Dpmodel, JsonHasTheSameNumbers) {
  const ProcessResult run = run_dpmodel("--model llama-7b --gpus 8 --link alpha=5us,bw=450GB/s --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json out = nlohmann::json::parse(run.output);
  EXPECT_EQ(out["gpus"], 8);
  EXPECT_EQ(out["model"]["params"], 6'738'149'376);
  EXPECT_NEAR(out["collectives"]["ring_all_reduce"]["seconds"].get<double>(), 0.05247782848, 1e-12);
  EXPECT_DOUBLE_EQ(out["collectives"]["ring_all_reduce"]["wire_bytes"].get<double>(), 23'583'522'816.0);
  EXPECT_DOUBLE_EQ(out["zero"][2]["total_bytes"].get<double>(), 25'268'060'160.0);
  EXPECT_DOUBLE_EQ(out["step"]["overlapped_mfu"].get<double>(), 0.473);
}

TEST(Dpmodel, SweepOverGpuCountsOnInfiniBand) {
  const ProcessResult run = run_dpmodel("--model llama-7b --gpus 2,4,8,...,1024 --link ib-400g");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "| 64 | 531.9 ms | 26.53 GB | 3.23 s |")) << run.output;
  EXPECT_TRUE(contains(run.output, "| 1024 | ")) << run.output;
  const ProcessResult json_run = run_dpmodel("--model llama-7b --gpus 2,4,8,...,1024 --link ib-400g --json");
  ASSERT_EQ(json_run.exit_code, 0) << json_run.output;
  EXPECT_EQ(nlohmann::json::parse(json_run.output)["sweep"].size(), 10u);
}

TEST(Dpmodel, ProjectConfigGivesParameterCountAndTokens) {
  // N = V·H + Q·H + L·(12H² + 13H) + 2H = 65,536 + 32,768 + 4·789,760 + 512; D = batch·seq = 8·128.
  const std::filesystem::path config = std::filesystem::temp_directory_path() / "dpmodel_test_tiny.toml";
  std::ofstream(config) << "# tiny\nvocab = 256\nseq = 128\nlayers = 4\nwidth = 256\nheads = 4\nbatch = 8\n"
                           "lr = 3e-4\nsteps = 100\n";
  const ProcessResult run = run_dpmodel("--config " + config.string() + " --gpus 4 --link wan-100g --device a100");
  std::filesystem::remove(config);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "Model dpmodel_test_tiny (N = 3,257,856; L = 4; H = 256; Q = 128; 1,024 tokens "
                                   "per step)"))
      << run.output;
  EXPECT_TRUE(contains(run.output, "4 × A100 (312 TFLOP/s")) << run.output;
  // Memory per GPU, the table in one unit, that of its smallest figure: 16 B × N = 52.13 MB at stage 0 (2 B × N =
  // 6.52 MB of weights), 2(p−1)/p·2N = 9.77 MB sent.
  EXPECT_TRUE(contains(run.output, "| 0 | 6.52 MB | 6.52 MB | 39.09 MB | 52.13 MB | 9.77 MB |")) << run.output;
  EXPECT_TRUE(contains(run.output, "| 3 | 1.63 MB | 1.63 MB | 9.77 MB | 13.03 MB | 14.66 MB |")) << run.output;
}

TEST(Dpmodel, PrintsGammaWhenTheLinkHasOne) {
  const ProcessResult run = run_dpmodel("--model llama-7b --gpus 8 --link alpha=5us,bw=450GB/s,gamma=0.01ns/B --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json out = nlohmann::json::parse(run.output);
  EXPECT_DOUBLE_EQ(out["link"]["gamma_s_per_byte"].get<double>(), 1e-11);
  // 52.5 ms of the reference plus the adds: 7/8 of 13.48 GB at 10 ps per byte.
  const double m = 2 * 6738149376.0;
  EXPECT_NEAR(out["collectives"]["ring_all_reduce"]["seconds"].get<double>(),
              14 * 5e-6 + 14.0 / 8 * m / 450e9 + 7.0 / 8 * m * 1e-11, 1e-12);
  const ProcessResult table = run_dpmodel("--model llama-7b --gpus 8 --link alpha=5us,bw=450GB/s,gamma=0.01ns/B");
  EXPECT_TRUE(contains(table.output, "γ = 0.01 ns/B")) << table.output;
}

// The calibrated link: the link.json that dpbench --fit writes (α, B and γ), read as dptrain reads it.
TEST(Dpmodel, ReadsTheLinkFileDpbenchWrites) {
  const std::filesystem::path file = std::filesystem::temp_directory_path() / "dpmodel-test-link.json";
  {
    std::ofstream(file) << R"({"alpha_s": 5e-06, "bandwidth_Bps": 450000000000.0, "gamma_s_per_byte": 1e-11,)"
                        << R"( "note": "dpbench --fit, ring on 8 ranks"})";
  }
  const ProcessResult from_file = run_dpmodel("--model llama-7b --gpus 8 --link " + file.string() + " --json");
  // γ as a rate: 1 / 100 GB/s is the double nearest 1e-11, as the file's number is.
  const ProcessResult from_spec =
      run_dpmodel("--model llama-7b --gpus 8 --link alpha=5us,bw=450GB/s,gamma=100GB/s --json");
  std::filesystem::remove(file);
  ASSERT_EQ(from_file.exit_code, 0) << from_file.output;
  nlohmann::json a = nlohmann::json::parse(from_file.output), b = nlohmann::json::parse(from_spec.output);
  a["link"].erase("name"), b["link"].erase("name");  // named as given: the file's path, the spec's text
  EXPECT_EQ(a, b);
  const ProcessResult calibrated = run_dpmodel("--model llama-7b --link calibrated");
  EXPECT_EQ(calibrated.exit_code, 2) << calibrated.output;
  EXPECT_TRUE(contains(calibrated.output, "dpmodel: --link calibrated: dpmodel measures nothing; give the link.json"))
      << calibrated.output;
}

// A preset's D is its own, or --tokens, or --batch sequences of its Q (LLaMA 7B: Q = 4096).
TEST(Dpmodel, APresetTakesTheBatchInSequencesOfItsLength) {
  const ProcessResult batch = run_dpmodel("--model llama-7b --batch 512 --json");
  const ProcessResult tokens = run_dpmodel("--model llama-7b --tokens 2097152 --json");
  ASSERT_EQ(batch.exit_code, 0) << batch.output;
  const nlohmann::json a = nlohmann::json::parse(batch.output), b = nlohmann::json::parse(tokens.output);
  EXPECT_EQ(a["model"]["tokens_per_step"], 512 * 4096);
  EXPECT_EQ(a, b);
}

TEST(Dpmodel, AnyModelFromFlags) {
  // Counts in scientific notation are whole numbers too.
  const ProcessResult run = run_dpmodel("--params 1e6 --layers 2 --width 64 --seq 32 --tokens 4096 --gpus 2 "
                              "--peak-tflops 100 --eta 0.5 --json");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json out = nlohmann::json::parse(run.output);
  // (6·10^6 + 12·2·64·32)·4096 FLOPs over 2·100e12·0.5 FLOP/s.
  EXPECT_DOUBLE_EQ(out["step"]["compute_s"].get<double>(), (6e6 + 12.0 * 2 * 64 * 32) * 4096 / (2 * 100e12 * 0.5));
}

TEST(Dpmodel, BadInputIsOneLineAndExitCodeTwo) {
  for (const char* arguments : {"--link alpha=5xs,bw=1GB/s", "--link nvlink", "--gpus 0", "--gpus 2,4,...,9",
                                "--model gpt-5", "--device tpu", "--eta 2", "--compress 0", "--params 100",
                                "--model llama-7b --params 100", "--device h100 --peak-tflops 5", "--nonsense",
                                "--config /nonexistent/x.toml", "--vocab 256 --seq 128 --layers 2 --width 100 "
                                "--heads 3 --tokens 10",
                                // Each valid alone, beyond a double together: refused, not printed as inf or nan.
                                "--link alpha=1e308s,bw=1GB/s", "--eta 1e-320",
                                "--params 1.5 --layers 2 --width 64 --seq 32 --tokens 10", "--model llama-7b --tokens 0"}) {
    const ProcessResult run = run_dpmodel(arguments);
    EXPECT_EQ(run.exit_code, 2) << arguments << "\n" << run.output;
    EXPECT_EQ(run.output.rfind("dpmodel: ", 0), 0u) << arguments << "\n" << run.output;
    EXPECT_EQ(run.output.find('\n'), run.output.size() - 1) << arguments << "\n" << run.output;
  }
}

// Values whose arithmetic would overflow, and a key given twice: the line names what was given, not what it became.
TEST(Dpmodel, OverflowsAndRepeatsAreNamedAsGiven) {
  const std::filesystem::path config = std::filesystem::temp_directory_path() / "dpmodel_test_twice.toml";
  std::ofstream(config) << "vocab = 256\nseq = 16\nlayers = 1\nlayers = 2\nwidth = 32\nheads = 2\n";
  const std::filesystem::path apart = std::filesystem::temp_directory_path() / "dpmodel_test_apart.toml";
  std::ofstream(apart) << "vocab = 256\nseq = 16\nlayers = 2\nwidth = 32\nheads = 2\nseq = 32\n";
  const std::filesystem::path unknown = std::filesystem::temp_directory_path() / "dpmodel_test_unknown.toml";
  std::ofstream(unknown) << "vocab = 256\nseq = 16\nlyers = 2\nwidth = 32\nheads = 2\n";
  const std::string custom = "--vocab 256 --layers 2 --width 32 --heads 2 ";
  for (const auto& [arguments, line] : std::vector<std::pair<std::string, std::string>>{
           {"--peak-tflops inf", "--peak-tflops: must be a finite number, got inf"},
           {"--peak-tflops 1e308",
            "--peak-tflops must be in [1e-6, 1e9] TFLOP/s per device (1 MFLOP/s to 1 ZFLOP/s), got 1e+308"},
           {"--gpus 3000000000", "bad --gpus '3000000000': 3000000000 is out of range (at most 2147483647 GPUs)"},
           {"--compress 99999999999",
            "--compress: 99999999999 is out of range (expected a whole number from 1 to 2147483647)"},
           {"--params 1e9 --layers abc --width 64 --seq 64 --tokens 10",
            "--layers: expected a whole number, got 'abc'"},
           {"--model llama-7b --layers 64",
            "--layers, --width, --seq and --heads describe a custom model: drop --model and add --params N, --vocab "
            "V "
            "or --config FILE, or drop them to use the preset llama-7b"},
           {"--link alpha=1us,bw=1e300TB/s", "link bandwidth B = inf B/s must be finite and positive"},
           {custom + "--seq 16 --batch 9000000000000000000",
            "--batch 9000000000000000000 × seq 16 tokens per step is beyond 9e+18: give a smaller batch"},
           {custom + "--seq 65536 --batch 281474976710656",
            "--batch 281474976710656 × seq 65536 tokens per step is beyond 9e+18: give a smaller batch"},
           {custom + "--seq 16 --batch 4 --tokens 100", "--tokens excludes --batch"},
           // The file is read as dptrain reads it: what dptrain refuses, dpmodel refuses with the same line.
           {"--config " + config.string(), "--config " + config.string() +
                                               ": not valid TOML at line 4, column 10: cannot redefine existing "
                                               "integer 'layers'"},
           {"--config " + apart.string(), "--config " + apart.string() +
                                              ": not valid TOML at line 6, column 7: cannot redefine existing "
                                              "integer 'seq'"},
           {"--config " + unknown.string(),
            "--config " + unknown.string() +
                ": key 'lyers' (line 3) is unknown (keys are the long flag names without their dashes, e.g. "
                "`layers = 4`; did you mean `layers`?)"}}) {
    const ProcessResult run = run_dpmodel(arguments);
    EXPECT_EQ(run.exit_code, 2) << arguments << "\n" << run.output;
    EXPECT_EQ(run.output, "dpmodel: " + line + "\n") << arguments;
  }
  for (const auto& file : {config, apart, unknown}) std::filesystem::remove(file);
}

}  // namespace
