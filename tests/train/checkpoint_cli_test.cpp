// Checkpoint integrity through dptrain itself: --save refused at set-up (already holds checkpoints, a regular file
// in its path, a read-only filesystem for every rank or for one), --overwrite and --keep-last, a run killed with SIGKILL while it saves every step resumes from a
// valid `latest`, and a damaged checkpoint (flipped byte in a shard, a duplicated shard, bad meta.json) ends
// every rank with exit 2 and one line naming the file.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "dptrain/train/checkpoint_meta.hpp"
#include "test_support.hpp"

namespace dptrain {
namespace {

namespace fs = std::filesystem;
using testing::run_command;

class CheckpointRuns : public testing::TinyRunTest {
 protected:
  CheckpointRuns() : TinyRunTest("ckpt-runs", "--quiet --peak-tflops 1 --link alpha=10us,bw=1GB/s --eval-every 0 ") {}
  static nlohmann::json meta(const std::string& step_dir) {
    return nlohmann::json::parse(testing::file_bytes(step_dir + "/meta.json"));
  }
  static std::vector<std::string> entries(const std::string& dir) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

TEST_F(CheckpointRuns, AFreshRunDoesNotReplaceCheckpointsWithoutOverwrite) {
  const std::string save = dir_ / "ckpt";
  ASSERT_EQ(run_command(dptrain("--steps 2 --save " + save)).exit_code, 0);
  const std::string before = testing::file_bytes(save + "/step-000002/model.safetensors");
  const auto refused = run_command(dptrain("--steps 3 --save " + save));
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find(fmt::format("--save: '{}' already holds checkpoints (latest: step-000002); pass "
                                            "--overwrite to replace them, --resume {} to continue from them, or "
                                            "another --save directory",
                                            save, save)),
            std::string::npos)
      << refused.output;
  EXPECT_EQ(refused.output.find("dptrain | ZeRO"), std::string::npos) << "refused after set-up: " << refused.output;
  EXPECT_EQ(testing::file_bytes(save + "/step-000002/model.safetensors"), before);
  // Resuming from it continues in place; --overwrite replaces the earlier run's folders once it has its own.
  EXPECT_EQ(run_command(dptrain("--steps 3 --resume " + save + " --save " + save)).exit_code, 0);
  EXPECT_EQ(entries(save), (std::vector<std::string>{".dptrain.lock", "latest", "step-000002", "step-000003"}));
  const auto replaced = run_command(dptrain("--steps 1 --seed 7 --overwrite --save " + save));
  EXPECT_EQ(replaced.exit_code, 0) << replaced.output;
  EXPECT_EQ(entries(save), (std::vector<std::string>{".dptrain.lock", "latest", "step-000001"}));
  EXPECT_EQ(meta(save + "/step-000001")["training"]["seed"], 7);
}

// A --save inside another checkpoint's step folder (pruning it would take this run's checkpoints along), or named
// as a save's temporary (which a run saving into the directory above removes at start-up), is refused at set-up.
TEST_F(CheckpointRuns, ASaveWhereAnotherRunsCleanUpWouldRemoveItIsRefused) {
  const std::string outer = dir_ / "outer";
  ASSERT_EQ(run_command(dptrain("--steps 1 --save " + outer)).exit_code, 0);
  for (const auto& [save, line] :
       {std::pair{outer + "/step-000001", fmt::format("--save: '{}/step-000001' is inside the checkpoint step folder "
                                                      "'{}/step-000001' (it holds a meta.json)",
                                                      outer, outer)},
        std::pair{outer + "/step-000001/inner",
                  fmt::format("is inside the checkpoint step folder '{}/step-000001'", outer)},
        std::pair{outer + "/.step-000009.tmp", fmt::format("--save: '{}/.step-000009.tmp' is named as a save's "
                                                           "temporary folder (.step-N.tmp)",
                                                           outer)}}) {
    const auto r = run_command(dptrain("--steps 1 --save " + save));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(line), std::string::npos) << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(outer + "/step-000001/latest"));
  EXPECT_FALSE(std::filesystem::exists(outer + "/.step-000009.tmp"));
}

TEST_F(CheckpointRuns, AnUnwritableSaveIsRefusedBeforeStepOne) {
  testing::write_text(dir_ / "file", "a regular file");
  const auto r = run_command(testing::mpiexec(2) + " " + dptrain("--steps 2 --save " + (dir_ / "file") + "/ckpt"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(fmt::format("--save: '{}' is in the path of '{}/ckpt' and is not a directory", dir_ / "file",
                                      dir_ / "file")),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("dptrain | ZeRO"), std::string::npos) << r.output;
}

// A read-only filesystem, which stops root too (file permissions do not): a read-only bind mount of a directory
// onto itself in a private mount namespace (unshare -m), so only the command run inside sees it. `inside` runs
// there after the mount; the empty string when mounting is not permitted here, with `why` saying so.
std::string read_only_mount_around(const std::string& dir, const std::string& inside, std::string* why) {
  const std::string mount = fmt::format("mount --bind {0} {0} && mount -o remount,ro,bind {0} {0}", dir);
  const auto probe = run_command(fmt::format("unshare -m sh -c '{} && ! touch {}/.probe'", mount, dir));
  if (probe.exit_code != 0) {
    *why = "a read-only bind mount in a private mount namespace (unshare -m, mount -o remount,ro,bind) is not "
           "permitted here (needs CAP_SYS_ADMIN): " + probe.output;
    return "";
  }
  return fmt::format("unshare -m sh -c '{} && exec {}'", mount, inside);
}

// The whole output of a run refused for a read-only --save: one line.
std::string read_only_refusal(const std::string& prefix, const std::string& dir) {
  return fmt::format("{}--save: cannot write in '{}': Read-only file system (expected a directory where this user "
                     "can create files)\n",
                     prefix, dir);
}

TEST_F(CheckpointRuns, ASaveOnAReadOnlyFilesystemIsRefusedBeforeStepOne) {
  const std::string ro = dir_ / "ro";
  fs::create_directories(ro + "/kept");
  testing::write_text(ro + "/kept/notes.txt", "the user's file");
  // Into the read-only directory itself, and into a path to be created under it; one rank, and two (refused once).
  struct Case {
    int ranks;
    std::string save;
  };
  for (const Case& c : {Case{1, ro}, Case{2, ro + "/runs/ckpt"}}) {
    // One rank as it is (the output is that line alone), two under mpiexec (which adds a notice of its own).
    const std::string launch = c.ranks == 1 ? std::string("timeout 60") : testing::mpiexec(c.ranks, 60);
    std::string why;
    const std::string command = read_only_mount_around(ro, launch + " " + dptrain("--steps 2 --save " + c.save), &why);
    if (command.empty()) GTEST_SKIP() << why;
    const auto r = run_command(command);
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.output;
    if (c.ranks == 1) {
      EXPECT_EQ(r.output, read_only_refusal("dptrain: ", ro)) << command;
    }
    EXPECT_NE(r.output.find(read_only_refusal("dptrain: ", ro)), std::string::npos) << command << "\n" << r.output;
    EXPECT_EQ(testing::occurrences(r.output, "dptrain: "), 1) << command << "\n" << r.output;  // once for the job
    EXPECT_EQ(r.output.find("dptrain | "), std::string::npos) << "refused after set-up: " << r.output;
  }
  // Nothing written (outside the namespace the directory is the writable original: a write would show here).
  EXPECT_EQ(entries(ro), std::vector<std::string>{"kept"});
  EXPECT_EQ(entries(ro + "/kept"), std::vector<std::string>{"notes.txt"});
}

// Every rank writes into --save (its optimizer shard under ZeRO), and ranks on other hosts may see another
// filesystem: here only rank 1 sees the directory read-only. Refused before step 1, naming the rank, on both.
TEST_F(CheckpointRuns, ASaveReadOnlyForOneRankIsRefusedOnEveryRank) {
  const std::string ro = dir_ / "ro";
  fs::create_directories(ro);
  const std::string flags = "--steps 2 --zero 1 --save " + ro;
  std::string why;
  const std::string rank1 = read_only_mount_around(ro, dptrain(flags), &why);
  if (rank1.empty()) GTEST_SKIP() << why;
  const std::string command = testing::mpiexec(1, 60) + " " + dptrain(flags) + " : -n 1 " + rank1;
  const auto r = run_command(command);
  EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.output;
  EXPECT_NE(r.output.find(read_only_refusal("dptrain: rank 1: ", ro)), std::string::npos) << command << "\n"
                                                                                          << r.output;
  EXPECT_EQ(testing::occurrences(r.output, "dptrain: "), 1) << command << "\n" << r.output;
  EXPECT_EQ(r.output.find("dptrain | "), std::string::npos) << "refused after set-up: " << r.output;
  EXPECT_TRUE(entries(ro).empty());  // rank 0, which could write, created nothing either
}

TEST_F(CheckpointRuns, KeepLastKeepsTheNewest) {
  const std::string save = dir_ / "ckpt";
  const auto r = run_command(dptrain("--steps 5 --save-every 1 --keep-last 2 --save " + save));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(entries(save), (std::vector<std::string>{".dptrain.lock", "latest", "step-000004", "step-000005"}));
  EXPECT_EQ(testing::file_bytes(save + "/latest"), "step-000005\n");
}

// A real kill: dptrain saving every step is sent SIGKILL once a few checkpoints exist, at whatever point of a
// save it is; the directory it leaves resumes, and `latest` names a complete checkpoint.
TEST_F(CheckpointRuns, ARunKilledWhileSavingResumes) {
  const std::string save = dir_ / "ckpt", pid_file = dir_ / "pid";
  // 400 steps of the tiny model save every step for far longer than it takes to reach step 3.
  ASSERT_EQ(std::system((dptrain("--steps 400 --save-every 1 --save " + save) + " > " + (dir_ / "killed.log") +
                         " 2>&1 & echo $! > " + pid_file)
                            .c_str()),
            0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(save + "/step-000003") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const pid_t pid = std::stoi(testing::file_bytes(pid_file));
  ASSERT_TRUE(fs::exists(save + "/step-000003")) << testing::file_bytes(dir_ / "killed.log");
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  // Gone, or a zombie nobody reaps (its shell has exited): either way it writes nothing more.
  const auto running = [pid] {
    std::ifstream stat(fmt::format("/proc/{}/stat", pid));
    std::string pid_text, name, state;
    return bool(stat >> pid_text >> name >> state) && state != "Z";
  };
  while (running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_FALSE(running());

  const std::string latest = testing::file_bytes(save + "/latest");
  ASSERT_EQ(latest.substr(0, 5), "step-") << latest;
  const std::string named = save + "/" + latest.substr(0, latest.size() - 1);
  for (const char* file : {"meta.json", "model.safetensors", "optimizer.safetensors"})
    EXPECT_TRUE(fs::exists(named + "/" + file)) << named << " " << file;
  // step-000003 appears at its rename, before `latest` switches to it: a kill in between leaves step 2.
  const int at = meta(named)["step"].get<int>();
  EXPECT_GE(at, 2);
  const auto resumed = run_command(dptrain(fmt::format("--steps {} --resume {} --save {}", at + 2, save, save)));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find(fmt::format("resumed from '{}' at step {}", save, at)), std::string::npos)
      << resumed.output;
  EXPECT_EQ(testing::file_bytes(save + "/latest"), fmt::format("step-{:06d}\n", at + 2));
  for (const std::string& name : entries(save))
    EXPECT_FALSE(name.starts_with(".step-")) << "stale temporary left: " << name;
}

// Two ranks at ZeRO 1 write two optimizer shards; damage is found on resume, on every rank, with exit 2.
TEST_F(CheckpointRuns, DamagedShardsAndMetadataAreRefusedOnEveryRank) {
  const std::string save = dir_ / "ckpt", step = save + "/step-000002";
  ASSERT_EQ(run_command(testing::mpiexec(2) + " " + dptrain("--steps 2 --zero 1 --save " + save)).exit_code, 0);
  const std::string shard0 = step + "/optimizer-00000-of-00002.safetensors",
                    shard1 = step + "/optimizer-00001-of-00002.safetensors";
  const auto resume = [&] {
    return run_command(testing::mpiexec(2, 60) + " " + dptrain("--steps 4 --zero 1 --resume " + save));
  };

  const std::string original = testing::file_bytes(shard1);
  std::string flipped = original;
  flipped[flipped.size() - 5] ^= 0x01;
  testing::write_text(shard1, flipped);
  auto r = resume();
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(fmt::format("checkpoint file '{}' is damaged: xxh64 ", shard1)), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(fmt::format(", expected {}", meta(step)["checksums"]["optimizer-00001-of-00002.safetensors"]
                                                           .get<std::string>()
                                                           .substr(6))),
            std::string::npos)
      << r.output;
  testing::write_text(shard1, original);

  // Shard 0 listed twice (its checksum is valid): it overlaps itself and nothing holds shard 1's range.
  const std::string meta_text = testing::file_bytes(step + "/meta.json");
  nlohmann::json m = nlohmann::json::parse(meta_text);
  m["optimizer_shards"] = {"optimizer-00000-of-00002.safetensors", "optimizer-00000-of-00002.safetensors"};
  seal_checkpoint_meta(m);
  testing::write_text(step + "/meta.json", m.dump());
  r = resume();
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(fmt::format("checkpoint '{}': optimizer shards '{}' and '{}' both hold elements [0, ", step,
                                      shard0, shard0)),
            std::string::npos)
      << r.output;

  m = nlohmann::json::parse(meta_text);
  m["optimizer_step"] = "two";
  seal_checkpoint_meta(m);
  testing::write_text(step + "/meta.json", m.dump());
  r = resume();
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(fmt::format("checkpoint '{}': meta.json: wrong type (key 'optimizer_step' is a string "
                                      "\"two\", expected an integer from 0 to 2147483647)",
                                      step)),
            std::string::npos)
      << r.output;
  testing::write_text(step + "/meta.json", meta_text);
  r = resume();
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace dptrain
