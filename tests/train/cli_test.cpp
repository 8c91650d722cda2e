// The dptrain program end to end: bad input exits 2 with one clear line, the step line and JSONL records,
// checkpoints, and a resumed run whose losses equal an uninterrupted run's bit for bit.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cmath>

#include "dptrain/compute/cpu_gemm.hpp"
#include "dptrain/core/cpu_info.hpp"
#include "dptrain/train/cpu_gemm_choice.hpp"
#include "test_support.hpp"

namespace dptrain {
namespace {

using testing::run_command;

class DptrainProgram : public testing::TinyRunTest {
 protected:
  DptrainProgram() : TinyRunTest("cli", "") {}
};

struct BadInput {
  std::string flags, message;
};

TEST_F(DptrainProgram, BadInputEndsWithOneLineAndExitCode2) {
  testing::write_text(dir_ / "empty.txt", "");
  testing::write_text(dir_ / "negative-gamma.json", R"({"alpha_s": 0, "bandwidth_Bps": 1e9, "gamma_s_per_byte": -1e-6})");
  testing::write_text(dir_ / "bad.toml", "layers = 2\nbogus = 3\n");
  testing::write_text(dir_ / "underscore.toml", "min_lr = 0.0001\n");
  testing::write_text(dir_ / "typo.toml", "lyaers = 2\n");
  testing::write_text(dir_ / "nested.toml", "layers = 2\nconfig = \"b.toml\"\n");
  testing::write_text(dir_ / "badshard.bin", std::string("\x01\x02\x03\x04", 4) + std::string(1020, '\0'));
  testing::write_text(dir_ / "blob.raw", std::string("\x01\x02\x03\x04", 4) + std::string(1020, '\0'));
  std::filesystem::create_directories(dir_ / "loop/inner");
  testing::write_text(dir_ / "loop/inner/a.txt", testing::small_corpus_text());
  std::filesystem::create_directory_symlink(dir_ / "loop", dir_ / "loop/inner/back");
  std::filesystem::create_directories(dir_ / "self");
  testing::write_text(dir_ / "self/a.txt", testing::small_corpus_text());
  std::filesystem::create_symlink(dir_ / "self/me", dir_ / "self/me");
  ASSERT_EQ(::mkfifo((dir_ / "pipe").c_str(), 0644), 0);
  std::filesystem::create_directories(dir_ / "texts");
  testing::write_text(dir_ / "texts/a.txt", testing::small_corpus_text());
  std::filesystem::create_hard_link(dir_ / "corpus.txt", dir_ / "corpus-hard-link.jsonl");
  std::filesystem::create_hard_link(dir_ / "texts/a.txt", dir_ / "texts-a-hard-link.jsonl");
  const std::vector<BadInput> cases = {
      {"--bogus 1", "unknown flag '--bogus' (dptrain --help lists them)"},
      {"--stepz 3", "unknown flag '--stepz'; did you mean --steps? (dptrain --help lists them)"},
      {"--min_lr 0.001", "unknown flag '--min_lr'; did you mean --min-lr?"},
      {"--quiet 3", "unexpected argument '3' (flags are --name value, e.g. --steps 100)"},
      {"--layers 0", "--layers must be in [1, 1024], got 0"},
      {"--heads 5", "--heads must divide --width: --width 32 is not a multiple of --heads 5"},
      {"--seq 100000", "--seq must be in [1, 65536], got 100000"},
      {"--seq 2000", "is longer than the validation split"},
      {"--batch 0", "--batch must be at least 1, got 0"},
      {"--lr -1", "--lr must be in (0, 10), got -1"},
      {"--grad-dtype fp16", "--grad-dtype: unknown type 'fp16' (expected bf16 or fp32)"},
      {"--allreduce ring2", "--allreduce: unknown algorithm 'ring2' (expected ring, tree or native)"},
      {"--cpu-gemm mkl", "--cpu-gemm: unknown library 'mkl' (expected by-cpu, auto"},
      {"--data " + (dir_ / "missing.txt"), "does not exist"},
      {"--data " + (dir_ / "empty.txt"), "is empty"},
      // Named as a shard, or binary, without the shard magic: a damaged shard, not text.
      {"--data " + (dir_ / "badshard.bin") + " --vocab 50257",
       "data file '" + (dir_ / "badshard.bin") +
           "' is named as a token shard but has no shard header: it starts "
           "with 67305985 where an llm.c token shard has magic 20240520"},
      {"--data " + (dir_ / "blob.raw"), "is binary but not a token shard: it starts with 67305985"},
      {"--data /dev/zero", "data path '/dev/zero' is neither a regular file nor a directory"},
      {"--data " + (dir_ / "loop"), "is a symbolic link loop (it leads back to"},
      {"--data " + (dir_ / "self"), "Too many levels of symbolic links"},
      {"--threads 100000", "--threads must be in [0, "},
      {"--max-skipped 0 --skip-nonfinite", "--max-skipped must be at least 1, got 0"},
      {"--seed -1", "--seed: must be a non-negative integer, got -1"},
      {"--weight-decay inf", "--weight-decay: must be a finite number, got inf"},
      {"--lr nan", "--lr: must be a finite number, got nan"},
      {"--val-fraction -inf", "--val-fraction: must be a finite number, got -inf"},
      // Too large for memory: refused with the estimate before anything is allocated.
      {"--width 65536 --layers 1024 --heads 1", "TiB of memory per rank"},
      {"--batch 2000000000", "of token windows for --batch 2000000000"},
      {"--config " + (dir_ / "bad.toml"), "--config " + (dir_ / "bad.toml") +
                                              ": key 'bogus' (line 2) is unknown (keys are the long flag names "
                                              "without their dashes, e.g. `layers = 4`)"},
      {"--config " + (dir_ / "underscore.toml"),
       "key 'min_lr' (line 1) is unknown (keys are the long flag names without their dashes, e.g. `layers = 4`; did "
       "you mean `min-lr`?)"},
      {"--config " + (dir_ / "typo.toml"),
       "key 'lyaers' (line 1) is unknown (keys are the long flag names without "
       "their dashes, e.g. `layers = 4`; did you mean `layers`?)"},
      {"--config " + (dir_ / "nested.toml"), "--config " + (dir_ / "nested.toml") +
                                                 ": key 'config' (line 2) is a flag of the command line only, not of "
                                                 "a config file"},
      {"--resume " + (dir_ / "nothing"), "is not a checkpoint directory"},
      {"--trace " + (dir_ / "nowhere/trace.json"),
       "--trace: cannot write '" + (dir_ / "nowhere/trace.json") + "': No such file or directory"},
      {"--log " + (dir_ / "nowhere/run.jsonl"),
       "--log: cannot write '" + (dir_ / "nowhere/run.jsonl") + "': No such file or directory"},
      {"--log " + (dir_ / "texts"), "--log: cannot write '" + (dir_ / "texts") + "': Is a directory"},
      // The trace is renamed over its path: a directory, a pipe or a device (root's /dev/null) must not be.
      {"--trace " + (dir_ / "texts"), "--trace: cannot write '" + (dir_ / "texts") + "': it is a directory"},
      {"--trace " + (dir_ / "pipe"),
       "--trace: cannot write '" + (dir_ / "pipe") + "': it exists and is not a regular file"},
      // Opening a pipe with no reader would hold every rank without a word.
      {"--log " + (dir_ / "pipe"), "--log: '" + (dir_ / "pipe") + "' is a named pipe that no process reads"},
      {"--save " + (dir_ / "ck") + " --log " + (dir_ / "ck/latest"), "--log '" + (dir_ / "ck/latest") +
                                                                         "' lies inside --save '" + (dir_ / "ck") +
                                                                         "': the checkpoint directory is dptrain's"},
      {"--save " + (dir_ / "ck") + " --trace " + (dir_ / "ck/trace.json"), "lies inside --save"},
      {"--data " + (dir_ / "texts") + " --log " + (dir_ / "texts/run.jsonl"),
       "--log '" + (dir_ / "texts/run.jsonl") + "' lies inside --data '" + (dir_ / "texts") +
           "': the next run would read it as training data"},
      {"--data " + (dir_ / "texts") + " --save " + (dir_ / "texts/ck"), "lies inside --data"},
      // Into the checkpoint the run resumes from: a resume appends to --log, so the file would damage it.
      {"--resume " + (dir_ / "ck") + " --log " + (dir_ / "ck/latest"),
       "--log '" + (dir_ / "ck/latest") + "' lies inside --resume '" + (dir_ / "ck") +
           "': the checkpoint directory is dptrain's"},
      {"--resume " + (dir_ / "ck") + " --trace " + (dir_ / "ck/step-000002/meta.json"), "lies inside --resume"},
      // Over the user's link file, and over the data through a hard link (another name for the same inode).
      {"--link " + (dir_ / "negative-gamma.json") + " --trace " + (dir_ / "negative-gamma.json"),
       "and --link '" + (dir_ / "negative-gamma.json") + "' are the same path"},
      {"--data " + (dir_ / "texts") + " --log " + (dir_ / "texts-a-hard-link.jsonl"),
       "--log '" + (dir_ / "texts-a-hard-link.jsonl") + "' is a hard link of '" + (dir_ / "texts/a.txt") +
           "' inside --data '" + (dir_ / "texts") + "': the next run would read it as training data"},
      // A preset's name as an output: the next run's --link of that name would read the file.
      {"--link nvlink-h100 --log nvlink-h100", "--log 'nvlink-h100' and --link 'nvlink-h100' are the same path"},
      {"--log " + (dir_ / "corpus-hard-link.jsonl"), "--log '" + (dir_ / "corpus-hard-link.jsonl") +
                                                         "' and --data '" + (dir_ / "corpus.txt") +
                                                         "' are the same path"},
      {"--overwrite", "--overwrite needs --save DIR"},
      {"--max-skipped 3", "--max-skipped 3 needs --skip-nonfinite"},
      {"--steps 99999999999", "--steps: 99999999999 is out of range (at most 2147483647)"},
      {"--link " + (dir_ / "negative-gamma.json"), "need finite α ≥ 0, B > 0 and γ ≥ 0"},
      {"--log " + (dir_ / "same") + " --save " + (dir_ / "same"),
       "--log '" + (dir_ / "same") + "' and --save '" + (dir_ / "same") + "' are the same path"},
      {"--log " + (dir_ / "run.jsonl") + " --trace " + (dir_ / "./run.jsonl"), "are the same path"},
      {"--log " + (dir_ / "corpus.txt"), "and --data '" + (dir_ / "corpus.txt") + "' are the same path"},
      // Values CLI11 cannot convert, and flags without their value: what is accepted, not "Could not convert".
      {"--steps abc", "--steps: expected a whole number, got 'abc'"},
      {"--batch 3.5", "--batch: expected a whole number, got '3.5'"},
      {"--seed 18446744073709551616",
       "--seed: 18446744073709551616 is out of range (expected a whole number from 0 to 18446744073709551615)"},
      {"--lr abc", "--lr: expected a number, got 'abc'"},
      {"--steps", "--steps: expected a value after it"},
      {"--config " + (dir_ / "missing.toml"), "--config: "},
      {"--link " + (dir_ / "missing.json"), "--link: no file '" + (dir_ / "missing.json") + "'"},
      {"--link nvlink", "--link: unknown link 'nvlink'"},
      {"--save ''", "--save: expected a path, got ''"},
      {"--resume ''", "--resume: expected a path, got ''"},
      {"--link ''",
       "--link: expected a preset (nvlink-h100, ib-400g, wan-100g), a link.json or alpha=5us,bw=450GB/s, "
       "got ''; leave it out to calibrate the link at start-up"},
      // A peak whose FLOP/s would be infinite.
      {"--peak-tflops 1e308", "--peak-tflops must be 0 or in [1e-06, 1e+09] TFLOP/s per rank"},
      {"--peak-tflops 1e-300", "--peak-tflops must be 0 or in [1e-06, 1e+09] TFLOP/s per rank"},
      // Valid alone, beyond a double together: the modelled times would print inf (one rank's too: the link is
      // refused whatever the job's size, as dpmodel refuses it).
      {"--link alpha=1e308s,bw=1B/s", "--link: the model's time of a ring all-reduce of the "},
      // Finite alone, infinite once the reports add it up in milliseconds over calls and steps.
      {"--link alpha=1e306s,bw=1GB/s", "--link: the model's time of a ring all-reduce of the "},
      // A flag's value is true or false, not any integer.
      {"--no-overlap=2", "--no-overlap: expected true or false, got '2'"},
      {"--op-times=maybe", "--op-times: expected true or false, got 'maybe'"},
      // A leading zero is decimal: CLI11 alone read 010 as octal 8, and refused 09 as "Could not convert".
      {"--batch 09 --grad-accum 02", "--batch 9 is not divisible by ranks × --grad-accum = 1 × 2"},
      {"--overlap auto --no-overlap", "--no-overlap contradicts --overlap auto (give one of them)"},
      {"--cpu-gemm nt=auto,nn=openblas,tn=openblas", "--cpu-gemm: unknown library 'auto' for nt (expected openblas"},
  };
  for (const auto& c : cases) {
    const auto r = run_command(dptrain(c.flags));
    EXPECT_EQ(r.exit_code, 2) << c.flags << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.flags << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << c.flags << "\n" << r.output;
    EXPECT_EQ(r.output.rfind("dptrain: ", 0), 0u) << r.output;
  }
  // The config is TOML, read by toml++: a key given twice (apart or on consecutive lines), an array (one value or
  // none), a table, a value of the wrong type for its option and a line that is not TOML are refused in one line
  // naming the file, the key and its line; TOML's own numbers (1_000, 0x10, 1e-3) are read as TOML defines them.
  const std::string tiny = "vocab = 256\nseq = 16\nwidth = 32\nheads = 2\n";
  const struct {
    std::string name, text, line;
  } configs[] = {
      {"twice.toml", "layers = 2\nwidth = 32\nheads = 2\nlayers = 3\n",
       "not valid TOML at line 4, column 10: cannot redefine existing integer 'layers'"},
      {"adjacent.toml", "layers = 2\nlayers = 3\n", "not valid TOML at line 2, column 10: cannot redefine existing"},
      {"array.toml", "layers = 2\ngrad-accum = [2, 4]\n",
       "key 'grad-accum' (line 2) is an array ([ 2, 4 ]); give it one value (e.g. `layers = 4`)"},
      {"one-array.toml", "steps = [3]\n", "key 'steps' (line 1) is an array ([ 3 ]); give it one value"},
      {"empty-array.toml", "layers = []\n", "key 'layers' (line 1) is an array ([]); give it one value"},
      {"string.toml", "steps = \"3\"\n", "key 'steps' (line 1) is \"3\"; expected a whole number (e.g. 4)"},
      {"float.toml", "steps = 3.5\n", "key 'steps' (line 1) is 3.5; expected a whole number (e.g. 4)"},
      {"bool.toml", "lr = true\n", "key 'lr' (line 1) is true; expected a number (e.g. 0.001)"},
      {"number.toml", "allreduce = 3\n", "key 'allreduce' (line 1) is 3; expected a string in quotes (e.g. \"ring\")"},
      {"table.toml", "[train]\nsteps = 3\n", "'train' (line 1) is a table; the config holds flat keys, one value each"},
      {"inline.toml", "opt = { lr = 1 }\n", "'opt' (line 1) is a table; the config holds flat keys"},
      {"garbage.toml", "steps = 3 garbage\n", "not valid TOML at line 1, column 11: "},
  };
  for (const auto& config : configs) {
    testing::write_text(dir_ / config.name, config.text);
    const auto r = run_command(testing::binary_dir() + "/dptrain --config " + (dir_ / config.name) + " --data " +
                               (dir_ / "corpus.txt"));
    EXPECT_EQ(r.exit_code, 2) << config.name << "\n" << r.output;
    EXPECT_TRUE(r.output.starts_with("dptrain: --config " + (dir_ / config.name) + ": " + config.line))
        << config.name << "\n" << r.output;
    EXPECT_EQ(testing::occurrences(r.output, "\n"), 1) << r.output;
  }
  testing::write_text(dir_ / "numbers.toml", tiny + "layers = 0x2\nsteps = 1_0\nlr = 3e-3\nquiet = true\n");
  const auto numbers = run_command(testing::binary_dir() + "/dptrain --config " + (dir_ / "numbers.toml") +
                                   " --data " + (dir_ / "corpus.txt"));
  EXPECT_EQ(numbers.exit_code, 0) << numbers.output;
  EXPECT_NE(numbers.output.find("GPT L=2 H=32"), std::string::npos) << numbers.output;
  EXPECT_NE(numbers.output.find("done: 10 steps"), std::string::npos) << numbers.output;
  testing::write_text(dir_ / "second.toml", "layers = 2\n");
  const auto two_files = run_command(dptrain("--config " + (dir_ / "second.toml")));
  EXPECT_EQ(two_files.exit_code, 2) << two_files.output;
  EXPECT_NE(two_files.output.find("dptrain: --config is given 2 times"), std::string::npos) << two_files.output;
  // A CPU description the user named that is not there, or is a folder: not read as a CPU without extensions.
  for (const std::string& named : {dir_ / "missing-cpuinfo", dir_ / "."}) {
    const auto cpuinfo = run_command("env DPTRAIN_CPUINFO=" + named + " " + dptrain(""));
    EXPECT_EQ(cpuinfo.exit_code, 2) << cpuinfo.output;
    EXPECT_NE(cpuinfo.output.find("dptrain: DPTRAIN_CPUINFO: cannot read '" + named + "'"), std::string::npos)
        << cpuinfo.output;
  }
  // The comm thread's wait, chosen by the environment: a value it does not know is bad input, not a failure.
  for (const auto& [variable, line] :
       {std::pair{"DPTRAIN_MPI_WAIT=busy",
                  "dptrain: DPTRAIN_MPI_WAIT is 'busy': expected spin, yield or sleep (or leave it unset: sleep)"},
        std::pair{"DPTRAIN_MPI_SPIN_US=1ms",
                  "dptrain: DPTRAIN_MPI_SPIN_US is '1ms': expected whole microseconds from 0 to 10000000"}}) {
    const auto wait = run_command(std::string("env ") + variable + " " + dptrain(""));
    EXPECT_EQ(wait.exit_code, 2) << wait.output;
    EXPECT_NE(wait.output.find(line), std::string::npos) << wait.output;
  }
  // A shard with the right magic but a truncated body.
  testing::write_text(dir_ / "trunc.bin", std::string("\x88\xd8\x34\x01\x01\0\0\0\x10\0\0\0", 12) +
                                              std::string(1012, '\0') + std::string(6, '\0'));
  const auto r = run_command(dptrain("--data " + (dir_ / "trunc.bin")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("header says 16 tokens (32 bytes), body has 6 bytes"), std::string::npos) << r.output;
}

// The memory refusal names the estimate and what is available, in binary units.
// A --save directory another run holds is refused at set-up, before the first step, even where that run has saved
// nothing there yet: the first run, on a fresh directory, locks it at the end of its set-up; the second, started
// while the first trains, is refused (it used to train, and the two then wrote one directory).
TEST_F(DptrainProgram, ASaveDirectoryInUseIsRefusedBeforeTheFirstStep) {
  const std::string busy = dir_ / "busy", lock = dir_ / "busy/.dptrain.lock";
  const auto r = run_command(fmt::format(
      "{} > {} 2>&1 & first=$!; for i in $(seq 300); do [ -e {} ] && break; sleep 0.1; done; {} 2>&1; status=$?; "
      "kill $first; wait $first; exit $status",
      dptrain("--steps 100000 --save " + busy), dir_ / "first.txt", lock, dptrain("--steps 2 --save " + busy)));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(fmt::format("dptrain: --save: '{}' is in use by another run", busy)), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("step 1/"), std::string::npos) << r.output;
  // Free, a fresh directory is made and locked at set-up, and holds the run's checkpoint at the end.
  const auto free = run_command(dptrain("--steps 2 --save " + (dir_ / "fresh")));
  EXPECT_EQ(free.exit_code, 0) << free.output;
  EXPECT_TRUE(std::filesystem::exists(dir_ / "fresh/.dptrain.lock"));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "fresh/step-000002/meta.json"));
}

