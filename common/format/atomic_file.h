// Durable whole-file writes: temporary file beside the target, fsync, rename over the
// target, fsync of the directory. A reader sees the old file or the new one, never a
// partial one, even across a crash.
#ifndef NIGHTSHIFT_COMMON_FORMAT_ATOMIC_FILE_H_
#define NIGHTSHIFT_COMMON_FORMAT_ATOMIC_FILE_H_

#include <string>

namespace nightshift::format {

// Returns "" on success, else a message naming the file and the failing call.
std::string WriteFileAtomically(const std::string& path, const std::string& bytes);

// fsync of a directory, so a rename or unlink inside it is durable.
std::string SyncDirectory(const std::string& dir);

}  // namespace nightshift::format

#endif  // NIGHTSHIFT_COMMON_FORMAT_ATOMIC_FILE_H_
