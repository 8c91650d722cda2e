// SIGTERM and SIGINT end to end: the step in progress finishes, a checkpoint of it is saved, the exit code is
// 128 + the signal (what mpirun reports is checked separately), and the run resumes from that checkpoint.
// Every process is started and signalled by its PID, and every wait is bounded.
#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "dptrain/compute/cpu_gemm.hpp"
#include "test_support.hpp"

namespace dptrain {
namespace {

using namespace std::chrono_literals;
using testing::run_command;

// A process started through `sh -c exec ...` (so the PID is the command's own) with its output in a file.
class Spawned {
 public:
  Spawned(const std::string& command, const std::string& output) : output_(output) {
    const std::string line = "exec " + command + " > " + output + " 2>&1";
    const char* argv[] = {"/bin/sh", "-c", line.c_str(), nullptr};
    EXPECT_EQ(posix_spawn(&pid_, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0) << line;
  }
  ~Spawned() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // Waits until the output matches `pattern`; returns the first match's group 1, or "" after `limit`.
  std::string wait_for(const std::string& pattern, std::chrono::seconds limit) const {
    const std::regex re(pattern);
    for (const auto end = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < end;) {
      std::smatch match;
      const std::string text = output();
      if (std::regex_search(text, match, re)) return match.size() > 1 ? match[1].str() : match[0].str();
      std::this_thread::sleep_for(50ms);
    }
    return {};
  }
  void signal(int number) const { ::kill(pid_, number); }
  // Whether the process has a handler for `number` (/proc/PID/status, SigCgt): it has reached main().
  bool catches(int number) const {
    std::ifstream status(fmt::format("/proc/{}/status", pid_));
    for (std::string line; std::getline(status, line);)
      if (line.rfind("SigCgt:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> (number - 1)) & 1;
    return false;
  }
  // `count` signals, `gap` apart: many of them land in the middle of whatever the process is doing.
  void signals(int number, int count, std::chrono::microseconds gap) const {
    for (int i = 0; i < count; ++i) {
      ::kill(pid_, number);
      std::this_thread::sleep_for(gap);
    }
  }
  // The exit status, or -1 when the process did not exit within `limit` (or was killed by a signal).
  int wait_exit(std::chrono::seconds limit) {
    for (const auto end = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < end;) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(50ms);
    }
    return -1;
  }
  std::string output() const { return std::filesystem::exists(output_) ? testing::file_bytes(output_) : ""; }

 private:
  std::string output_;
  pid_t pid_ = -1;
  bool exited_ = false;
};

class StopSignal : public testing::TinyRunTest {
 protected:
  StopSignal() : TinyRunTest("signal", "--eval-every 0 --check-every 0 --peak-tflops 1 ") {}

  // Starts `command`, signals it once a step has been reported, and checks the stop: the exit code, the line
  // and a checkpoint of the step reached. Returns that step.
  // `signals` > 1: a burst of that many, 20 µs apart.
  int stop_after_a_step(const std::string& command, int signal, int expected_exit, const std::string& name,
                        int signals = 1) {
    Spawned run(command, dir_ / (name + ".out"));
    const std::string started = run.wait_for(R"(step (\d+)/100000 )", 120s);
    EXPECT_FALSE(started.empty()) << run.output();
    if (started.empty()) return -1;
    run.signals(signal, signals, 20us);
    EXPECT_EQ(run.wait_exit(60s), expected_exit) << run.output();
    const std::string output = run.output();
    std::smatch match;
    const std::regex stopped(fmt::format(R"(dptrain: stopped by {} after step (\d+) of 100000; checkpoint saved in)",
                                         signal == SIGTERM ? "SIGTERM" : "SIGINT"));
    EXPECT_TRUE(std::regex_search(output, match, stopped)) << output;
    if (match.empty()) return -1;
    const int step = std::stoi(match[1].str());
    EXPECT_GE(step, std::stoi(started));
    EXPECT_EQ(testing::file_bytes(dir_ / (name + "/latest")), fmt::format("step-{:06d}\n", step)) << output;
    EXPECT_TRUE(std::filesystem::exists(dir_ / fmt::format("{}/step-{:06d}/model.safetensors", name, step)));
    return step;
  }
};

TEST_F(StopSignal, SigtermFinishesTheStepSavesAndExits143ThenResumes) {
  const int step = stop_after_a_step(dptrain("--steps 100000 --save " + (dir_ / "term")), SIGTERM, 128 + SIGTERM,
                                     "term");
  ASSERT_GT(step, 0);
  // Resumed, the run continues at the next step (the checkpoint's step count and --steps agree).
  const auto resumed = run_command(dptrain(fmt::format("--steps {} --resume {}", step + 2, dir_ / "term")));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find(fmt::format("resumed from '{}' at step {}", dir_ / "term", step)), std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find(fmt::format("step {}/{} ", step + 2, step + 2)), std::string::npos) << resumed.output;
}

// A request that comes during a save is agreed right after it: the run stops after that step, whose checkpoint is
// the one just written, not after one more step and one more save. (19M parameters: a save of 0.25 GB takes long
// enough for the signal to land inside it.)
TEST_F(StopSignal, SigtermDuringASaveStopsAfterThatStep) {
  Spawned run(dptrain("--steps 100000 --width 512 --layers 6 --heads 8 --batch 4 --eval-every 0 --save-every 1 "
                      "--save " +
                      (dir_ / "saving")),
              dir_ / "saving.out");
  const std::string temporary = dir_ / "saving/.step-000001.tmp";
  for (const auto end = std::chrono::steady_clock::now() + 60s; !std::filesystem::exists(temporary);) {
    ASSERT_LT(std::chrono::steady_clock::now(), end) << "no save of step 1 after 60 s\n" << run.output();
    std::this_thread::sleep_for(1ms);
  }
  run.signal(SIGTERM);
  EXPECT_EQ(run.wait_exit(60s), 128 + SIGTERM) << run.output();
  EXPECT_NE(run.output().find("dptrain: stopped by SIGTERM after step 1 of 100000; checkpoint saved in"),
            std::string::npos)
      << run.output();
  EXPECT_EQ(testing::file_bytes(dir_ / "saving/latest"), "step-000001\n");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "saving/step-000002"));
}

TEST_F(StopSignal, SigintExits130WithACheckpoint) {
  EXPECT_GT(stop_after_a_step(dptrain("--steps 100000 --save " + (dir_ / "int")), SIGINT, 128 + SIGINT, "int"), 0);
}

// Stop signals that arrive while compute threads run a library's generated code. Before the compute threads
// blocked the stop signals, a burst of SIGINT during a step (a handler's frame on the stack of a thread inside
// oneDNN's sgemm) corrupted the heap in 2 of 6 runs of this shape; 8 runs per library, at 1 and 2 threads, each
// with its exit code and checkpoint, would have seen it with probability 1 − (2/3)⁸ ≈ 96 %.
TEST_F(StopSignal, SignalsDuringGemmsNeverCorruptTheRun) {
  for (const std::string& gemm : cpu_gemm_names())
    for (int i = 0; i < 8; ++i) {
      const std::string name = fmt::format("{}-{}", gemm, i);
      const std::string flags =
          fmt::format("--steps 100000 --width 256 --heads 4 --seq 128 --batch 8 --threads {} --cpu-gemm {} --save {}",
                      1 + i % 2, gemm, dir_ / name);
      EXPECT_GT(stop_after_a_step(dptrain(flags), SIGINT, 128 + SIGINT, name, 2000), 0) << flags;
    }
}

// Without --save nothing is saved, and the line says so; the summary record (with what stopped the run) and the
// trace of the steps run are written all the same.
TEST_F(StopSignal, WithoutSaveTheLineSaysNothingWasSavedAndTheSummaryAndTraceAreWritten) {
  Spawned run(dptrain("--steps 100000 --log " + (dir_ / "nosave.jsonl") + " --trace " + (dir_ / "nosave.json")),
              dir_ / "nosave.out");
  ASSERT_FALSE(run.wait_for(R"(step (\d+)/100000 )", 120s).empty()) << run.output();
  run.signal(SIGTERM);
  EXPECT_EQ(run.wait_exit(60s), 128 + SIGTERM) << run.output();
  std::smatch match;
  const std::string output = run.output();
  ASSERT_TRUE(std::regex_search(output, match, std::regex(R"(dptrain: stopped by SIGTERM after step (\d+) of 100000; )"
                                                          R"(nothing saved \(no --save\))")))
      << output;
  const auto records = testing::read_jsonl(dir_ / "nosave.jsonl");
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.back()["event"], "summary");
  EXPECT_EQ(records.back()["stopped_by"], "SIGTERM");
  EXPECT_EQ(records.back()["steps"], std::stoi(match[1].str()));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "nosave.json"));
}

