#include "worker/trainer/progress_sink.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace nightshift::trainer {

void Log(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::fputs("nightshift-trainer: ", stderr);
  std::vfprintf(stderr, fmt, args);
  std::fputc('\n', stderr);
  va_end(args);
}

void Warn(ProgressSink& progress, const std::string& message) {
  Log("warning: %s", message.c_str());
  progress.Emit(format::ProgressRecord{"warning", {}, {{"message", message}}});
}

void FdProgressSink::Emit(const format::ProgressRecord& record) {
  const std::string line = format::FormatProgressLine(record) + "\n";
  size_t done = 0;
  while (done < line.size()) {  // one write() unless the kernel takes less
    ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (!failed_) std::fprintf(stderr, "nightshift-trainer: cannot write progress to fd %d: %s\n",
                                 fd_, std::strerror(errno));
      failed_ = true;
      return;
    }
    done += static_cast<size_t>(n);
  }
}

std::string ProgressFdFromEnv(int* fd) {
  const char* v = std::getenv("NIGHTSHIFT_PROGRESS_FD");
  if (v == nullptr || *v == '\0') {
    *fd = 1;
    return "";
  }
  if (std::strcmp(v, "none") == 0) {
    *fd = -1;
    return "";
  }
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1 << 20)
    return std::string("NIGHTSHIFT_PROGRESS_FD=\"") + v + "\" is not a file descriptor number";
  if (::fcntl(static_cast<int>(x), F_GETFD) < 0)
    return std::string("NIGHTSHIFT_PROGRESS_FD=") + v + " is not an open file descriptor";
  *fd = static_cast<int>(x);
  return "";
}

}  // namespace nightshift::trainer
