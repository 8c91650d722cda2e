// Two outputs (or an output and an input) given the same file, or one inside the other's folder.
#include "dptrain/core/distinct_paths.hpp"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "dptrain/core/error.hpp"

namespace dptrain {

namespace {

namespace fs = std::filesystem;

// The file a path names once every link is followed: weakly_canonical resolves the folders, and the links of the
// last part by hand, since it leaves a link to a file not yet written (`--log l.jsonl` → the --trace to come) as
// it is. A loop of links (40 at most, as the kernel's own limit) stays where it is.
fs::path resolved(const std::string& path) {
  std::error_code error;
  fs::path at = fs::absolute(path);
  for (int links = 0; links < 40 && fs::is_symlink(fs::symlink_status(at, error)); ++links) {
    const fs::path target = fs::read_symlink(at, error);
    if (error) break;
    at = target.is_absolute() ? target : at.parent_path() / target;
  }
  const fs::path canonical = fs::weakly_canonical(at, error);
  return error ? at.lexically_normal() : canonical;
}

// Whether two paths name one file: the same path once resolved, or, where both exist, the same file by device and
// inode (hard links).
bool same_file(const std::string& a, const std::string& b) {
  if (resolved(a) == resolved(b)) return true;
  std::error_code error;
  return fs::equivalent(a, b, error) && !error;
}

}  // namespace

void require_distinct_paths(std::initializer_list<NamedPath> paths) {
  const std::vector<NamedPath> given(paths);
  for (std::size_t i = 0; i < given.size(); ++i)
    for (std::size_t j = i + 1; j < given.size(); ++j)
      if (!given[i].path.empty() && !given[j].path.empty() && same_file(given[i].path, given[j].path))
        fail("{} '{}' and {} '{}' are the same path: the run would write one over the other; give each its own",
             given[i].flag, given[i].path, given[j].flag, given[j].path);
}

void require_outside(const NamedPath& path, const NamedPath& folder, std::string_view why) {
  if (path.path.empty() || folder.path.empty()) return;
  const fs::path inner = resolved(path.path), outer = resolved(folder.path);
  // inner's parts begin with all of outer's (and go further): "a/b/c" inside "a/b", not inside "a/bc".
  const auto outer_parts = std::distance(outer.begin(), outer.end()),
             inner_parts = std::distance(inner.begin(), inner.end());
  if (inner_parts > outer_parts && std::equal(outer.begin(), outer.end(), inner.begin()))
    fail("{} '{}' lies inside {} '{}': {}; give it a place outside", path.flag, path.path, folder.flag, folder.path,
         why);
  // Outside by its path, inside by its inode: a hard link of a file in the folder is that file. Only a file with
  // more than one name can be one, so the folder is walked only then.
  std::error_code error;
  if (!fs::is_regular_file(path.path, error) || fs::hard_link_count(path.path, error) < 2 || error ||
      !fs::is_directory(folder.path, error))
    return;
  const auto options = fs::directory_options::skip_permission_denied;
  for (auto it = fs::recursive_directory_iterator(folder.path, options, error);
       !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
    std::error_code unreadable;
    if (it->is_regular_file(unreadable) && fs::equivalent(it->path(), path.path, unreadable))
      fail("{} '{}' is a hard link of '{}' inside {} '{}': {}; give it a place outside", path.flag, path.path,
           it->path().string(), folder.flag, folder.path, why);
  }
}

}  // namespace dptrain
