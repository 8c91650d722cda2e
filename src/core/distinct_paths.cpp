// Two outputs (or an output and an input) given the same file.
#include "dptrain/core/distinct_paths.hpp"

#include <filesystem>
#include <vector>

#include "dptrain/core/error.hpp"

namespace dptrain {

void require_distinct_paths(std::initializer_list<NamedPath> paths) {
  namespace fs = std::filesystem;
  const auto resolved = [](const std::string& path) {
    std::error_code error;
    const fs::path canonical = fs::weakly_canonical(fs::absolute(path), error);
    return error ? fs::absolute(path).lexically_normal() : canonical;
  };
  const std::vector<NamedPath> given(paths);
  for (std::size_t i = 0; i < given.size(); ++i)
    for (std::size_t j = i + 1; j < given.size(); ++j)
      if (!given[i].path.empty() && !given[j].path.empty() && resolved(given[i].path) == resolved(given[j].path))
        fail("{} '{}' and {} '{}' are the same path: the run would write one over the other; give each its own",
             given[i].flag, given[i].path, given[j].flag, given[j].path);
}

}  // namespace dptrain
