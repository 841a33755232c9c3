#include "common/format/checkpoint_layout.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "common/io/atomic_file.h"

namespace nightshift::format {

namespace fs = std::filesystem;

bool IsJobId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
      return false;
  return true;
}

std::string StepDirName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return name;
}

int64_t StepOfDirName(const std::string& name) {
  if (name.size() <= 5 || name.size() > 5 + 18 || name.compare(0, 5, "step-") != 0) return -1;  // no overflow
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

void RemoveCheckpoint(const std::string& step_dir) {
  std::error_code ec;
  if (fs::is_symlink(step_dir, ec)) {  // the job's ranks made it: the link goes, nothing it points to
    fs::remove(step_dir, ec);
    return;
  }
  fs::remove(fs::path(step_dir) / kCheckpointComplete, ec);
  io::SyncDirectory(step_dir);
  fs::remove_all(step_dir, ec);
}

bool IsComplete(const std::string& step_dir) {
  std::error_code ec;
  return fs::exists(fs::path(step_dir) / kCheckpointComplete, ec);
}

std::vector<int64_t> CompleteSteps(const std::string& job_dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(job_dir, ec)) {
    const int64_t step = StepOfDirName(d.path().filename().string());
    if (step >= 0 && IsComplete(d.path().string())) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

}  // namespace nightshift::format