TEST_F(DptrainProgram, ARunTooLargeForMemoryIsRefusedWithTheEstimate) {
  const auto r = run_command(dptrain("--width 65536 --layers 1024 --heads 1"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  // 1024 × (12 × 65536² + 13 × 65536) + … parameters at 16 + 8 bytes each: 1.2 PiB, printed in TiB.
  EXPECT_NE(r.output.find("for 5.278e+13 parameters at --zero 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" TiB"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" is available: use a smaller model"), std::string::npos) << r.output;
}

// An output over the config file, or a link to where another output is about to be written, is refused before
// anything is written: the config is the user's, and the log would be lost under the trace renamed over it.
TEST_F(DptrainProgram, OutputsOverTheConfigOrThroughALinkToAnotherOutputAreRefused) {
  const std::string config = testing::file_bytes(testing::source_dir() + "/configs/tiny.toml");
  testing::write_text(dir_ / "own.toml", config);
  std::filesystem::create_symlink("later.json", dir_ / "link.jsonl");  // dangling until the trace is written
  const std::string run = fmt::format("{}/dptrain --data {} --threads 1 --steps 1 --config {} ",
                                      testing::binary_dir(), dir_ / "corpus.txt", dir_ / "own.toml");
  for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
           {"--log " + (dir_ / "own.toml"), "dptrain: --log '" + (dir_ / "own.toml") + "' and --config '" +
                                                (dir_ / "own.toml") + "' are the same path"},
           {"--trace " + (dir_ / "./own.toml"), "and --config '" + (dir_ / "own.toml") + "' are the same path"},
           {"--log " + (dir_ / "link.jsonl") + " --trace " + (dir_ / "later.json"),
            "dptrain: --log '" + (dir_ / "link.jsonl") + "' and --trace '" + (dir_ / "later.json") +
                "' are the same path"}}) {
    const auto r = run_command(run + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << flags << "\n" << r.output;
  }
  EXPECT_EQ(testing::file_bytes(dir_ / "own.toml"), config);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "later.json"));
}

// Bad input found after the log was named (here: the checkpoint to resume from) leaves an existing log as it was.
TEST_F(DptrainProgram, BadInputLeavesAnExistingLogUntouched) {
  const std::string before = "{\"step\": 1, \"loss\": 5.5}\n";
  testing::write_text(dir_ / "kept.jsonl", before);
  for (const std::string& flags : std::vector<std::string>{"--resume " + (dir_ / "nothing"), "--threads 100000"}) {
    const auto r = run_command(dptrain(flags + " --log " + (dir_ / "kept.jsonl")));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(testing::file_bytes(dir_ / "kept.jsonl"), before) << flags;
  }
  // Nor is a new one left behind by a set-up that fails after the log was checked (here: the trace's folder).
  const auto refused =
      run_command(dptrain("--log " + (dir_ / "new.jsonl") + " --trace " + (dir_ / "nowhere/t.json")));
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "new.jsonl")) << refused.output;
  // A good run truncates it (a fresh run's log starts empty) and writes its steps.
  ASSERT_EQ(run_command(dptrain("--steps 1 --log " + (dir_ / "kept.jsonl"))).exit_code, 0);
  const auto records = testing::read_jsonl(dir_ / "kept.jsonl");
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0]["step"], 1);
  EXPECT_NE(records[0]["loss"].get<double>(), 5.5);
}

