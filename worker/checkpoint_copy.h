// Checkpoint copies between workers that have no shared checkpoint root (issue 18).
// Ranks on several workers each keep a complete checkpoint already (the trainer's
// checkpoint_dir_shared false); a job whose ranks all run on one worker would lose every
// step since its start with that worker. So the coordinator names a second worker, which
// copies the job's newest checkpoint from the first after each save, in the background:
//
//   holder:  writes <root>/<job>/step-N/ (the trainer), reports {job, N} in its heartbeat
//            (NewestCheckpoints), and serves it (WorkerFileService.ReadCheckpoint:
//            SendCheckpoint)
//   copier:  told CheckpointCopy{job, N, holder's address, a capability for that job's
//            checkpoints there (common/file_access.h)} in a heartbeat reply; copies
//            it on its own thread (CheckpointCopier), so nothing waits on it, neither the
//            trainer (it serves from disk) nor the heartbeat; reports {job, N} once complete
//
// A copy is verified before it exists: the manifest's SHA-256 must be the one the holder
// reported in its heartbeat (CheckpointCopy.manifest_sha256), every file's size and
// SHA-256 must match the manifest, written atomically, the directory renamed into place
// and COMPLETE written last, as the trainer writes one. It is a checkpoint like any other there: a restart
// placed on that worker resumes from it.
#ifndef NIGHTSHIFT_WORKER_CHECKPOINT_COPY_H_
#define NIGHTSHIFT_WORKER_CHECKPOINT_COPY_H_

#include <condition_variable>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/clock.h"
#include "common/status.h"
#include "nightshift/v1/cluster.pb.h"

namespace nightshift {

// Every job folder's newest complete checkpoint under `root`, by job id.
std::vector<v1::HeldCheckpoint> NewestCheckpoints(const std::string& root);

// Moves every complete checkpoint in `job_dir` whose (step, manifest SHA-256) is not in
// `records` into <job_dir>/unverified/ (replacing an older one there), where neither the
// trainer nor NewestCheckpoints looks: the coordinator vouches only for the checkpoints a
// worker of the job reported writing and the copies it ordered (coordinator/
// checkpoint_records.h), and a job resumes from nothing else. One more is kept: the
// export.best checkpoint a kept one names with its digest (BestNamedBy), which the
// coordinator's records (the newest few) need not hold. The steps moved, ascending.
std::vector<int64_t> SetAsideUnverified(const std::string& job_dir, const std::vector<v1::HeldCheckpoint>& records);

// The older checkpoint that <job_dir>/step-N/manifest.json names as export.best's, with
// its manifest's digest (format::CheckpointManifest::best_step); step 0 when none, or
// when the manifest cannot be read.
v1::HeldCheckpoint BestNamedBy(const std::string& job_dir, int64_t step);

// The SHA-256 (hex) of <job_dir>/step-N/manifest.json; "" when it cannot be read, or is
// not a regular file of at most 16 MiB in a folder that is not a link.
std::string ManifestDigest(const std::string& job_dir, int64_t step);

// Sends the complete checkpoint `step_dir` as chunks of at most 1 MiB: manifest.json
// first (with `step`), then every file it lists, in name order. `write` returns false
// when the reader left (then Cancelled). NotFound when it has no COMPLETE marker.
Status SendCheckpoint(const std::string& step_dir, int64_t step,
                      const std::function<bool(const v1::ArtifactChunk&)>& write);

class CheckpointCopier {
 public:
  struct Options {
    std::string root;  // this worker's own checkpoint folder: <root>/<job>/step-N
    // Whether a task of the job runs on this worker: then its trainer owns the folder and
    // nothing is copied into it or pruned. Called from the copier's thread.
    std::function<bool(const std::string&)> runs_here;
    int keep = 2;  // complete checkpoints kept in a folder a copy went into
    std::shared_ptr<grpc::ChannelCredentials> credentials;  // null: plaintext (as log streaming)
    Clock* clock = Clock::Real();               // what a stalled copy is timed on
    Clock::Duration stall = std::chrono::seconds(60);  // no chunk for this long cancels a copy
  };

  explicit CheckpointCopier(Options options);
  ~CheckpointCopier();  // cancels the copy in flight and joins the thread

  // Queues the copy (the newest asked for per job replaces an older one) unless this
  // worker holds that step or a later one of the job. Returns at once.
  void Request(const v1::CheckpointCopy& copy);

  // One copy on the caller's thread (what the copier's thread runs): OK when it is
  // complete here (or a later step was already); else what failed, with nothing left
  // behind. FailedPrecondition while the job runs here; Unavailable when the holder sent
  // nothing for options.stall.
  Status Copy(const v1::CheckpointCopy& copy);
  // The same for the job's own task, before its ranks start (Assignment.fetch_checkpoint):
  // no FailedPrecondition for the job running here, and nothing pruned (its trainer
  // prunes). Both, then, copy the export.best checkpoint the copied one names
  // (BestNamedBy), from the same worker, unless held here (the coordinator's records hold
  // only the newest few), and a copy's pruning keeps it; that copy's failure is logged, not
  // returned (the trainer then exports its final model, and says so).
  Status Fetch(const v1::CheckpointCopy& copy);

  int64_t copies() const;  // completed so far
  int64_t bytes() const;   // their bytes

 private:
  void Loop();
  // CopyInto, then the export.best checkpoint the copied one names, unless held here; that
  // one's failure logged, not returned.
  Status CopyWithBest(const v1::CheckpointCopy& copy, bool own_task);
  // OK at once when that step is held with the copy's manifest digest, or, unless `exact`,
  // a later step is held.
  Status CopyInto(const v1::CheckpointCopy& copy, bool own_task, bool exact);
  // Reads the holder's stream, handing each chunk to on_chunk (which stops it with an
  // error); cancellable by the destructor, cancelled after options_.stall without data.
  Status Receive(const v1::CheckpointCopy& copy, const std::function<Status(const v1::ArtifactChunk&)>& on_chunk);
  // Renames the verified `incoming` folder into place, writes COMPLETE, prunes to keep.
  Status Commit(const v1::CheckpointCopy& copy, const std::filesystem::path& incoming, bool own_task);

  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::map<std::string, v1::CheckpointCopy> queue_;  // GUARDED_BY(mu_), by job id
  std::set<grpc::ClientContext*> in_flight_;         // GUARDED_BY(mu_): the copier's and Fetch calls'
  bool stop_ = false;                                // GUARDED_BY(mu_)
  int64_t copies_ = 0, bytes_ = 0;                   // GUARDED_BY(mu_)
  std::thread thread_;  // last: starts after everything above is constructed
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_CHECKPOINT_COPY_H_
