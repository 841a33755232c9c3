// WorkerLogService: serves the rank logs a worker keeps under <work_dir>/jobs/<job>/
// attempt-<n>/rank-<r>.log to the coordinator, which relays them to `nightshift job logs`,
// and the jobs' exported model folders (<checkpoint_root>/<job>/model, nothing outside
// it), which it relays to `nightshift job artifacts`.
#ifndef NIGHTSHIFT_WORKER_LOG_SERVICE_H_
#define NIGHTSHIFT_WORKER_LOG_SERVICE_H_

#include <functional>
#include <string>

#include "nightshift/v1/cluster.grpc.pb.h"

namespace nightshift {

class LogServiceImpl final : public v1::WorkerLogService::Service {
 public:
  // `is_running(job_id)` tells whether the job still runs here (a follow ends when it
  // does not and the log is read to its end). Called from gRPC threads.
  // `checkpoint_root`: where the worker's tasks checkpoint (each job in <root>/<job id>).
  LogServiceImpl(std::string work_dir, std::function<bool(const std::string&)> is_running,
                 std::string checkpoint_root = "")
      : work_dir_(std::move(work_dir)), is_running_(std::move(is_running)),
        checkpoint_root_(std::move(checkpoint_root)) {}

  grpc::Status ReadLog(grpc::ServerContext* ctx, const v1::ReadLogRequest* req,
                       grpc::ServerWriter<v1::LogChunk>* writer) override;
  grpc::Status ReadModel(grpc::ServerContext* ctx, const v1::ReadModelRequest* req,
                         grpc::ServerWriter<v1::ArtifactChunk>* writer) override;

 private:
  const std::string work_dir_;
  const std::function<bool(const std::string&)> is_running_;
  const std::string checkpoint_root_;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_LOG_SERVICE_H_
