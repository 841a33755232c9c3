// RotatingLog: appends a rank's output to <path>, rotating to <path>.1 .. <path>.<keep>
// when it passes max_bytes, so a chatty rank cannot fill the disk. Not thread-safe (one
// writer: the task that reads the rank's pipe).
#ifndef NIGHTSHIFT_WORKER_ROTATING_LOG_H_
#define NIGHTSHIFT_WORKER_ROTATING_LOG_H_

#include <cstdint>
#include <string>

namespace nightshift {

class RotatingLog {
 public:
  RotatingLog(std::string path, int64_t max_bytes, int keep);
  ~RotatingLog();
  RotatingLog(const RotatingLog&) = delete;
  RotatingLog& operator=(const RotatingLog&) = delete;
  void Write(const char* data, size_t n);
  const std::string& path() const { return path_; }

 private:
  void Open();
  void Rotate();
  const std::string path_;
  const int64_t max_bytes_;
  const int keep_;
  int fd_ = -1;
  int64_t size_ = 0;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_ROTATING_LOG_H_
