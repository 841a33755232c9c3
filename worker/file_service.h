// WorkerFileService: serves a worker's files. The rank logs it keeps under <work_dir>/
// jobs/<job>/attempt-<n>/rank-<r>.log to the coordinator, which relays them to `nightshift job logs`,
// and the jobs' model folders (<checkpoint_root>/<job>/model and the exports of kept
// checkpoints beside it, nothing outside the job's folder; see checkpoint_export.h),
// which it relays to `nightshift job artifacts`, and complete checkpoints to other
// workers that copy them (checkpoint_copy.h).
#ifndef NIGHTSHIFT_WORKER_FILE_SERVICE_H_
#define NIGHTSHIFT_WORKER_FILE_SERVICE_H_

#include <functional>
#include <mutex>
#include <string>

#include "common/status.h"

#include "nightshift/v1/cluster.grpc.pb.h"
#include "worker/checkpoint_export.h"

namespace nightshift {

// Who may call this worker's file service (common/file_access.h): the holder of the key
// the coordinator gave at the latest registration (every method), or of a capability for
// one job's checkpoints (ReadCheckpoint). Before the first registration nobody may.
// Thread-safe.
class FileServiceAuth {
 public:
  void SetKey(std::string key);  // at each registration; the previous key stops working
  // OK, or UNAUTHENTICATED (no or wrong credentials) / PERMISSION_DENIED (a capability
  // for another job or method). `checkpoint_job`: the job whose ReadCheckpoint this is;
  // "" for the methods only the key opens.
  Status Check(const grpc::ServerContext& ctx, const std::string& checkpoint_job) const;

 private:
  mutable std::mutex mu_;
  std::string key_;  // GUARDED_BY(mu_); "" until registered
};

class FileServiceImpl final : public v1::WorkerFileService::Service {
 public:
  // `is_running(job_id)` tells whether the job still runs here (a follow ends when it
  // does not and the log is read to its end). Called from gRPC threads.
  // `checkpoint_root`: where the worker's tasks checkpoint (each job in <root>/<job id>).
  // `trainer_path`: the nightshift-trainer that exports kept checkpoints on request
  // (ReadModel with a step); "": only final exports are served. `auth` (not owned, must
  // outlive this) checks every call.
  FileServiceImpl(const FileServiceAuth* auth, std::string work_dir, std::function<bool(const std::string&)> is_running,
                  std::string checkpoint_root = "", std::string trainer_path = "")
      : auth_(auth), work_dir_(std::move(work_dir)), is_running_(std::move(is_running)),
        checkpoint_root_(std::move(checkpoint_root)),
        exporter_({work_dir_, checkpoint_root_, std::move(trainer_path)}) {}

  grpc::Status ReadLog(grpc::ServerContext* ctx, const v1::ReadLogRequest* req,
                       grpc::ServerWriter<v1::LogChunk>* writer) override;
  grpc::Status ReadModel(grpc::ServerContext* ctx, const v1::ReadModelRequest* req,
                         grpc::ServerWriter<v1::ArtifactChunk>* writer) override;
  // From checkpoint_root (checkpoint_copy.h).
  grpc::Status ReadCheckpoint(grpc::ServerContext* ctx, const v1::ReadCheckpointRequest* req,
                              grpc::ServerWriter<v1::ArtifactChunk>* writer) override;

 private:
  const FileServiceAuth* const auth_;
  const std::string work_dir_;
  const std::function<bool(const std::string&)> is_running_;
  const std::string checkpoint_root_;
  CheckpointExporter exporter_;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_FILE_SERVICE_H_