// A signal during set-up (here while --cpu-gemm auto times the libraries, after main() has begun) is a stop request
// too: the run stops before its first step, with its line, instead of dying silently.
TEST_F(StopSignal, SigtermDuringSetUpStopsBeforeTheFirstStep) {
  const std::string earlier = "{\"step\": 1, \"loss\": 5.5}\n";  // an earlier run's log: left as it was
  testing::write_text(dir_ / "setup.jsonl", earlier);
  Spawned run(
      dptrain("--steps 100000 --cpu-gemm auto --save " + (dir_ / "setup") + " --log " + (dir_ / "setup.jsonl")),
      dir_ / "setup.out");
  for (const auto end = std::chrono::steady_clock::now() + 30s; !run.catches(SIGTERM);) {
    ASSERT_LT(std::chrono::steady_clock::now(), end) << "no SIGTERM handler after 30 s\n" << run.output();
    std::this_thread::sleep_for(2ms);
  }
  run.signal(SIGTERM);
  EXPECT_EQ(run.wait_exit(60s), 128 + SIGTERM) << run.output();
  EXPECT_NE(run.output().find("dptrain: stopped by SIGTERM during set-up, before step 1; nothing trained, nothing "
                              "saved"),
            std::string::npos)
      << run.output();
  EXPECT_FALSE(std::filesystem::exists(dir_ / "setup/latest"));
  EXPECT_EQ(testing::file_bytes(dir_ / "setup.jsonl"), earlier);
}

