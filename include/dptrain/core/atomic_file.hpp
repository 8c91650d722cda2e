// Replacing a file so that a reader sees either the old or the new content, never half of one.
#pragma once
#include <string>

namespace dptrain {

// Writes bytes to a temporary file in the same directory, flushes it to disk, then renames it over path.
// Throws UserError naming the file and the system's reason.
void write_file_atomically(const std::string& path, const std::string& bytes);

}  // namespace dptrain
