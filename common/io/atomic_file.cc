#include "common/io/atomic_file.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace nightshift::io {
namespace {
std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}
std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}
}  // namespace

std::string SyncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open directory", dir);
  int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? "" : Errno("cannot fsync directory", dir);
}

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) error_ = Errno("cannot create", tmp_);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFileWriter::Fail(const std::string& what, const std::string& path) {
  error_ = Errno(what, path);
  ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
}

std::string AtomicFileWriter::Append(const char* data, size_t n) {
  while (error_.empty() && n > 0) {
    const ssize_t wrote = ::write(fd_, data, n);
    if (wrote < 0) {
      if (errno != EINTR) Fail("cannot write", tmp_);
      continue;
    }
    data += wrote;
    n -= static_cast<size_t>(wrote);
  }
  return error_;
}

std::string AtomicFileWriter::Commit() {
  if (!error_.empty()) return error_;
  if (::fsync(fd_) != 0) {
    Fail("cannot fsync", tmp_);
    return error_;
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    Fail("cannot rename into place", path_);
    return error_;
  }
  ::close(fd_);
  fd_ = -1;
  error_ = SyncDirectory(DirName(path_));
  return error_;
}

std::string WriteFileAtomically(const std::string& path, const std::string& bytes) {
  AtomicFileWriter writer(path);
  if (std::string err = writer.Append(bytes.data(), bytes.size()); !err.empty()) return err;
  return writer.Commit();
}

namespace {

// Reads from `fd` into `to` until `n` bytes or the end of the file; returns how many.
size_t ReadUpTo(int fd, char* to, size_t n) {
  size_t at = 0;
  while (at < n) {
    const ssize_t got = ::read(fd, to + at, n - at);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    at += static_cast<size_t>(got);
  }
  return at;
}

// Reads the open file `fd` (closed here), if it is a regular file of at most `max_bytes`,
// into `chunk` a piece at a time (into *out whole: `chunk` null); "" or what is wrong
// with `path`.
std::string ReadOpenFile(int fd, const std::string& path, uint64_t max_bytes, std::string* out,
                         const std::function<void(std::string_view)>& chunk = nullptr) {
  struct stat st {};
  std::string err;
  if (::fstat(fd, &st) != 0) err = "cannot stat " + path + ": " + std::strerror(errno);
  else if (!S_ISREG(st.st_mode)) err = path + " is not a regular file";
  else if (static_cast<uint64_t>(st.st_size) > max_bytes)
    err = path + " holds " + std::to_string(st.st_size) + " bytes, more than the " + std::to_string(max_bytes) + " allowed";
  if (err.empty() && !chunk) {
    out->resize(static_cast<size_t>(st.st_size));
    if (ReadUpTo(fd, out->data(), out->size()) != out->size()) err = "cannot read " + path + " whole";
  }
  if (err.empty() && chunk) {
    std::string piece(size_t{1} << 20, '\0');
    uint64_t left = static_cast<uint64_t>(st.st_size);
    try {
      while (left > 0 && err.empty()) {
        const size_t want = static_cast<size_t>(std::min<uint64_t>(left, piece.size()));
        if (ReadUpTo(fd, piece.data(), want) != want) err = "cannot read " + path + " whole";
        else chunk(std::string_view(piece.data(), want)), left -= want;
      }
    } catch (...) {  // from `chunk`
      ::close(fd);
      throw;
    }
  }
  ::close(fd);
  return err;
}

std::string OpenError(const std::string& path, int error) {
  return error == ELOOP    ? path + " is a symbolic link (not followed)"
         : error == ENOENT ? path + " is missing"
                           : "cannot open " + path + ": " + std::strerror(error);
}

// ReadRegularFile's open: a link as the last component is refused, not followed.
int OpenNotFollowing(const std::string& path, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) *error = OpenError(path, errno);
  return fd;
}

}  // namespace

bool PathWithin(const std::string& root, const std::string& path) {
  return path == root || root == "/" ||
         (path.size() > root.size() && path.compare(0, root.size(), root) == 0 && path[root.size()] == '/');
}

std::string ReadRegularFile(const std::string& path, uint64_t max_bytes, std::string* out) {
  std::string error;
  const int fd = OpenNotFollowing(path, &error);
  if (fd < 0) return error;
  return ReadOpenFile(fd, path, max_bytes, out);
}

int OpenFileBeneath(const std::vector<std::string>& roots, const std::string& path, std::string* error) {
  if (roots.empty()) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) *error = OpenError(path, errno);
    return fd;
  }
  const std::string* root = nullptr;
  for (const std::string& r : roots) {
    if (path != r && PathWithin(r, path) && (root == nullptr || r.size() > root->size())) root = &r;
  }
  if (root == nullptr || path.find("/../") != std::string::npos || path.find("/./") != std::string::npos) {
    *error = path + " is not a normalized path under the data roots";
    return -1;
  }
  // The root itself not through a link either (resolved roots have none there): a job's
  // folder swapped for a link to another's between two reads is not read through.
  const int dir = ::open(root->c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0) {
    const int open_errno = errno;
    struct stat st;
    const bool link = ::lstat(root->c_str(), &st) == 0 && S_ISLNK(st.st_mode);
    *error = link ? *root + " is a symbolic link, not the folder it was" : OpenError(*root, open_errno);
    return -1;
  }
  const std::string relative = path.substr(*root == "/" ? 1 : root->size() + 1);
  // openat2(2), RESOLVE_BENEATH: every component, links included, resolved by the kernel
  // at this open, and refused (EXDEV) where it would leave the root.
  struct open_how how {};
  how.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  const int fd = static_cast<int>(::syscall(SYS_openat2, dir, relative.c_str(), &how, sizeof(how)));
  const int open_errno = errno;
  ::close(dir);
  if (fd < 0)
    *error = open_errno == EXDEV ? path + " leads out of the data roots (through a symbolic link)" : OpenError(path, open_errno);
  return fd;
}

std::string ReadFileBeneath(const std::vector<std::string>& roots, const std::string& path, uint64_t max_bytes,
                            std::string* out) {
  std::string error;
  const int fd = OpenFileBeneath(roots, path, &error);
  if (fd < 0) return error;
  return ReadOpenFile(fd, path, max_bytes, out);
}

std::string ScanFileBeneath(const std::vector<std::string>& roots, const std::string& path, uint64_t max_bytes,
                            const std::function<void(std::string_view)>& chunk) {
  std::string error;
  const int fd = roots.empty() ? OpenNotFollowing(path, &error) : OpenFileBeneath(roots, path, &error);
  if (fd < 0) return error;
  return ReadOpenFile(fd, path, max_bytes, nullptr, chunk);
}

std::string ReadFilePrefixBeneath(const std::vector<std::string>& roots, const std::string& path,
                                  uint64_t max_bytes, std::string* out) {
  std::string error;
  const int fd = OpenFileBeneath(roots, path, &error);
  if (fd < 0) return error;
  out->resize(static_cast<size_t>(max_bytes));
  out->resize(ReadUpTo(fd, out->data(), out->size()));
  ::close(fd);
  return "";
}

}  // namespace nightshift::io