TEST_F(DptrainProgram, StepLinesAndJsonlRecords) {
  const auto r = run_command(dptrain("--steps 4 --eval-every 2 --log " + (dir_ / "run.jsonl")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 4/4 | loss "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" tok/s | MFU "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("% | val "), std::string::npos) << r.output;
  const auto records = testing::read_jsonl(dir_ / "run.jsonl");
  ASSERT_EQ(records.size(), 5u);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(records[s]["step"], s + 1);
    for (const char* key : {"loss", "lr", "grad_norm", "step_ms", "tokens_per_s"})
      EXPECT_TRUE(records[s].contains(key));
    EXPECT_EQ(records[s].contains("val_loss"), s % 2 == 1);
  }
  EXPECT_EQ(records[4]["event"], "summary");
  EXPECT_EQ(records[4]["steps"], 4);
  EXPECT_DOUBLE_EQ(records[4]["tokens"].get<double>(), 4.0 * 8 * 16);
}

// The default (by-cpu), --cpu-gemm openblas and onednn (where the build has it), alone or mixed by kind of product,
// train the same model to fp32 rounding: the losses of 4 steps agree to 1e-5 relative (two sgemm libraries summing in
// different orders, amplified by 4 AdamW steps), and the start-up line names the library.
TEST_F(DptrainProgram, EveryCpuGemmLibraryTrainsTheSameModel) {
  const auto reference =
      testing::run_logged(dptrain("--steps 4 --log " + (dir_ / "by-cpu.jsonl")), dir_ / "by-cpu.jsonl");
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  // The start-up line and the summary name this host's CPU (what decides which kernels ran).
  const CpuInfo cpu = host_cpu_info();
  // The default, by-cpu: oneDNN where this CPU has AVX-512, OpenBLAS otherwise, named with the reason.
  const CpuGemmChoice by_cpu = cpu_gemm_for_cpu(cpu);
  EXPECT_NE(reference.output.find("device cpu (sgemm " + by_cpu.description() + ") on " + cpu.description() + " |"),
            std::string::npos)
      << reference.output;
  EXPECT_EQ(reference.summary["cpu_gemm"], by_cpu.summary());
  EXPECT_EQ(reference.summary["host_cpu"],
            (nlohmann::json{{"model", cpu.model}, {"vector_extensions", cpu.vector_extensions}}));
  std::vector<std::string> specs = cpu_gemm_names();
  if (specs.size() == 2) specs.push_back("nt=onednn,nn=openblas,tn=onednn");  // a mix, one library per kind
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::string& gemm = specs[i];
    const std::string log = dir_ / fmt::format("gemm-{}.jsonl", i);
    const auto r = testing::run_logged(dptrain("--steps 4 --cpu-gemm " + gemm + " --log " + log), log);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("device cpu (sgemm " + gemm + ")"), std::string::npos) << r.output;
    ASSERT_EQ(r.losses.size(), 4u);
    EXPECT_LT(testing::max_relative_difference(r.losses, reference.losses), 1e-5) << gemm;
  }
}

