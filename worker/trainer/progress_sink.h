// Where progress events go: one line of JSON (common/format/progress.h) per event.
#ifndef NIGHTSHIFT_WORKER_TRAINER_PROGRESS_SINK_H_
#define NIGHTSHIFT_WORKER_TRAINER_PROGRESS_SINK_H_

#include <string>
#include <vector>

#include "common/format/progress.h"

namespace nightshift::trainer {

class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  virtual void Emit(const format::ProgressRecord& record) = 0;
  // Whether the loop should build step records at all (they read /proc and device stats).
  virtual bool wants_steps() const { return true; }
};

// Drops everything and asks for no step records: NIGHTSHIFT_PROGRESS_FD=none, for
// measuring what reporting itself costs (bench/trainer_bench.py --only overhead).
class NullProgressSink : public ProgressSink {
 public:
  void Emit(const format::ProgressRecord&) override {}
  bool wants_steps() const override { return false; }
};

// Writes each line with one write() call to a file descriptor (not owned). A failed
// write is reported once on stderr and otherwise ignored (training goes on).
class FdProgressSink : public ProgressSink {
 public:
  explicit FdProgressSink(int fd) : fd_(fd) {}
  void Emit(const format::ProgressRecord& record) override;

 private:
  int fd_;
  bool failed_ = false;
};

// Keeps the records (tests).
class MemoryProgressSink : public ProgressSink {
 public:
  void Emit(const format::ProgressRecord& record) override { records.push_back(record); }
  std::vector<format::ProgressRecord> records;
};

// The trainer's two outputs: a "nightshift-trainer: " line on stderr (the rank's log),
// and a warning both there and as a `warning` event.
void Log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void Warn(ProgressSink& progress, const std::string& message);

// The descriptor named by NIGHTSHIFT_PROGRESS_FD, 1 (stdout) when unset, -1 for "none";
// returns "" or what is wrong with the variable.
std::string ProgressFdFromEnv(int* fd);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_PROGRESS_SINK_H_
