// Durable whole-file writes: temporary file beside the target, fsync, rename over the
// target, fsync of the directory. A reader sees the old file or the new one, never a
// partial one, even across a crash.
#ifndef NIGHTSHIFT_COMMON_IO_ATOMIC_FILE_H_
#define NIGHTSHIFT_COMMON_IO_ATOMIC_FILE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace nightshift::io {

// Returns "" on success, else a message naming the file and the failing call.
std::string WriteFileAtomically(const std::string& path, const std::string& bytes);

// The same durable write, streamed: a file far larger than what the writer wants to hold in
// memory at once (a checkpoint of the optimizer's state) is appended piece by piece to
// the temporary file, then Commit() makes it the target. Not committed (an error, an
// exception, the writer destroyed first): the temporary file is removed and the target
// is left as it was. The first error sticks: later calls do nothing and return it.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  std::string Append(const char* data, size_t n);  // "" or the error
  std::string Commit();                             // fsync, rename over the target, fsync of its folder

 private:
  void Fail(const std::string& what, const std::string& path);  // sets error_, removes the temporary file

  const std::string path_, tmp_;
  int fd_ = -1;
  std::string error_;
};

// fsync of a directory, so a rename or unlink inside it is durable.
std::string SyncDirectory(const std::string& dir);

// Reads the regular file at `path` into *out without following a symlink in its last
// component (O_NOFOLLOW: a link swapped in for a checked file is refused, not followed),
// and only if it holds at most `max_bytes`. Returns "" or what is wrong, naming the path.
std::string ReadRegularFile(const std::string& path, uint64_t max_bytes, std::string* out);

// Whether the absolute, resolved `path` is `root` or lies inside it ("/" holds all).
bool PathWithin(const std::string& root, const std::string& path);

// Opens the file at the absolute, normalized `path` under one of `roots` (absolute,
// resolved: a root that is a link now is refused) for reading, relative to that root with
// openat2(2) RESOLVE_BENEATH: symbolic links that stay inside the root are followed (a Hugging Face cache's snapshot folders
// link to its blobs), any that lead out are refused at this open. So a path checked once
// and then swapped for a link to a file outside the roots is not read: whoever opens a
// user's file opens it here, once, and reads or maps that descriptor. Empty `roots`: no
// confinement (a tool run by hand), a plain open. Linux 5.6 or later. Returns the
// descriptor (O_CLOEXEC; the caller closes it), or -1 with *error naming the path.
int OpenFileBeneath(const std::vector<std::string>& roots, const std::string& path, std::string* error);

// As ReadRegularFile, for a file opened with OpenFileBeneath. Returns "" or what is
// wrong, naming the path.
std::string ReadFileBeneath(const std::vector<std::string>& roots, const std::string& path, uint64_t max_bytes,
                            std::string* out);

// As ReadFileBeneath (with empty `roots`: as ReadRegularFile), but the bytes go to `chunk`
// a piece (1 MiB) at a time, in order, never the whole file in memory (a digest of a
// model's weights).
std::string ScanFileBeneath(const std::vector<std::string>& roots, const std::string& path, uint64_t max_bytes,
                            const std::function<void(std::string_view)>& chunk);

// As ReadFileBeneath, but a file longer than `max_bytes` is not an error: *out is its
// first `max_bytes` (a data sample's text). Returns "" or what is wrong, naming the path.
std::string ReadFilePrefixBeneath(const std::vector<std::string>& roots, const std::string& path,
                                  uint64_t max_bytes, std::string* out);

}  // namespace nightshift::io

#endif  // NIGHTSHIFT_COMMON_IO_ATOMIC_FILE_H_