// --cpu-gemm onednn-bf16 (BF16 operands, fp32 accumulation) trains the same model as fp32 to within one BF16
// rounding: each product's terms are within 2⁻⁸ relative of fp32's, and the loss of 4 steps stays within 2⁻⁸
// relative of the fp32 run's (measured: ~1e-5); it is not fp32's bits, so the mode is in effect. Where the CPU
// has no BF16 instructions it is refused with one line and exit 2.
TEST_F(DptrainProgram, Bf16GemmsTrainTheSameModelToWithinOneBf16Rounding) {
  const std::string log = dir_ / "bf16.jsonl";
  if (cpu_gemm_bf16_names().empty()) {
    const auto refused = run_command(dptrain("--steps 4 --cpu-gemm onednn-bf16 --log " + log));
    EXPECT_EQ(refused.exit_code, 2) << refused.output;
    EXPECT_NE(refused.output.find("dptrain: " + cpu_gemm_unavailable("onednn-bf16") + "\n"), std::string::npos)
        << refused.output;
    return;
  }
  const auto r = testing::run_logged(dptrain("--steps 4 --cpu-gemm onednn-bf16 --log " + log), log);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("device cpu (sgemm onednn-bf16)"), std::string::npos) << r.output;
  EXPECT_EQ(r.summary["cpu_gemm"]["library"], "onednn-bf16");
  const std::string fp32_log = dir_ / "fp32.jsonl";
  const auto fp32 = testing::run_logged(dptrain("--steps 4 --cpu-gemm onednn --log " + fp32_log), fp32_log);
  ASSERT_EQ(fp32.exit_code, 0) << fp32.output;
  ASSERT_EQ(r.losses.size(), 4u);
  EXPECT_LT(testing::max_relative_difference(r.losses, fp32.losses), std::ldexp(1.0, -8));
  EXPECT_NE(r.losses, fp32.losses);
}

