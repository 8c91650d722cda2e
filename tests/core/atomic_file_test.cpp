// write_file_atomically: the new content replaces the old whole, no temporary is left beside it, and what cannot be
// replaced is refused before anything is written; sync_directory flushes a folder and names one it cannot open.
#include "dptrain/core/atomic_file.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "dptrain/core/error.hpp"

namespace dptrain {
namespace {

namespace fs = std::filesystem;

class AtomicFile : public ::testing::Test {
 protected:
  AtomicFile() : dir_(fs::temp_directory_path() / ("atomic_file_test." + std::to_string(::getpid()))) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~AtomicFile() override { fs::remove_all(dir_); }
  static std::string read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  fs::path dir_;
};

TEST_F(AtomicFile, ReplacesTheWholeContentAndLeavesNoTemporary) {
  const fs::path file = dir_ / "latest";
  write_file_atomically(file.string(), "step-000002\n");
  EXPECT_EQ(read(file), "step-000002\n");
  write_file_atomically(file.string(), "step-000004-2\n");
  EXPECT_EQ(read(file), "step-000004-2\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(AtomicFile, RefusesAFolderAndAMissingFolder) {
  fs::create_directories(dir_ / "folder");
  try {
    write_file_atomically((dir_ / "folder").string(), "x");
    FAIL() << "a folder was replaced";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot replace '" + (dir_ / "folder").string() + "': it is a directory");
  }
  EXPECT_THROW(write_file_atomically((dir_ / "missing/file").string(), "x"), UserError);
}

TEST_F(AtomicFile, SyncDirectoryFlushesAFolderAndNamesOneItCannotOpen) {
  EXPECT_NO_THROW(sync_directory(dir_.string()));
  EXPECT_NO_THROW(sync_directory("/"));
  try {
    sync_directory((dir_ / "missing").string());
    FAIL() << "a missing folder was flushed";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot open folder '" + (dir_ / "missing").string() + "' to flush it: No such file or directory");
  }
}

}  // namespace
}  // namespace dptrain
