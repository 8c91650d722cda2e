// Overlap, buckets and gradient accumulation end to end under mpiexec, with the fp32 wire and the ring so that
// results can be compared bit for bit: overlapping the collectives with backward, the bucket size and the number
// of micro-steps change when and in what pieces gradients travel, never the weights; the Chrome trace has every
// rank and both tracks, and each unit's collective starts after that unit's backward and (but for the last unit)
// before backward ends; bad --grad-accum and --zero end with one line and exit 2 on every rank.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "test_support.hpp"

namespace dptrain {
namespace {

using testing::file_bytes;
using testing::max_relative_difference;
using testing::run_command;

using RunResult = testing::LoggedRun;

class Overlap : public testing::TinyRunTest {
 protected:
  // Fixed link and peak: no start-up probes.
  Overlap() : TinyRunTest("overlap", "--quiet --peak-tflops 1 --link alpha=10us,bw=1GB/s ") {}

  // A run of `ranks` ranks for `steps` steps, logged; `save` (if not empty) names its checkpoint directory.
  RunResult run(int ranks, int steps, const std::string& flags, const std::string& save = "") {
    const std::string log = dir_ / fmt::format("run-{}.jsonl", counter_++);
    std::string command = testing::mpiexec(ranks) + " " +
                          dptrain(fmt::format("--steps {} --check-every 1 --log {} {}", steps, log, flags));
    if (!save.empty()) command += " --save " + (dir_ / save);
    RunResult result = testing::run_logged(command, log);
    EXPECT_EQ(result.losses.size(), std::size_t(steps)) << command << "\n" << result.output;
    return result;
  }
  // The BF16 weights a run saved at its last step.
  std::string weights(const std::string& save, int step) const {
    const std::string bytes = file_bytes(dir_ / fmt::format("{}/step-{:06d}/model.safetensors", save, step));
    EXPECT_GT(bytes.size(), 34176u * 2) << save;
    return bytes;
  }
  int counter_ = 0;
};

constexpr const char* kExact = "--grad-dtype fp32 --allreduce ring ";

// Overlap changes when each unit's collective is issued, not what it adds: the same collectives over the same
// buffers in the same order, so the same bits.
TEST_F(Overlap, OnAndOffGiveBitwiseIdenticalWeightsAtThreeAndFourRanks) {
  for (int ranks : {3, 4}) {
    SCOPED_TRACE(fmt::format("{} ranks", ranks));
    const std::string flags = fmt::format("{} --batch 12 --bucket-mb 0", kExact);
    const RunResult on = run(ranks, 6, flags + " --overlap on", fmt::format("on{}", ranks));
    const RunResult off = run(ranks, 6, flags + " --no-overlap", fmt::format("off{}", ranks));
    EXPECT_EQ(on.summary["overlap"], true);
    EXPECT_EQ(off.summary["overlap"], false);
    EXPECT_EQ(on.summary["units"].size(), 4u);  // final norm, block 1, block 0, embeddings
    EXPECT_EQ(on.losses, off.losses);
    EXPECT_EQ(on.grad_norms, off.grad_norms);
    EXPECT_TRUE(weights(fmt::format("on{}", ranks), 6) == weights(fmt::format("off{}", ranks), 6));
  }
}

// At 2 ranks every element is the sum of the same two partial gradients (a + b = b + a in fp32), wherever its unit
// starts and however it is padded: the bucket size leaves the weights bitwise unchanged. Four blocks, so that the
// buckets make different plans: 0 and 0.01 MiB one unit per block (an fp32 block is 50,816 bytes), 0.1 MiB
// (104,857 bytes) two blocks per unit, 25 MiB all four in one. (The gradient norms are not compared: each rank
// sums the squares of its own slices, which the plan draws differently, so the norm's last bits differ; the clip
// scale, rounded to fp32, comes out the same.)
TEST_F(Overlap, BucketSizesGiveBitwiseIdenticalWeightsAtTwoRanks) {
  const std::vector<std::pair<std::string, std::size_t>> buckets = {{"0", 6}, {"0.01", 6}, {"0.1", 4}, {"25", 3}};
  std::vector<RunResult> runs;
  for (const auto& [mb, units] : buckets) {
    runs.push_back(run(2, 6, fmt::format("{} --layers 4 --batch 12 --bucket-mb {}", kExact, mb), "bucket" + mb));
    EXPECT_EQ(runs.back().summary["units"].size(), units) << mb;
  }
  const std::string reference = weights("bucket0", 6);
  for (std::size_t i = 1; i < buckets.size(); ++i) {
    EXPECT_EQ(runs[i].losses, runs[0].losses) << "--bucket-mb " << buckets[i].first;
    EXPECT_TRUE(weights("bucket" + buckets[i].first, 6) == reference) << "--bucket-mb " << buckets[i].first;
  }
}

// From 3 ranks on, the ring adds an element's partial sums in an order set by the chunk of its unit it falls in,
// so another unit boundary reorders fp32 additions: equal to rounding, not to the bit (measured 1.6e-8 relative
// over these 6 steps).
TEST_F(Overlap, BucketSizesAgreeToRoundingAtThreeRanks) {
  const RunResult per_block = run(3, 6, fmt::format("{} --batch 12 --bucket-mb 0", kExact));
  const RunResult merged = run(3, 6, fmt::format("{} --batch 12 --bucket-mb 25", kExact));
  EXPECT_EQ(per_block.summary["units"].size(), 4u);
  EXPECT_EQ(merged.summary["units"].size(), 3u);
  EXPECT_LT(max_relative_difference(merged.losses, per_block.losses), 1e-6);
}

// K micro-steps over the same global batch: each rank's windows are processed window by window into one fp32
// accumulator in the same order however they are grouped, and only the last micro-step communicates.
TEST_F(Overlap, GradientAccumulationGivesBitwiseIdenticalWeights) {
  for (int ranks : {1, 3}) {
    SCOPED_TRACE(fmt::format("{} ranks", ranks));
    std::vector<RunResult> runs;
    for (int k : {1, 2, 4}) {
      const std::string save = fmt::format("accum{}-{}", ranks, k);
      runs.push_back(run(ranks, 5, fmt::format("{} --batch 24 --bucket-mb 0 --grad-accum {}", kExact, k), save));
      EXPECT_EQ(runs.back().summary["grad_accum"], k);
    }
    const std::string reference = weights(fmt::format("accum{}-1", ranks), 5);
    for (int k : {2, 4}) {
      EXPECT_TRUE(weights(fmt::format("accum{}-{}", ranks, k), 5) == reference) << "--grad-accum " << k;
      // The same gradient, so the same norm: the first place a difference shows.
      EXPECT_EQ(runs[k / 2].grad_norms, runs[0].grad_norms) << "--grad-accum " << k;
    }
    // The loss is summed per micro-step, so its last bits may depend on the grouping.
    EXPECT_LT(max_relative_difference(runs[1].losses, runs[0].losses), 1e-12);
    EXPECT_LT(max_relative_difference(runs[2].losses, runs[0].losses), 1e-12);
  }
}

// The trace of a ZeRO-3 run of 3 ranks: valid JSON, every rank's process and both threads named, complete events
// with step, unit and bytes, and the collectives' names and sizes those of the plan's units.
TEST_F(Overlap, TraceHasEveryRankAndBothTracks) {
  const std::string trace = dir_ / "trace3.json";
  const RunResult r =
      run(3, 2, fmt::format("{} --batch 12 --bucket-mb 0 --zero 3 --overlap on --trace {}", kExact, trace));
  ASSERT_EQ(r.exit_code, 0);
  std::ifstream in(trace);
  ASSERT_TRUE(in) << trace;
  nlohmann::json json;
  ASSERT_NO_THROW(json = nlohmann::json::parse(in));
  EXPECT_EQ(json["displayTimeUnit"], "ms");
  ASSERT_TRUE(json["traceEvents"].is_array());
  const nlohmann::json& units = r.summary["units"];
  ASSERT_EQ(units.size(), 4u);
  std::set<int> named_processes;
  std::map<int, std::set<int>> named_threads, used_threads;
  std::map<std::string, int> comm_by_op;
  std::map<int, std::vector<std::pair<double, double>>> compute_phases;  // per rank: (ts, dur) in µs, not waits
  std::map<std::string, std::map<int, std::vector<std::pair<double, double>>>> comm_spans;  // name → rank → (ts, end)
  const std::set<std::string> compute_names = {"forward",
                                               "backward head + final norm",
                                               "backward block 1",
                                               "backward block 0",
                                               "backward embeddings",
                                               "optimizer",
                                               "wait: gradient",
                                               "wait: weights",
                                               "validation",
                                               "weight check"};
  for (const auto& e : json["traceEvents"]) {
    const int pid = e.at("pid").get<int>();
    if (e.at("ph") == "M") {
      if (e.at("name") == "process_name") named_processes.insert(pid);
      if (e.at("name") == "thread_name") named_threads[pid].insert(e.at("tid").get<int>());
      continue;
    }
    ASSERT_EQ(e.at("ph"), "X") << e.dump();
    const int tid = e.at("tid").get<int>();
    used_threads[pid].insert(tid);
    EXPECT_GE(e.at("ts").get<double>(), 0.0) << e.dump();
    const int step = e.at("args").at("step").get<int>();
    EXPECT_TRUE(step == 1 || step == 2) << e.dump();
    const std::string name = e.at("name");
    if (tid == 0 && name.rfind("wait:", 0) != 0)
      compute_phases[pid].push_back({e.at("ts").get<double>(), e.at("dur").get<double>()});
    if (tid == 0) {
      EXPECT_TRUE(compute_names.count(name)) << e.dump();
      continue;
    }
    ASSERT_EQ(tid, 1) << e.dump();
    const int unit = e.at("args").at("unit").get<int>();
    ASSERT_TRUE(unit >= 0 && unit < 4) << e.dump();
    const std::string op = name.substr(0, name.find(' '));
    EXPECT_EQ(name, op + " " + units[unit]["name"].get<std::string>()) << e.dump();
    // ZeRO-3 reduce-scatters the fp32 gradient and all-gathers the BF16 weights, each over a whole padded unit.
    const std::size_t element = op == "reduce_scatter" ? 4 : 2;
    EXPECT_TRUE(op == "reduce_scatter" || op == "all_gather") << e.dump();
    EXPECT_EQ(e.at("args").at("bytes").get<std::size_t>(), units[unit]["padded"].get<std::size_t>() * element)
        << e.dump();
    ++comm_by_op[op];
    comm_spans[name][pid].push_back({e.at("ts").get<double>(), e.at("ts").get<double>() + e.at("dur").get<double>()});
  }
  EXPECT_EQ(named_processes, (std::set<int>{0, 1, 2}));
  // One clock for the ranks of a host: the k-th collective of a name, which needs every rank's data, starts on every
  // rank before it ends on any (1 µs for the printed rounding). With each rank's own origin, one taken 159 ms late
  // (a barrier left late on busy cores) broke this for every collective of the run.
  for (auto& [name, per_rank] : comm_spans) {
    ASSERT_EQ(per_rank.size(), 3u) << name;
    for (auto& [pid, spans] : per_rank) {
      std::sort(spans.begin(), spans.end());
      ASSERT_EQ(spans.size(), per_rank.begin()->second.size()) << name << " rank " << pid;
    }
    for (std::size_t k = 0; k < per_rank.begin()->second.size(); ++k) {
      double latest_start = 0, earliest_end = INFINITY;
      for (const auto& [pid, spans] : per_rank) {
        latest_start = std::max(latest_start, spans[k].first);
        earliest_end = std::min(earliest_end, spans[k].second);
      }
      EXPECT_LE(latest_start, earliest_end + 1.0) << name << " #" << k;
    }
  }
  // The compute thread's phases (forward, each unit's backward, optimizer) follow one another: sorted by start,
  // none has a negative length or begins before the previous one ended (1 µs for the printed rounding).
  for (auto& [pid, phases] : compute_phases) {
    std::sort(phases.begin(), phases.end());
    for (std::size_t i = 0; i < phases.size(); ++i) {
      EXPECT_GE(phases[i].second, 0.0) << "rank " << pid << " phase " << i;
      if (i > 0) {
        EXPECT_GE(phases[i].first, phases[i - 1].first + phases[i - 1].second - 1.0) << "rank " << pid;
      }
    }
  }
  for (int pid = 0; pid < 3; ++pid) {
    EXPECT_EQ(named_threads[pid], (std::set<int>{0, 1})) << pid;
    EXPECT_EQ(used_threads[pid], (std::set<int>{0, 1})) << pid;
  }
  // Per rank and step: one reduce-scatter per unit; at least two all-gathers per unit (before forward and before
  // backward), plus those of the final check and evaluation.
  EXPECT_EQ(comm_by_op["reduce_scatter"], 3 * 2 * 4);
  EXPECT_GE(comm_by_op["all_gather"], 3 * 2 * 4 * 2);
}

struct Span {
  double start, end;  // µs
};

// A trace's backward events and collectives per (rank, step) and unit, and when each step's backward ended.
struct StepSpans {
  std::map<std::pair<int, int>, std::map<int, std::vector<Span>>> backward, collective;
  std::map<std::pair<int, int>, double> backward_end;  // the end of "backward embeddings"
};

StepSpans read_spans(const std::string& trace) {
  std::ifstream in(trace);
  EXPECT_TRUE(bool(in)) << trace;
  const nlohmann::json json = nlohmann::json::parse(in);
  StepSpans spans;
  for (const auto& e : json["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const auto key = std::pair{e["pid"].get<int>(), e["args"]["step"].get<int>()};
    const Span span{e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()};
    const std::string name = e["name"];
    if (e["tid"] == 1) spans.collective[key][e["args"]["unit"].get<int>()].push_back(span);
    if (e["tid"] == 0 && name.rfind("backward", 0) == 0) {
      spans.backward[key][e["args"]["unit"].get<int>()].push_back(span);
      if (name == "backward embeddings") spans.backward_end[key] = std::max(spans.backward_end[key], span.end);
    }
  }
  return spans;
}

// Per rank and step: unit u's collective starts after u's last backward event has ended (it is launched when the
// gradient is complete: certain by construction, both times come from the one clock in that order), and while the
// step's backward still runs: communication overlaps the rest of backward. "The step's backward" ends when the last
// rank's does (the ranks share the node's clock and one origin): a collective on a rank that is ahead waits for
// its peer to reach the same unit, so on two cores shared by both ranks' compute and comm threads a rank's own
// backward may end first. That second half is asserted for every unit that has a whole block's backward after it
// (final norm, blocks 3, 2, 1: about 20 ms each here, against a collective of 0.8 MB). The unit of block 0 has only
// the embedding lookup's backward after it (a scatter-add of the rows, well under a millisecond), shorter than
// waking the comm thread on busy cores: measured with a tiny model, it started up to 8 ms (median 110 µs) late in
// 4 of 15 runs. The last unit, the embeddings, can only start after backward.
TEST_F(Overlap, EachCollectiveStartsAfterItsUnitsBackwardAndWhileBackwardRuns) {
  const std::string trace = dir_ / "trace2.json";
  const RunResult r = run(
      2, 3,
      fmt::format("{} --layers 4 --width 256 --heads 4 --seq 128 --batch 8 --bucket-mb 0 --overlap on --trace {}",
                  kExact, trace));
  ASSERT_EQ(r.exit_code, 0);
  StepSpans spans = read_spans(trace);
  ASSERT_EQ(spans.collective.size(), 2u * 3u);  // 2 ranks × 3 steps
  std::map<int, double> step_backward_end;      // the last rank's
  for (const auto& [key, end] : spans.backward_end)
    step_backward_end[key.second] = std::max(step_backward_end[key.second], end);
  for (const auto& [key, units] : spans.collective) {
    const auto [rank, step] = key;
    ASSERT_EQ(units.size(), 6u);  // final norm, blocks 3, 2, 1, 0, embeddings
    for (const auto& [unit, collectives] : units) {
      SCOPED_TRACE(fmt::format("rank {} step {} unit {}", rank, step, unit));
      ASSERT_EQ(collectives.size(), 1u);
      ASSERT_TRUE(spans.backward[key].count(unit));
      double unit_backward_end = 0;
      for (const Span& s : spans.backward[key][unit]) unit_backward_end = std::max(unit_backward_end, s.end);
      EXPECT_GE(collectives[0].start, unit_backward_end);
      if (unit + 2 < int(units.size())) {
        EXPECT_LT(collectives[0].start, step_backward_end[step])
            << "the collective started " << collectives[0].start - step_backward_end[step]
            << " µs after the step's backward ended";
      }
    }
  }
}

// --no-overlap: every collective of a step starts after that step's backward has ended (certain by construction).
TEST_F(Overlap, WithoutOverlapEveryCollectiveStartsAfterBackwardEnds) {
  const std::string trace = dir_ / "trace-no-overlap.json";
  const RunResult r = run(2, 3, fmt::format("{} --batch 12 --bucket-mb 0 --no-overlap --trace {}", kExact, trace));
  ASSERT_EQ(r.exit_code, 0);
  StepSpans spans = read_spans(trace);
  ASSERT_EQ(spans.collective.size(), 2u * 3u);
  for (const auto& [key, units] : spans.collective) {
    ASSERT_EQ(units.size(), 4u);
    for (const auto& [unit, collectives] : units) {
      ASSERT_EQ(collectives.size(), 1u);
      EXPECT_GE(collectives[0].start, spans.backward_end[key])
          << fmt::format("rank {} step {} unit {}", key.first, key.second, unit);
    }
  }
}

// --overlap auto (the default): steps 2-7 alternate on and off, the slower setting's median loses (said after step
// 7's line), and the run trains bitwise what a run with overlap on throughout trains (at two ranks and at an odd
// three).
TEST_F(Overlap, AutoTimesBothSettingsKeepsTheFasterAndTrainsTheSameBits) {
  for (int ranks : {2, 3}) {
    SCOPED_TRACE(fmt::format("{} ranks", ranks));
    const std::string flags = fmt::format("{} --batch 12 --bucket-mb 0", kExact);
    const RunResult on = run(ranks, 9, flags + " --overlap on");
    const RunResult automatic = run(ranks, 9, flags + " --quiet=false");  // its step lines, for the order
    EXPECT_EQ(automatic.losses, on.losses);
    EXPECT_EQ(automatic.grad_norms, on.grad_norms);
    const nlohmann::json& choice = automatic.summary["overlap_choice"];
    EXPECT_EQ(choice["mode"], "auto");
    EXPECT_EQ(choice["decided"], true);
    const auto on_ms = choice["trial_on_ms"].get<std::vector<double>>();
    const auto off_ms = choice["trial_off_ms"].get<std::vector<double>>();
    ASSERT_EQ(on_ms.size(), 3u);
    ASSERT_EQ(off_ms.size(), 3u);
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[1];
    };
    EXPECT_EQ(choice["overlap"], median(on_ms) <= median(off_ms));
    EXPECT_EQ(automatic.summary["overlap"], choice["overlap"]);
    // The choice is said after the line of step 7, the trial's last (run with the setting it tried), before step 8's.
    const std::size_t said = automatic.output.find("overlap auto: "), step7 = automatic.output.find("step 7/9 |"),
                      step8 = automatic.output.find("step 8/9 |");
    ASSERT_TRUE(said != std::string::npos && step7 != std::string::npos && step8 != std::string::npos)
        << automatic.output;
    EXPECT_LT(step7, said) << automatic.output;
    EXPECT_LT(said, step8) << automatic.output;
    // The trial's times are the steps' own (the slowest rank's, which rank 0's log cannot exceed).
    for (double ms : on_ms) EXPECT_GT(ms, 0.0);
    EXPECT_EQ(on.summary["overlap_choice"]["mode"], "on");
    EXPECT_EQ(on.summary["overlap_choice"].count("trial_on_ms"), 0u);
  }
}

TEST_F(Overlap, BadGradAccumAndZeroStageEndWithOneLineOnEveryRank) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--batch 12 --grad-accum 8",
       "dptrain: --batch 12 is not divisible by ranks × --grad-accum = 3 × 8: every micro-step needs the same "
       "number of windows"},
      {"--batch 12 --grad-accum 0", "dptrain: --grad-accum must be at least 1, got 0"},
      {"--batch 12 --zero 4", "dptrain: --zero: stage 4 does not exist (expected 0, 1, 2 or 3)"},
      {"--batch 12 --zero -1", "dptrain: --zero: stage -1 does not exist (expected 0, 1, 2 or 3)"},
      {"--batch 12 --overlap sometimes", "dptrain: --overlap: unknown mode 'sometimes' (expected on, off or auto)"},
      {"--batch 12 --overlap on --no-overlap", "dptrain: --no-overlap contradicts --overlap on (give one of them)"},
      {"--batch 12 --matmul-epilogues sometimes",
       "dptrain: --matmul-epilogues: unknown mode 'sometimes' (expected fused or composed)"},
  };
  for (const auto& [flags, message] : cases) {
    SCOPED_TRACE(flags);
    // The job: exit code 2 and exactly the one line.
    const auto job = run_command(testing::mpiexec(3) + " -q " + dptrain(flags));
    EXPECT_EQ(job.exit_code, 2) << job.output;
    EXPECT_EQ(job.output, message + "\n");
    // Every rank's process ends by itself with code 2: each rank runs under a shell that reports dptrain's exit
    // code and then exits 0, so mpiexec has no reason to kill anyone.
    const auto ranks =
        run_command(testing::mpiexec(3) + " -q sh -c '" + dptrain(flags) + "; echo \"rank exited $?\"'");
    EXPECT_EQ(ranks.exit_code, 0) << ranks.output;
    std::size_t exited = 0;
    for (std::size_t at = 0; (at = ranks.output.find("rank exited 2\n", at)) != std::string::npos; ++at) ++exited;
    EXPECT_EQ(exited, 3u) << ranks.output;
    EXPECT_EQ(ranks.output.find("rank exited 0"), std::string::npos) << ranks.output;
  }
}

}  // namespace
}  // namespace dptrain