TEST_F(DptrainProgram, ResumeEqualsAnUninterruptedRunBitwise) {
  ASSERT_EQ(run_command(dptrain("--steps 12 --log " + (dir_ / "full.jsonl"))).exit_code, 0);
  auto first =
      run_command(dptrain("--steps 12 --save-every 5 --save " + (dir_ / "ckpt") + " --log " + (dir_ / "part.jsonl")));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // Continue from step 10 (the latest of 5, 10 … and 12 at the end: point `latest` back at step 10).
  testing::write_text(dir_ / "ckpt/latest", "step-000010\n");
  std::filesystem::copy_file(dir_ / "part.jsonl", dir_ / "resumed.jsonl");
  auto second = run_command(dptrain("--steps 12 --resume " + (dir_ / "ckpt") + " --log " + (dir_ / "resumed.jsonl")));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from"), std::string::npos);
  EXPECT_EQ(second.output.find("changed since"), std::string::npos) << second.output;
  const auto full = testing::read_jsonl(dir_ / "full.jsonl");
  const auto resumed = testing::read_jsonl(dir_ / "resumed.jsonl");
  // resumed.jsonl = the first run's 12 steps + summary, then steps 11, 12 + summary of the resumed run.
  ASSERT_EQ(resumed.size(), 13u + 3u);
  for (int s = 10; s < 12; ++s) {
    const auto& again = resumed[13 + s - 10];
    ASSERT_EQ(again["step"], s + 1);
    EXPECT_EQ(again["loss"].get<double>(), full[s]["loss"].get<double>()) << "step " << s + 1;
    EXPECT_EQ(again["grad_norm"].get<double>(), full[s]["grad_norm"].get<double>()) << "step " << s + 1;
  }
  for (int s = 0; s < 12; ++s) EXPECT_EQ(resumed[s]["loss"].get<double>(), full[s]["loss"].get<double>());
}

