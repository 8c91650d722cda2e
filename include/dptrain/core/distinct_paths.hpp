// Outputs that would overwrite each other (or an input) are refused before anything is written.
#pragma once
#include <initializer_list>
#include <string>
#include <string_view>

namespace dptrain {

struct NamedPath {
  const char* flag;  // "--log"
  std::string path;  // empty: not given, left out of the comparison
};

// Throws UserError naming the two flags and their paths when two of them resolve to the same file. Paths compare
// after resolving `.`, `..` and symbolic links of the parts that exist; two existing files also by device and
// inode (hard links to one file).
void require_distinct_paths(std::initializer_list<NamedPath> paths);

// Throws UserError when `path` lies inside `folder` (both given, compared as above), or is a hard link of a file
// inside it, saying why it must not: "--log 'ck/run.jsonl' lies inside --save 'ck': <why>; give it a place outside".
void require_outside(const NamedPath& path, const NamedPath& folder, std::string_view why);

}  // namespace dptrain
