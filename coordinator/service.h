// The coordinator's gRPC services. They only translate: proto in, a Coordinator call,
// proto out.
#ifndef NIGHTSHIFT_COORDINATOR_SERVICE_H_
#define NIGHTSHIFT_COORDINATOR_SERVICE_H_

#include <grpcpp/security/credentials.h>

#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>

#include "coordinator/auth.h"
#include "coordinator/coordinator.h"
#include "coordinator/stream_limits.h"
#include "nightshift/v1/admin.grpc.pb.h"
#include "nightshift/v1/cluster.grpc.pb.h"
#include "nightshift/v1/jobs.grpc.pb.h"

namespace nightshift {

class CoordinatorMetrics;

// Faults a test can inject into the job service; all off by default. The daemon reads
// them from the environment (coordinator/main.cc), never from a flag a user would set.
struct JobServiceFaults {
  // Of the SubmitJob calls that succeeded (the job is in the store), this fraction in
  // [0, 1] answers UNAVAILABLE instead, as when the reply is lost on the way back.
  double drop_submit_reply = 0;
};

// What users may submit beyond the spec's own rules; admins may submit anything.
struct SubmitPolicy {
  // model.arch torchscript runs a module the user wrote, as the worker's user, on every
  // worker it lands on: off unless the admin enables it for everyone, or for these users.
  bool allow_torchscript = false;
  std::set<std::string> torchscript_users;
};

struct JobServiceOptions {
  // The workers' shared checkpoint root as this host sees it (GetArtifacts reads
  // <checkpoint_root>/<job id>/model there first); empty: models come from the workers.
  std::string checkpoint_root;
  JobServiceFaults faults;
  SubmitPolicy policy;
  // How to reach the workers' file services to relay logs and models (TLS with the
  // cluster's CA); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> worker_credentials;
  // The caps on open WatchJob, StreamLogs and GetArtifacts streams (RESOURCE_EXHAUSTED
  // beyond them).
  StreamLimitOptions streams;
};

class JobServiceImpl final : public v1::JobService::Service {
 public:
  // `auth` null: every call is allowed (insecure mode).
  JobServiceImpl(Coordinator* c, CoordinatorMetrics* metrics, Authenticator* auth = nullptr,
                 JobServiceOptions options = {})
      : c_(c),
        metrics_(metrics),
        auth_(auth),
        checkpoint_root_(options.checkpoint_root.empty()
                             ? std::string()
                             : std::filesystem::absolute(options.checkpoint_root).lexically_normal().string()),
        faults_(options.faults),
        policy_(std::move(options.policy)),
        worker_credentials_(std::move(options.worker_credentials)),
        streams_(options.streams) {}
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*, v1::Job*) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest*, v1::Job*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*, v1::ListJobsResponse*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest*, v1::Job*) override;
  grpc::Status DeleteJob(grpc::ServerContext*, const v1::DeleteJobRequest*, v1::DeleteJobResponse*) override;
  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest*,
                        grpc::ServerWriter<v1::Job>*) override;
  grpc::Status StreamLogs(grpc::ServerContext*, const v1::StreamLogsRequest*,
                          grpc::ServerWriter<v1::LogLines>*) override;
  grpc::Status GetArtifacts(grpc::ServerContext*, const v1::GetArtifactsRequest*,
                            grpc::ServerWriter<v1::ArtifactChunk>*) override;
  grpc::Status GetJobMetrics(grpc::ServerContext*, const v1::GetJobMetricsRequest*, v1::JobMetrics*) override;
  grpc::Status SubmitSweep(grpc::ServerContext*, const v1::SubmitSweepRequest*, v1::Sweep*) override;
  grpc::Status GetSweep(grpc::ServerContext*, const v1::GetSweepRequest*, v1::Sweep*) override;
  grpc::Status ListSweeps(grpc::ServerContext*, const v1::ListSweepsRequest*, v1::ListSweepsResponse*) override;
  grpc::Status CancelSweep(grpc::ServerContext*, const v1::CancelSweepRequest*, v1::Sweep*) override;

 private:
  // What `who` may not submit: torchscript (unless allowed), a priority above the ceiling.
  Status PermitSpec(const Principal& who, const v1::JobSpec& spec) const;
  // The caller may touch sweep `id` (owner or admin); the sweep as it is.
  StatusOr<v1::Sweep> CheckSweep(const grpc::ServerContext* ctx, Method method, const std::string& id);
  Coordinator* const c_;  // not owned
  CoordinatorMetrics* const metrics_;  // not owned; may be null
  Authenticator* const auth_;  // not owned; may be null
  const std::string checkpoint_root_;
  const JobServiceFaults faults_;
  const SubmitPolicy policy_;
  const std::shared_ptr<grpc::ChannelCredentials> worker_credentials_;  // may be null
  StreamLimits streams_;  // thread-safe
  std::mutex fault_mu_;
  std::mt19937_64 fault_rng_{std::random_device{}()};  // GUARDED_BY(fault_mu_)
  // Whether to drop this reply (faults_.drop_submit_reply).
  bool DropSubmitReply();
};

class WorkerServiceImpl final : public v1::WorkerService::Service {
 public:
  // `auth` null: every call is allowed (insecure mode).
  WorkerServiceImpl(Coordinator* c, CoordinatorMetrics* metrics, Authenticator* auth = nullptr)
      : c_(c), metrics_(metrics), auth_(auth) {}
  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest*, v1::RegisterResponse*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*, v1::HeartbeatResponse*) override;
  grpc::Status ReportTask(grpc::ServerContext*, const v1::ReportTaskRequest*, v1::ReportTaskResponse*) override;

 private:
  Coordinator* const c_;
  CoordinatorMetrics* const metrics_;
  Authenticator* const auth_;
};

class AdminServiceImpl final : public v1::AdminService::Service {
 public:
  // `auth` null: every call is allowed (insecure mode).
  AdminServiceImpl(Coordinator* c, CoordinatorMetrics* metrics, Authenticator* auth = nullptr)
      : c_(c), metrics_(metrics), auth_(auth) {}
  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                           v1::ListWorkersResponse*) override;
  grpc::Status RemoveWorker(grpc::ServerContext*, const v1::RemoveWorkerRequest*, v1::RemoveWorkerResponse*) override;
  grpc::Status ListCache(grpc::ServerContext*, const v1::ListCacheRequest*, v1::ListCacheResponse*) override;
  grpc::Status EvictCache(grpc::ServerContext*, const v1::EvictCacheRequest*, v1::EvictCacheResponse*) override;
  grpc::Status CordonWorker(grpc::ServerContext*, const v1::CordonWorkerRequest*, v1::WorkerResponse*) override;
  grpc::Status DrainWorker(grpc::ServerContext*, const v1::DrainWorkerRequest*, v1::WorkerResponse*) override;

 private:
  Coordinator* const c_;
  CoordinatorMetrics* const metrics_;
  Authenticator* const auth_;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_SERVICE_H_
