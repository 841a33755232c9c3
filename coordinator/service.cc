#include "coordinator/service.h"

#include "common/grpc_status.h"
#include "common/spec.h"
#include "coordinator/metrics.h"

namespace nightshift {

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req, v1::Job* out) {
  RpcTimer timer(metrics_, "SubmitJob");
  v1::JobSpec spec = req->spec();
  if (!req->spec_yaml().empty()) {
    if (req->spec_yaml().size() > (1 << 20))
      return timer.Done(ToGrpc(Status::InvalidArgument("spec_yaml: larger than 1 MiB")));
    auto parsed = LoadJobSpec(req->spec_yaml());
    if (!parsed.ok()) return timer.Done(ToGrpc(parsed.status()));
    spec = std::move(parsed.value());
  }
  auto job = c_->Submit(std::move(spec));
  if (!job.ok()) return timer.Done(ToGrpc(job.status()));
  *out = std::move(job.value());
  return timer.Done(grpc::Status::OK);
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext*, const v1::GetJobRequest* req, v1::Job* out) {
  RpcTimer timer(metrics_, "GetJob");
  auto job = c_->Get(req->id());
  if (!job.ok()) return timer.Done(ToGrpc(job.status()));
  *out = std::move(job.value());
  return timer.Done(grpc::Status::OK);
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* req,
                                      v1::ListJobsResponse* out) {
  RpcTimer timer(metrics_, "ListJobs");
  auto list = c_->List(*req);
  if (!list.ok()) return timer.Done(ToGrpc(list.status()));
  *out = std::move(list.value());
  return timer.Done(grpc::Status::OK);
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* req, v1::Job* out) {
  RpcTimer timer(metrics_, "CancelJob");
  auto job = c_->Cancel(req->id(), req->reason());
  if (!job.ok()) return timer.Done(ToGrpc(job.status()));
  *out = std::move(job.value());
  return timer.Done(grpc::Status::OK);
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                                      grpc::ServerWriter<v1::Job>* writer) {
  RpcTimer timer(metrics_, "WatchJob");
  uint64_t version = 0;
  while (!ctx->IsCancelled()) {
    auto job = c_->WaitForChange(req->id(), &version, std::chrono::milliseconds(500));
    if (job.status().code() == Status::kDeadlineExceeded) continue;
    if (!job.ok()) return timer.Done(ToGrpc(job.status()));
    if (!writer->Write(job.value())) return timer.Done(grpc::Status::CANCELLED);
    if (Coordinator::IsTerminal(job->state())) return timer.Done(grpc::Status::OK);
  }
  return timer.Done(grpc::Status::CANCELLED);
}

grpc::Status WorkerServiceImpl::Register(grpc::ServerContext*, const v1::RegisterRequest* req,
                                         v1::RegisterResponse* out) {
  RpcTimer timer(metrics_, "Register");
  return timer.Done(ToGrpc(c_->Register(*req, out)));
}

grpc::Status WorkerServiceImpl::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                                          v1::HeartbeatResponse* out) {
  RpcTimer timer(metrics_, "Heartbeat");
  return timer.Done(ToGrpc(c_->Heartbeat(*req, out)));
}

grpc::Status WorkerServiceImpl::ReportTask(grpc::ServerContext*, const v1::ReportTaskRequest* req,
                                           v1::ReportTaskResponse*) {
  RpcTimer timer(metrics_, "ReportTask");
  return timer.Done(ToGrpc(c_->ReportTask(*req)));
}

grpc::Status AdminServiceImpl::ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                                           v1::ListWorkersResponse* out) {
  RpcTimer timer(metrics_, "ListWorkers");
  *out = c_->ListWorkers();
  return timer.Done(grpc::Status::OK);
}

grpc::Status AdminServiceImpl::ListCache(grpc::ServerContext*, const v1::ListCacheRequest* req,
                                         v1::ListCacheResponse* out) {
  RpcTimer timer(metrics_, "ListCache");
  *out = c_->ListCache(req->worker());
  return timer.Done(grpc::Status::OK);
}

grpc::Status AdminServiceImpl::EvictCache(grpc::ServerContext*, const v1::EvictCacheRequest* req,
                                          v1::EvictCacheResponse* out) {
  RpcTimer timer(metrics_, "EvictCache");
  auto n = c_->EvictCache(*req);
  if (!n.ok()) return timer.Done(ToGrpc(n.status()));
  out->set_workers(n.value());
  return timer.Done(grpc::Status::OK);
}

}  // namespace nightshift
