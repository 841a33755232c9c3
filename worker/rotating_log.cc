#include "worker/rotating_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

namespace nightshift {

RotatingLog::RotatingLog(std::string path, int64_t max_bytes, int keep)
    : path_(std::move(path)), max_bytes_(max_bytes), keep_(keep) {
  Open();
}

RotatingLog::~RotatingLog() {
  if (fd_ >= 0) ::close(fd_);
}

void RotatingLog::Open() {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  struct stat st;
  size_ = fd_ >= 0 && ::fstat(fd_, &st) == 0 ? st.st_size : 0;
}

void RotatingLog::Rotate() {
  if (fd_ >= 0) ::close(fd_);
  for (int i = keep_ - 1; i >= 1; --i)
    std::rename((path_ + "." + std::to_string(i)).c_str(), (path_ + "." + std::to_string(i + 1)).c_str());
  if (keep_ >= 1) std::rename(path_.c_str(), (path_ + ".1").c_str());
  else ::unlink(path_.c_str());
  Open();
}

void RotatingLog::Write(const char* data, size_t n) {
  if (max_bytes_ > 0 && size_ > 0 && size_ + static_cast<int64_t>(n) > max_bytes_) Rotate();
  if (fd_ < 0) return;
  while (n > 0) {
    ssize_t w = ::write(fd_, data, n);
    if (w <= 0) return;
    data += w;
    n -= static_cast<size_t>(w);
    size_ += w;
  }
}

}  // namespace nightshift