// The first SIGINT waits for the step (here 160,000 windows in 20,000 micro-steps: 5 s at 530k tokens/s on a
// 2-core AVX-512 EPYC); a second one, a second later, ends the process at once without saving: the way out of a
// stop that would take too long.
TEST_F(StopSignal, ASecondSigintEndsTheProcessAtOnce) {
  Spawned run(dptrain("--steps 1 --batch 160000 --grad-accum 20000 --save " + (dir_ / "twice")), dir_ / "twice.out");
  ASSERT_FALSE(run.wait_for(R"(peak [0-9.]+ GFLOP/s per rank)", 120s).empty()) << run.output();
  std::this_thread::sleep_for(300ms);  // inside the step
  run.signal(SIGINT);
  std::this_thread::sleep_for(1200ms);
  run.signal(SIGINT);
  EXPECT_EQ(run.wait_exit(10s), 128 + SIGINT) << run.output();
  EXPECT_NE(run.output().find("dptrain: a second SIGINT: exiting now, without saving"), std::string::npos)
      << run.output();
}

// A signal during a validation (here of 100 million windows, about half an hour) ends it at the next round of
// one step's windows: the step is saved and the process exits within seconds, its line saying the validation
// loss was cut short.
TEST_F(StopSignal, ALongValidationStopsWithinSecondsWithTheStepSaved) {
  Spawned run(dptrain("--steps 3 --eval-every 1 --eval-windows 100000000 --save " + (dir_ / "val")),
              dir_ / "val.out");
  ASSERT_FALSE(run.wait_for(R"(peak [0-9.]+ GFLOP/s per rank)", 120s).empty()) << run.output();
  std::this_thread::sleep_for(1s);  // step 1 takes milliseconds: its validation is running
  run.signal(SIGTERM);
  EXPECT_EQ(run.wait_exit(20s), 128 + SIGTERM) << run.output();
  const std::string output = run.output();
  EXPECT_NE(output.find("dptrain: stopped by SIGTERM after step 1 of 3 (its validation loss cut short); "
                        "checkpoint saved in"),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("\nstep 1/3 | "), std::string::npos) << output;
  EXPECT_EQ(output.find("| val "), std::string::npos) << output;  // no validation loss, in its line or the summary
  EXPECT_EQ(testing::file_bytes(dir_ / "val/latest"), "step-000001\n") << output;
}

// Open MPI's mpirun (4.1) forwards SIGTERM to the ranks after odls_base_sigkill_timeout seconds and kills them
// that long again later; it then exits 1 whatever the ranks returned. The ranks have the timeout to finish the
// step and save (10 s here; the default is 1 s, which a tiny model's step and save fit in as well). Once signalled,
// mpirun stops reading the ranks' output: a rank printing a line per step blocks on the full pipe and never gets to
// save, so a job that a scheduler may stop runs with --quiet (and --log for its records), as this one does.
TEST_F(StopSignal, SigtermToMpirunStopsBothRanksAtOneStepWithACheckpoint) {
  const std::string command = "env OMPI_MCA_odls_base_sigkill_timeout=10 " + testing::mpiexec(2, 300) + " " +
                              dptrain("--steps 100000 --batch 8 --quiet --save " + (dir_ / "mpi"));
  // `timeout` would take the signal in mpirun's place: signal mpirun itself.
  const std::string bare = command.substr(0, command.find("timeout ")) + command.substr(command.find(MPIEXEC));
  Spawned run(bare, dir_ / "mpi.out");
  ASSERT_FALSE(run.wait_for(R"(peak [0-9.]+ GFLOP/s per rank)", 120s).empty()) << run.output();
  std::this_thread::sleep_for(1s);  // steps are running (a few hundred a second)
  run.signal(SIGTERM);
  EXPECT_EQ(run.wait_exit(60s), 1) << run.output();
  std::smatch match;
  const std::string output = run.output();
  ASSERT_TRUE(std::regex_search(output, match,
                                std::regex(R"(dptrain: stopped by SIGTERM after step (\d+) of 100000; checkpoint saved in)")))
      << output;
  const int step = std::stoi(match[1].str());
  ASSERT_GT(step, 0);
  EXPECT_EQ(testing::file_bytes(dir_ / "mpi/latest"), fmt::format("step-{:06d}\n", step)) << output;
  // Both ranks wrote their shard of the same step.
  const auto resumed = run_command(testing::mpiexec(2) + " " +
                                   dptrain(fmt::format("--steps {} --batch 8 --resume {}", step + 1, dir_ / "mpi")));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find(fmt::format("resumed from '{}' at step {}", dir_ / "mpi", step)), std::string::npos)
      << resumed.output;
}

}  // namespace
}  // namespace dptrain
