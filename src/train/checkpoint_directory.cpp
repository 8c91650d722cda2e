// The checkpoint directory: atomic publication of a step folder, `latest`, pruning, stale temporaries, and the
// set-up checks of --save.
#include "dptrain/train/checkpoint_directory.hpp"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>

#include <fmt/format.h>

#include "dptrain/core/atomic_file.hpp"
#include "dptrain/core/error.hpp"

namespace dptrain {
namespace fs = std::filesystem;

namespace {

// At most 18 and 9 digits: every name it matches has a step and a k that fit in 64 bits.
const std::regex kStepFolder(R"(step-(\d{1,18})(?:-(\d{1,9}))?)");
const std::regex kStaleTemporary(R"(\.step-\d+\.tmp)");
const std::regex kStaleLatest(R"(latest\.tmp\.\d+)");  // write_file_atomically's temporary of `latest`

// (step, k) of a step folder name; k is 1 for the plain name.
std::pair<unsigned long long, unsigned long long> step_key(const std::string& name) {
  std::smatch m;
  std::regex_match(name, m, kStepFolder);
  return {std::stoull(m[1].str()), m[2].matched ? std::stoull(m[2].str()) : 1};
}

void remove_step(const fs::path& folder) {
  std::error_code ec;
  fs::remove_all(folder, ec);
  require(!ec, "cannot remove old checkpoint '{}': {}", folder.string(), ec.message());
}

// The first line of `latest` as a message shows it: escaped, and cut where a save's one short line would have ended
// (a file of any size or kind may stand there: it is read only if it is a regular file, and 4 KiB of it at most).
constexpr std::size_t kLatestShown = 64;
std::string latest_shown(const std::string& text) {
  const std::string shown = fmt::format("{:?}", text.substr(0, kLatestShown));
  return text.size() > kLatestShown ? shown + "..." : shown;
}
std::optional<std::string> latest_text(const fs::path& file) {
  std::error_code error;
  if (!fs::is_regular_file(file, error)) return std::nullopt;
  std::ifstream in(file, std::ios::binary);
  std::string text(4096, '\0');
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(std::size_t(in.gcount()));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// What a save writes or replaces may be missing, or a regular file: not a folder, a device or a FIFO.
bool absent_or_regular(const fs::path& path) { return !fs::exists(path) || fs::is_regular_file(path); }

bool holds_checkpoints(const fs::path& root) {
  return fs::exists(root / "latest") || !step_folders(root.string()).empty();
}

}  // namespace

std::string publish_step(const std::string& root, const std::string& temporary, const std::string& name,
                         const std::function<void(PublishPoint)>& hook) {
  const auto at = [&](PublishPoint point) {
    if (hook) hook(point);
  };
  at(PublishPoint::before_rename);
  // A fresh name: rename(2) cannot replace a non-empty directory, and removing the old one first would leave
  // `latest` naming nothing until the rename.
  std::string fresh = name;
  for (int k = 2; fs::exists(fs::path(root) / fresh); ++k) fresh = fmt::format("{}-{}", name, k);
  std::error_code ec;
  fs::rename(temporary, fs::path(root) / fresh, ec);
  require(!ec, "cannot move checkpoint into place at '{}': {}", (fs::path(root) / fresh).string(), ec.message());
  sync_directory(root);  // the folder's new name on disk before `latest` names it
  at(PublishPoint::renamed);
  write_file_atomically((fs::path(root) / "latest").string(), fresh + "\n");
  at(PublishPoint::latest_switched);
  // What it replaced: the folders of the same step (an earlier save of it).
  for (const std::string& folder : step_folders(root))
    if (folder != fresh && step_key(folder).first == step_key(fresh).first) remove_step(fs::path(root) / folder);
  return fresh;
}

std::string read_latest(const std::string& root) {
  const fs::path file = fs::path(root) / "latest";
  if (!fs::exists(file) && fs::is_regular_file(fs::path(root) / "meta.json")) {
    fs::path folder = fs::path(root).lexically_normal();
    if (!folder.has_filename()) folder = folder.parent_path();  // "dir/step-000003/"
    const std::string parent = folder.parent_path().empty() ? "." : folder.parent_path().string();
    fail(
        "--resume: '{}' is a step folder; --resume takes the checkpoint directory that holds it and its 'latest' "
        "file ('{}')",
        root, parent);
  }
  require(absent_or_regular(file),
          "--resume: '{}' is not a regular file (expected the one line a save writes, the name of the step folder)",
          file.string());
  const std::optional<std::string> read = latest_text(file);
  require(read.has_value(), "--resume: '{}' has no 'latest' file: no checkpoint was completed there", root);
  const std::string& name = *read;
  require(std::regex_match(name, kStepFolder), "--resume: '{}' names {}, expected a step folder (step-NNNNNN)",
          file.string(), latest_shown(name));
  require(fs::is_directory(fs::path(root) / name), "--resume: '{}' names '{}', which is not a folder in '{}'",
          file.string(), name, root);
  return name;
}

std::vector<std::string> step_folders(const std::string& root) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    // A folder of that name without meta.json is not a checkpoint dptrain wrote (its meta.json is written before
    // the folder takes that name): it is the user's, and neither listed, replaced nor pruned.
    if (entry.is_directory() && std::regex_match(name, kStepFolder) &&
        fs::is_regular_file(entry.path() / "meta.json"))
      names.push_back(name);
  }
  std::sort(names.begin(), names.end(),
            [](const std::string& a, const std::string& b) { return step_key(a) < step_key(b); });
  return names;
}

