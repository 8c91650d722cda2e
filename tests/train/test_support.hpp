// Helpers for tests that run the programs: paths from the test environment and running a command.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace dptrain::testing {

inline std::string binary_dir() { return DPTRAIN_BINARY_DIR; }
inline std::string source_dir() { return DPTRAIN_SOURCE_DIR; }

// `mpiexec -n ranks` with the settings a root, oversubscribed, containerised run needs. The timeout turns a
// hang into a failure (exit code 124) instead of a stuck test suite.
inline std::string mpiexec(int ranks, int timeout_seconds = 120) {
  return std::string("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                     "OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 ") +
         "timeout " + std::to_string(timeout_seconds) + " " + MPIEXEC + " -n " + std::to_string(ranks) +
         " --oversubscribe";
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return result;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), int(buffer.size()), pipe)) result.output += buffer.data();
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// How often `needle` occurs in `text` (e.g. error lines "dptrain: " beside mpiexec's own notice).
inline int occurrences(const std::string& text, const std::string& needle) {
  int count = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++count;
  return count;
}

// A fresh directory under the system's temporary directory, removed with the object.
struct TemporaryDirectory {
  std::filesystem::path path;
  explicit TemporaryDirectory(const std::string& name) {
    path = std::filesystem::temp_directory_path() / ("dptrain-" + name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TemporaryDirectory() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& child) const { return (path / child).string(); }
};

// A small English-like text corpus of a few kilobytes (deterministic).
inline std::string small_corpus_text() {
  std::string text;
  const char* words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat ", "and ", "dog ", "ran ", "far ", "away. "};
  for (int i = 0; i < 3000; ++i) text += words[(i * 7 + i / 11) % 11];
  return text;
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

inline std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(bool(in)) << path;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// max_i |a_i − b_i| / |b_i| over equally long sequences.
inline double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::abs(b[i]));
  return worst;
}

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> records;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) records.push_back(nlohmann::json::parse(line));
  return records;
}

// A dptrain run: its exit code and output, and what its JSONL log says (step records in order, the summary).
struct LoggedRun {
  int exit_code = -1;
  std::string output;
  std::vector<int> steps;
  std::vector<double> losses, grad_norms;
  nlohmann::json summary;
};

// Runs `command`, which must succeed and write its JSONL log to `log`, and reads the log back.
inline LoggedRun run_logged(const std::string& command, const std::string& log) {
  LoggedRun result;
  const CommandResult r = run_command(command);
  result.exit_code = r.exit_code;
  result.output = r.output;
  EXPECT_EQ(r.exit_code, 0) << command << "\n" << r.output;
  for (const auto& record : read_jsonl(log)) {
    if (record.contains("event")) {
      if (record["event"] == "summary") result.summary = record;
      continue;
    }
    result.steps.push_back(record["step"].get<int>());
    result.losses.push_back(record["loss"].get<double>());
    result.grad_norms.push_back(record["grad_norm"].get<double>());
  }
  EXPECT_TRUE(result.summary.is_object()) << command << "\n" << r.output;
  return result;
}

// A test that runs dptrain on the tiny config, one thread per rank, over small_corpus_text() in a temporary
// directory of its own; `common_flags` go on every command line.
class TinyRunTest : public ::testing::Test {
 protected:
  TinyRunTest(const std::string& name, std::string common_flags) : dir_(name), common_flags_(std::move(common_flags)) {
    write_text(dir_ / "corpus.txt", small_corpus_text());
  }
  std::string dptrain(const std::string& flags) const {
    return fmt::format("{}/dptrain --config {}/configs/tiny.toml --data {} --threads 1 {}{}", binary_dir(),
                       source_dir(), dir_ / "corpus.txt", common_flags_, flags);
  }
  TemporaryDirectory dir_;

 private:
  std::string common_flags_;
};

}  // namespace dptrain::testing
