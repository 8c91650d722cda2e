// Outputs that would overwrite each other (or an input) are refused before anything is written.
#pragma once
#include <initializer_list>
#include <string>

namespace dptrain {

struct NamedPath {
  const char* flag;  // "--log"
  std::string path;  // empty: not given, left out of the comparison
};

// Throws UserError naming the two flags and their paths when two of them resolve to the same file. Paths compare
// after resolving `.`, `..` and symbolic links of the parts that exist.
void require_distinct_paths(std::initializer_list<NamedPath> paths);

}  // namespace dptrain