std::vector<std::string> prune_steps(const std::string& root, int keep_last) {
  std::vector<std::string> removed;
  if (keep_last <= 0) return removed;
  const std::string latest = read_latest(root);
  std::vector<std::string> folders = step_folders(root);
  // Oldest first: drop from the front until keep_last remain, skipping the one `latest` names.
  std::size_t excess = folders.size() > std::size_t(keep_last) ? folders.size() - std::size_t(keep_last) : 0;
  for (const std::string& folder : folders) {
    if (excess == 0) break;
    if (folder == latest) continue;
    remove_step(fs::path(root) / folder);
    removed.push_back(folder);
    --excess;
  }
  return removed;
}

void remove_other_steps(const std::string& root, const std::string& keep) {
  for (const std::string& folder : step_folders(root))
    if (folder != keep) remove_step(fs::path(root) / folder);
}

std::vector<std::string> remove_stale_temporaries(const std::string& root) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    const bool stale = entry.is_directory() ? std::regex_match(name, kStaleTemporary)
                                            : entry.is_regular_file() && std::regex_match(name, kStaleLatest);
    if (!stale) continue;
    fs::remove_all(entry.path(), ec);
    require(!ec, "cannot remove the stale temporary checkpoint '{}': {}", entry.path().string(), ec.message());
    removed.push_back(name);
  }
  return removed;
}

std::uint64_t checkpoint_bytes(std::size_t parameters, std::size_t tensors) {
  // Headers: about 100 bytes of JSON per tensor (256 allowed); meta.json and the shards' range lists: 64 KiB.
  return 14ull * parameters + 256ull * tensors + (64ull << 10);
}

void require_free_space(const std::string& dir, std::uint64_t needed) {
  struct statvfs fs_stat {};
  require(::statvfs(dir.c_str(), &fs_stat) == 0, "--save: cannot query the free space of '{}': {}", dir,
          std::strerror(errno));
  const std::uint64_t available = std::uint64_t(fs_stat.f_bavail) * std::uint64_t(fs_stat.f_frsize);
  require(available >= needed,
          "--save: '{}' has {} bytes free, one checkpoint needs {} bytes (14 per parameter and the headers); free "
          "space or choose another --save",
          dir, available, needed);
}