// A --log the disk stops taking (here: the file-size limit, RLIMIT_FSIZE set by prlimit, with SIGXFSZ ignored so
// that the write fails with EFBIG) does not stop the training: one line says so, the run saves its checkpoint, and exits 2. The
// log is filled close to the limit first (Open MPI's own files need a few MiB of it), then appended by a resumed run.
TEST_F(DptrainProgram, ALogTheDiskStopsTakingIsSaidOnceAndTheRunExits2) {
  ASSERT_EQ(run_command(dptrain("--steps 2 --save " + (dir_ / "ckpt"))).exit_code, 0);
  constexpr std::size_t kLimitBytes = 4 << 20;
  std::string filler;
  while (filler.size() < kLimitBytes - 2048) filler += "{\"filler\":true}\n";
  testing::write_text(dir_ / "full.jsonl", filler);
  const auto r = run_command(fmt::format("trap '' XFSZ; exec prlimit --fsize={} -- ", kLimitBytes) +
                             dptrain("--quiet --eval-every 0 --steps 40 --resume " + (dir_ / "ckpt") + " --save " +
                                     (dir_ / "ckpt") + " --log " + (dir_ / "full.jsonl")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(testing::occurrences(r.output, "dptrain: --log: cannot write '" + (dir_ / "full.jsonl") +
                                               "': File too large; the run goes on without its log and will exit "
                                               "with 2"),
            1)
      << r.output;
  EXPECT_EQ(testing::file_bytes(dir_ / "ckpt/latest"), "step-000040\n");
}

// Resuming with another --steps (or --lr, ...) is allowed, and the start-up line says what changed: the schedule
// follows the new values, so the run is not the saved one's continuation.
TEST_F(DptrainProgram, ResumeWithChangedSettingsSaysWhatChanged) {
  ASSERT_EQ(run_command(dptrain("--steps 3 --save " + (dir_ / "ckpt"))).exit_code, 0);
  const auto r = run_command(dptrain("--steps 5 --lr 0.005 --no-overlap --resume " + (dir_ / "ckpt")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from '" + (dir_ / "ckpt") +
                          "' at step 3; changed since it was saved: --steps 5 (was 3), --lr 0.005 (was 0.003), "
                          "--overlap off (was auto)"),
            std::string::npos)
      << r.output;
  // The data's path is recorded beside the options, and named too when it changes.
  std::filesystem::copy_file(dir_ / "corpus.txt", dir_ / "corpus-2.txt");
  const auto data =
      run_command(dptrain("--steps 6 --data " + (dir_ / "corpus-2.txt") + " --resume " + (dir_ / "ckpt")));
  ASSERT_EQ(data.exit_code, 0) << data.output;
  EXPECT_NE(data.output.find("changed since it was saved: --steps 6 (was 3), --data " + (dir_ / "corpus-2.txt") +
                             " (was " + (dir_ / "corpus.txt") + ")"),
            std::string::npos)
      << data.output;
}

// A finished run resumed as it was (a job started again): nothing to train, said in one line, exit 0, and no
// summary of no steps ("final loss nan").
TEST_F(DptrainProgram, ResumingAtTheLastStepHasNothingToTrain) {
  ASSERT_EQ(run_command(dptrain("--steps 3 --save " + (dir_ / "ckpt"))).exit_code, 0);
  const auto r = run_command(dptrain("--steps 3 --resume " + (dir_ / "ckpt")));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dptrain | the checkpoint in '" + (dir_ / "ckpt") +
                          "' is at step 3 = --steps: nothing to train (raise --steps to continue)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("nan"), std::string::npos) << r.output;
}

TEST_F(DptrainProgram, CheckpointOfAnotherShapeIsRefusedAndNothingIsOverwritten) {
  ASSERT_EQ(run_command(dptrain("--steps 2 --save " + (dir_ / "ckpt"))).exit_code, 0);
  const auto before = std::filesystem::last_write_time(dir_ / "ckpt/step-000002/model.safetensors");
  const auto r =
      run_command(dptrain("--steps 4 --width 48 --resume " + (dir_ / "ckpt") + " --save " + (dir_ / "ckpt")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("holds another model shape"), std::string::npos) << r.output;
  EXPECT_EQ(std::filesystem::last_write_time(dir_ / "ckpt/step-000002/model.safetensors"), before);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "ckpt/step-000004"));
}

TEST_F(DptrainProgram, HelpExitsZero) {
  const auto r = run_command(testing::binary_dir() + "/dptrain --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("--allreduce"), std::string::npos);
}

}  // namespace
}  // namespace dptrain
