// CheckpointExporter: the model folders a worker can hand out for `nightshift job artifacts
// ID [--step N]`: the job's final export (<checkpoint root>/<job>/model), or the export of
// one of its kept checkpoints, made on the first request by the trainer itself
// (`nightshift-trainer --config <the job's newest trainer-config.json on this worker>
// --export-step N --export-dir <root>/<job>/model-step-N`; the daemon links no LibTorch)
// and kept there for the next request, until the job's checkpoint folder is removed.
//
// Threading: FolderAt is safe from any thread; exports run one at a time per worker, and
// a request for another export while one runs is UNAVAILABLE at once (no queue of
// requests each holding a thread for up to the timeout).
#ifndef NIGHTSHIFT_WORKER_CHECKPOINT_EXPORT_H_
#define NIGHTSHIFT_WORKER_CHECKPOINT_EXPORT_H_

#include <cstdint>
#include <mutex>
#include <string>

#include "common/status.h"

namespace nightshift {

class CheckpointExporter {
 public:
  struct Options {
    std::string work_dir;         // <work_dir>/jobs/<job>/attempt-<n>/trainer-config.json
    std::string checkpoint_root;  // <root>/<job>/ holds the job's checkpoints and exports
    std::string trainer_path;     // nightshift-trainer
    double timeout_seconds = 300; // an export that takes longer is killed
  };
  explicit CheckpointExporter(Options options) : options_(std::move(options)) {}

  // The folder of `job_id`'s model at `step` (0: the final export), exporting it first
  // when needed. NotFound when the job has no such checkpoint here (naming the steps it
  // keeps) or no configuration on this worker; Internal when the export fails;
  // Unavailable while another export runs.
  StatusOr<std::string> FolderAt(const std::string& job_id, int64_t step);

 private:
  Status RunExport(const std::string& config, int64_t step, const std::string& dir, const std::string& log);

  const Options options_;
  std::mutex export_mu_;  // one export at a time: two of one step would race on its folder
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_CHECKPOINT_EXPORT_H_