bool continues_in_place(const TrainOptions& options) {
  std::error_code ec;
  return !options.resume.empty() && !options.save.empty() && fs::exists(options.resume) &&
         fs::exists(options.save) && fs::equivalent(options.resume, options.save, ec);
}

namespace {

// `path` or its nearest ancestor that exists.
fs::path nearest_existing(fs::path path) {
  while (!fs::exists(path) && path.has_parent_path() && path != path.parent_path()) path = path.parent_path();
  return path;
}

}  // namespace

void require_save_writable(const TrainOptions& options, int rank) {
  const fs::path root = fs::absolute(options.save).lexically_normal();
  for (fs::path prefix; const fs::path& part : root) {
    prefix /= part;
    // A regular file anywhere in the path: create_directories would fail after the whole run otherwise.
    require(!fs::exists(prefix) || fs::is_directory(prefix),
            "--save: '{}' is in the path of '{}' and is not a directory (expected a directory or a path that can "
            "be created)",
            prefix.string(), options.save);
    // Inside another run's step folder, or in a folder named as a save's temporary: a run on the directory above
    // would prune the one or remove the other at its start-up, and this run's checkpoints with it.
    require(!fs::is_regular_file(prefix / "meta.json"),
            "--save: '{}' is inside the checkpoint step folder '{}' (it holds a meta.json), which pruning of its "
            "directory would remove; give a directory of its own",
            options.save, prefix.string());
    require(!std::regex_match(part.string(), kStaleTemporary),
            "--save: '{}' is named as a save's temporary folder (.step-N.tmp), which the next run saving into its "
            "directory removes at start-up; give another name",
            options.save);
  }
  // Nothing is created at set-up (the ranks have not yet agreed on --save): the probe goes into the nearest
  // directory that exists, where the save will create the rest.
  const fs::path existing = nearest_existing(root);
  // Writable: a probe file, created and removed (read-only filesystems, directories without write permission).
  // Named by rank and process: ranks on several hosts may share the filesystem.
  const fs::path probe = existing / fmt::format(".dptrain-write-probe.{}.{}", rank, ::getpid());
  {
    errno = 0;
    std::ofstream out(probe);
    const bool written = bool(out << "probe") && bool(out.flush());
    const int error = errno;
    require(written, "--save: cannot write in '{}': {} (expected a directory where this user can create files)",
            existing.string(), error != 0 ? std::strerror(error) : "write failed");
  }
  std::error_code ec;
  fs::remove(probe, ec);
}

void prepare_save_directory(const TrainOptions& options, std::size_t parameters, std::size_t tensors,
                            SaveLock& lock) {
  const fs::path root = fs::absolute(options.save);
  require_save_writable(options, 0);
  // Checkpoints of another run are not replaced silently; resuming from this very directory continues it.
  if (fs::is_directory(root) && holds_checkpoints(root) && !continues_in_place(options) && !options.overwrite) {
    const std::optional<std::string> text = latest_text(root / "latest");
    const std::string latest = !fs::exists(root / "latest")           ? "none"
                               : !text                                ? "not a regular file"
                               : std::regex_match(*text, kStepFolder) ? *text
                                                                      : latest_shown(*text);
    fail("--save: '{}' already holds checkpoints (latest: {}); pass --overwrite to replace them, --resume {} to "
         "continue from them, or another --save directory",
         options.save, latest, options.save);
  }
  // A save replaces `latest` with a file: what is there must be one (a folder there fails only at the first save).
  require(
      absent_or_regular(root / "latest"),
      "--save: '{}' is not a regular file (expected the one line a save writes; remove it, or give another --save "
      "directory)",
      (root / "latest").string());
  if (fs::is_directory(root)) {
    lock.acquire(root.string(), false);  // before anything of a run that may still be writing here is removed
    remove_stale_temporaries(root.string());
  }
  require_free_space(nearest_existing(root).string(), checkpoint_bytes(parameters, tensors));
}

}  // namespace dptrain
