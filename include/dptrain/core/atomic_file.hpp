// Replacing a file so that a reader sees either the old or the new content, never half of one.
#pragma once
#include <string>

namespace dptrain {

// Writes bytes to a temporary file in the same directory, flushes it to disk, renames it over path, then flushes
// the directory (the rename itself outlives a crash of the machine, not only of the process). Throws UserError
// naming the file and the system's reason, or, before writing anything, when path exists and is not a regular file
// (a directory, a device, a pipe, a socket: the rename would fail or replace it).
void write_file_atomically(const std::string& path, const std::string& bytes);

// Flushes a directory's entries to disk (fsync of the directory): the files created, renamed or removed in it
// outlive a crash of the machine. Throws UserError naming the directory and the system's reason.
void sync_directory(const std::string& directory);

// Why write_file_atomically(path, ...) would fail now — path exists and is not a regular file, or its directory is
// missing or not writable (the system's reason) — or empty where it would succeed. Creates and removes a temporary
// file beside path; path itself is not touched. For checking an output before a long run rather than after it.
std::string atomic_write_problem(const std::string& path);

}  // namespace dptrain
