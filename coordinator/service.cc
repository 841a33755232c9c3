#include "coordinator/service.h"

#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <filesystem>

#include "common/grpc_status.h"
#include "common/model_folder.h"
#include "common/spec.h"
#include "coordinator/limits.h"
#include "coordinator/metrics.h"
#include "coordinator/sweep_spec.h"

namespace nightshift {
namespace {

// Authentication and roles (coordinator/auth.h); a null authenticator allows everything.
Status Check(Authenticator* auth, const grpc::ServerContext* ctx, Method method,
             const std::string* owner = nullptr, Principal* who = nullptr) {
  if (auth == nullptr) {
    if (who != nullptr) *who = Principal{};
    return Status::OK();
  }
  return auth->Authorize(*ctx, method, owner, who);
}

// For calls about one job: the caller must be allowed to touch that job. The job is
// looked up only after the caller is known, so strangers learn nothing; an id over
// limits::kJobIdBytes is refused unread. Fills *caller (when non-null) once known.
Status CheckJob(Authenticator* auth, Coordinator* c, const grpc::ServerContext* ctx, Method method,
                const std::string& id, Principal* caller = nullptr) {
  Principal who;
  NS_RETURN_IF_ERROR(Check(auth, ctx, method, nullptr, &who));
  if (caller != nullptr) *caller = who;
  NS_RETURN_IF_ERROR(CheckJobId(id));
  if (who.role == Role::kAdmin) return Status::OK();
  auto job = c->Get(id);
  if (!job.ok()) return job.status();
  return Permit(who, method, &job->owner());
}

// A worker token names its worker (the token file's user column): it may register,
// heartbeat and report as that worker only. Admins (and insecure mode) may act as any.
Status CheckWorker(Authenticator* auth, const grpc::ServerContext* ctx, Method method, const std::string& name,
                   Principal* who = nullptr) {
  Principal caller;
  NS_RETURN_IF_ERROR(Check(auth, ctx, method, nullptr, &caller));
  const bool own = caller.allocation() ? name.rfind(caller.user + "-", 0) == 0 : name == caller.user;
  if (caller.role == Role::kWorker && !own)
    return Status::PermissionDenied((caller.allocation() ? "the token of allocation " : "the token of worker ") +
                                    caller.user + " may not act as worker " + name);
  if (who != nullptr) *who = caller;
  return Status::OK();
}

// The IP address a call came from: "ipv4:10.0.0.7:5123" -> "10.0.0.7",
// "ipv6:[::1]:5123" -> "::1", an IPv4-mapped IPv6 address as IPv4; "" for other
// transports.
std::string PeerHost(const std::string& peer) {
  std::string host;
  if (peer.rfind("ipv4:", 0) == 0) {
    host = peer.substr(5, peer.rfind(':') - 5);
  } else if (peer.rfind("ipv6:[", 0) == 0) {
    host = peer.substr(6, peer.find(']') - 6);
    if (host.rfind("::ffff:", 0) == 0 && host.find('.') != std::string::npos) host = host.substr(7);
  }
  return host;
}

// A stub for a worker's file service (over `credentials`, plaintext when null), and the
// call's context carrying the key the coordinator gave that worker at registration.
std::unique_ptr<v1::WorkerFileService::Stub> WorkerFiles(const std::string& address, const std::string& key,
                                                         const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                                                         grpc::ClientContext* ctx) {
  ctx->AddMetadata("authorization", "Bearer " + key);
  return v1::WorkerFileService::NewStub(
      grpc::CreateChannel(address, credentials ? credentials : grpc::InsecureChannelCredentials()));
}

// A page token of `rpc` (ListJobs, ListSweeps): the last submit_seq of the page before;
// "" is the first page (0).
Status ParsePageToken(const std::string& token, const char* rpc, uint64_t* after_seq) {
  if (token.empty()) return Status::OK();
  char* end = nullptr;
  *after_seq = std::strtoull(token.c_str(), &end, 10);
  return *end == '\0' ? Status::OK() : Status::InvalidArgument(std::string("page_token: not a token from ") + rpc);
}

// A ListJobs request as a query: page_size 0 means 100.
Status ToJobQuery(const v1::ListJobsRequest& req, JobQuery* query) {
  query->limit = req.page_size() == 0 ? 100 : req.page_size();
  if (query->limit < 0 || query->limit > 1000) return Status::InvalidArgument("page_size: must be in [1, 1000]");
  NS_RETURN_IF_ERROR(ParsePageToken(req.page_token(), "ListJobs", &query->after_seq));
  for (int state : req.states()) query->states.insert(static_cast<v1::JobState>(state));
  return Status::OK();
}

}  // namespace

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req, v1::Job* out) {
  RpcTimer timer(metrics_, "SubmitJob");
  Principal who;
  Status allowed = Check(auth_, ctx, Method::kSubmitJob, nullptr, &who);
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  v1::JobSpec spec = req->spec();
  if (spec.ByteSizeLong() > (1 << 20))
    return timer.Done(ToGrpc(Status::InvalidArgument("spec: larger than 1 MiB")));
  if (!req->spec_yaml().empty()) {
    if (req->spec_yaml().size() > (1 << 20))
      return timer.Done(ToGrpc(Status::InvalidArgument("spec_yaml: larger than 1 MiB")));
    auto parsed = LoadJobSpec(req->spec_yaml());
    if (!parsed.ok()) return timer.Done(ToGrpc(parsed.status()));
    spec = std::move(parsed.value());
  }
  Status permitted = PermitSpec(who, spec);
  if (!permitted.ok()) return timer.Done(ToGrpc(permitted));
  auto job = c_->Submit(std::move(spec), who.user, req->request_id());
  if (!job.ok()) return timer.Done(ToGrpc(job.status()));
  if (DropSubmitReply())
    return timer.Done(ToGrpc(Status::Unavailable("injected fault: reply of job " + job->id() + " dropped")));
  *out = std::move(job.value());
  return timer.Done(grpc::Status::OK);
}

Status JobServiceImpl::PermitSpec(const Principal& who, const v1::JobSpec& spec) const {
  if (spec.model().arch() == "torchscript" && who.role != Role::kAdmin && !policy_.allow_torchscript &&
      !policy_.torchscript_users.count(who.user))
    return Status::PermissionDenied(
        "model.arch: torchscript runs your module's code on the workers; user " + who.user +
        " may not submit it until an admin enables it (coordinator --allow-torchscript or --torchscript-user)");
  return PermitPriority(who, spec.priority(), c_->max_user_priority());
}

grpc::Status JobServiceImpl::SubmitSweep(grpc::ServerContext* ctx, const v1::SubmitSweepRequest* req, v1::Sweep* out) {
  RpcTimer timer(metrics_, "SubmitSweep");
  Principal who;
  Status allowed = Check(auth_, ctx, Method::kSubmitSweep, nullptr, &who);
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  if (req->sweep_yaml().size() > (1 << 20))
    return timer.Done(ToGrpc(Status::InvalidArgument("sweep_yaml: larger than 1 MiB")));
  StatusOr<v1::SweepSpec> spec = LoadSweepSpec(req->sweep_yaml());
  if (!spec.ok()) return timer.Done(ToGrpc(spec.status()));
  StatusOr<v1::JobSpec> base = LoadJobSpec(spec->base_yaml());  // the search may not touch what PermitSpec checks
  if (!base.ok()) return timer.Done(ToGrpc(base.status()));
  Status permitted = PermitSpec(who, *base);
  if (!permitted.ok()) return timer.Done(ToGrpc(permitted));
  auto sweep = c_->SubmitSweep(std::move(spec.value()), who.user, req->request_id());
  if (!sweep.ok()) return timer.Done(ToGrpc(sweep.status()));
  *out = std::move(sweep.value());
  return timer.Done(grpc::Status::OK);
}

StatusOr<v1::Sweep> JobServiceImpl::CheckSweep(const grpc::ServerContext* ctx, Method method, const std::string& id) {
  Principal who;
  NS_RETURN_IF_ERROR(Check(auth_, ctx, method, nullptr, &who));
  if (id.size() > limits::kJobIdBytes) return Status::InvalidArgument("id: longer than a sweep id");
  StatusOr<v1::Sweep> sweep = c_->GetSweep(id);
  if (!sweep.ok()) return sweep.status();
  if (who.role != Role::kAdmin) NS_RETURN_IF_ERROR(Permit(who, method, &sweep->owner()));
  return sweep;
}

grpc::Status JobServiceImpl::GetSweep(grpc::ServerContext* ctx, const v1::GetSweepRequest* req, v1::Sweep* out) {
  RpcTimer timer(metrics_, "GetSweep");
  StatusOr<v1::Sweep> sweep = CheckSweep(ctx, Method::kGetSweep, req->id());
  if (!sweep.ok()) return timer.Done(ToGrpc(sweep.status()));
  *out = std::move(sweep.value());
  return timer.Done(grpc::Status::OK);
}

// Pages of sweeps, as of jobs (the token: the last submit_seq of the page before), of at
// most page_size (default 10, at most 100) and, past the first sweep, at most 2 MiB: a
// sweep holds up to 1,000 trials, and a reply must stay under gRPC's 4 MiB default.
grpc::Status JobServiceImpl::ListSweeps(grpc::ServerContext* ctx, const v1::ListSweepsRequest* req,
                                        v1::ListSweepsResponse* out) {
  RpcTimer timer(metrics_, "ListSweeps");
  Principal who;
  Status allowed = Check(auth_, ctx, Method::kListSweeps, nullptr, &who);
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  const int limit = req->page_size() == 0 ? 10 : req->page_size();
  if (limit < 1 || limit > 100) return timer.Done(ToGrpc(Status::InvalidArgument("page_size: must be in [1, 100]")));
  uint64_t after_seq = 0;
  Status token = ParsePageToken(req->page_token(), "ListSweeps", &after_seq);
  if (!token.ok()) return timer.Done(ToGrpc(token));
  constexpr size_t kMaxPageBytes = 2 << 20;
  size_t bytes = 0;
  // Users see their own sweeps only. One more than the page: whether another follows.
  for (v1::Sweep& sweep : c_->ListSweeps(who.role == Role::kAdmin ? nullptr : &who.user, after_seq, limit + 1)) {
    sweep.clear_events();  // a list: `sweep describe` has them
    bytes += sweep.ByteSizeLong();
    if (out->sweeps_size() == limit || (out->sweeps_size() > 0 && bytes > kMaxPageBytes)) {
      out->set_next_page_token(std::to_string(out->sweeps(out->sweeps_size() - 1).submit_seq()));
      break;
    }
    *out->add_sweeps() = std::move(sweep);
  }
  return timer.Done(grpc::Status::OK);
}

grpc::Status JobServiceImpl::CancelSweep(grpc::ServerContext* ctx, const v1::CancelSweepRequest* req, v1::Sweep* out) {
  RpcTimer timer(metrics_, "CancelSweep");
  StatusOr<v1::Sweep> sweep = CheckSweep(ctx, Method::kCancelSweep, req->id());
  if (!sweep.ok()) return timer.Done(ToGrpc(sweep.status()));
  sweep = c_->CancelSweep(req->id());
  if (!sweep.ok()) return timer.Done(ToGrpc(sweep.status()));
  *out = std::move(sweep.value());
  return timer.Done(grpc::Status::OK);
}

bool JobServiceImpl::DropSubmitReply() {
  if (faults_.drop_submit_reply <= 0) return false;
  std::lock_guard<std::mutex> lock(fault_mu_);
  return std::uniform_real_distribution<double>(0, 1)(fault_rng_) < faults_.drop_submit_reply;
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req, v1::Job* out) {
  RpcTimer timer(metrics_, "GetJob");
  Status allowed = CheckJob(auth_, c_, ctx, Method::kGetJob, req->id());
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  auto job = c_->Get(req->id());
  if (!job.ok()) return timer.Done(ToGrpc(job.status()));
  *out = std::move(job.value());
  return timer.Done(grpc::Status::OK);
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                                      v1::ListJobsResponse* out) {
  RpcTimer timer(metrics_, "ListJobs");
  Principal who;
  Status allowed = Check(auth_, ctx, Method::kListJobs, nullptr, &who);
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  JobQuery query;
  Status valid = ToJobQuery(*req, &query);
  if (!valid.ok()) return timer.Done(ToGrpc(valid));
  // Users see their own jobs only.
  auto page = c_->List(query, who.role == Role::kAdmin ? nullptr : &who.user);
  if (!page.ok()) return timer.Done(ToGrpc(page.status()));
  for (auto& job : page->jobs) *out->add_jobs() = std::move(job);
  if (page->next_after_seq != 0) out->set_next_page_token(std::to_string(page->next_after_seq));
  return timer.Done(grpc::Status::OK);
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req, v1::Job* out) {
  RpcTimer timer(metrics_, "CancelJob");
  Status allowed = CheckJob(auth_, c_, ctx, Method::kCancelJob, req->id());
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  auto job = c_->Cancel(req->id(), req->reason());
  if (!job.ok()) return timer.Done(ToGrpc(job.status()));
  *out = std::move(job.value());
  return timer.Done(grpc::Status::OK);
}

grpc::Status JobServiceImpl::DeleteJob(grpc::ServerContext* ctx, const v1::DeleteJobRequest* req,
                                       v1::DeleteJobResponse*) {
  RpcTimer timer(metrics_, "DeleteJob");
  Status allowed = CheckJob(auth_, c_, ctx, Method::kDeleteJob, req->id());
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  return timer.Done(ToGrpc(c_->Delete(req->id())));
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                                      grpc::ServerWriter<v1::Job>* writer) {
  RpcTimer timer(metrics_, "WatchJob");
  Principal who;
  Status allowed = CheckJob(auth_, c_, ctx, Method::kWatchJob, req->id(), &who);
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  auto slot = streams_.Open(who.user);  // held until this stream ends
  if (!slot.ok()) return timer.Done(ToGrpc(slot.status()));
  uint64_t version = 0;
  while (!ctx->IsCancelled()) {
    auto job = c_->WaitForChange(req->id(), &version, std::chrono::milliseconds(500));
    if (job.status().code() == Status::kDeadlineExceeded) continue;
    if (!job.ok()) return timer.Done(ToGrpc(job.status()));
    if (!writer->Write(job.value())) return timer.Done(grpc::Status::CANCELLED);
    if (IsTerminal(job->state())) return timer.Done(grpc::Status::OK);
  }
  return timer.Done(grpc::Status::CANCELLED);
}

grpc::Status JobServiceImpl::StreamLogs(grpc::ServerContext* ctx, const v1::StreamLogsRequest* req,
                                        grpc::ServerWriter<v1::LogLines>* writer) {
  RpcTimer timer(metrics_, "StreamLogs");
  Principal who;
  Status allowed = CheckJob(auth_, c_, ctx, Method::kStreamLogs, req->id(), &who);
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  auto slot = streams_.Open(who.user);  // held until this stream ends
  if (!slot.ok()) return timer.Done(ToGrpc(slot.status()));
  auto files = c_->LogAddressOf(req->id(), req->rank());
  if (!files.ok()) return timer.Done(ToGrpc(files.status()));
  // Relay from the worker; the worker's stream ends when the caller goes away.
  grpc::ClientContext worker_ctx;
  auto stub = WorkerFiles(files->address, files->key, worker_credentials_, &worker_ctx);
  v1::ReadLogRequest read;
  read.set_job_id(req->id());
  read.set_rank(req->rank());
  read.set_follow(req->follow());
  auto reader = stub->ReadLog(&worker_ctx, read);
  v1::LogChunk chunk;
  while (reader->Read(&chunk)) {
    v1::LogLines lines;
    lines.set_data(chunk.data());
    if (ctx->IsCancelled() || !writer->Write(lines)) {
      worker_ctx.TryCancel();
      break;
    }
  }
  grpc::Status s = reader->Finish();
  if (ctx->IsCancelled()) return timer.Done(grpc::Status::CANCELLED);
  return timer.Done(s.error_code() == grpc::StatusCode::CANCELLED ? grpc::Status::OK : s);
}

grpc::Status JobServiceImpl::GetArtifacts(grpc::ServerContext* ctx, const v1::GetArtifactsRequest* req,
                                          grpc::ServerWriter<v1::ArtifactChunk>* writer) {
  RpcTimer timer(metrics_, "GetArtifacts");
  Principal who;
  Status allowed = CheckJob(auth_, c_, ctx, Method::kGetArtifacts, req->id(), &who);
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  auto slot = streams_.Open(who.user);  // held until this stream ends
  if (!slot.ok()) return timer.Done(ToGrpc(slot.status()));
  auto where = c_->ModelOf(req->id(), req->step());
  if (!where.ok()) return timer.Done(ToGrpc(where.status()));
  auto write = [&](const v1::ArtifactChunk& chunk) { return !ctx->IsCancelled() && writer->Write(chunk); };
  // The shared checkpoint root first: no worker needed. A job folder this user cannot read
  // (an owner's, mode 0700, under --slurm-submit-as-owner) is not there for it.
  std::error_code ec;
  if (!checkpoint_root_.empty() && !std::filesystem::is_symlink(checkpoint_root_ + "/" + req->id(), ec)) {
    const std::string job_dir = checkpoint_root_ + "/" + req->id();  // a job's code cannot replace it: the root's
    for (const std::string& dir : {job_dir + "/" + ModelStepFolderName(req->step()), job_dir + "/model"}) {
      if (!std::filesystem::exists(dir + "/" + kChecksumsFile, ec) ||
          (req->step() > 0 && ModelFolderStep(dir) != req->step()))
        continue;
      return timer.Done(ToGrpc(SendModelFolder(dir, job_dir, where->model.step(), write)));
    }
  }
  if (!where->worker_error.ok()) return timer.Done(ToGrpc(where->worker_error));
  // Relay from the worker that holds it.
  grpc::ClientContext worker_ctx;
  auto stub = WorkerFiles(where->worker_address, where->worker_key, worker_credentials_, &worker_ctx);
  v1::ReadModelRequest read;
  read.set_job_id(req->id());
  read.set_step(req->step());
  auto reader = stub->ReadModel(&worker_ctx, read);
  v1::ArtifactChunk chunk;
  bool first = true;
  while (reader->Read(&chunk)) {
    if (first) chunk.set_step(where->model.step());
    first = false;
    if (!write(chunk)) {
      worker_ctx.TryCancel();
      break;
    }
  }
  grpc::Status s = reader->Finish();
  if (ctx->IsCancelled()) return timer.Done(grpc::Status::CANCELLED);
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE)
    return timer.Done(grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker " + where->model.worker() +
                                                                      " that holds the model of job " + req->id() +
                                                                      " does not answer: " + s.error_message()));
  return timer.Done(s);
}

grpc::Status JobServiceImpl::GetJobMetrics(grpc::ServerContext* ctx, const v1::GetJobMetricsRequest* req,
                                           v1::JobMetrics* out) {
  RpcTimer timer(metrics_, "GetJobMetrics");
  Status allowed = CheckJob(auth_, c_, ctx, Method::kGetJobMetrics, req->id());
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  auto m = c_->Metrics(req->id());
  if (!m.ok()) return timer.Done(ToGrpc(m.status()));
  *out = std::move(m.value());
  return timer.Done(grpc::Status::OK);
}

grpc::Status WorkerServiceImpl::Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                                         v1::RegisterResponse* out) {
  RpcTimer timer(metrics_, "Register");
  Principal who;
  Status allowed = CheckWorker(auth_, ctx, Method::kRegister, req->name(), &who);
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  // An allocation's worker only by that allocation's token (or an admin's); a worker token
  // registers workers outside allocations.
  if (who.role == Role::kWorker &&
      (who.allocation() != req->has_allocation() ||
       (who.allocation() && (req->allocation().job_id() != who.allocation_job ||
                             static_cast<int>(req->allocation().attempt()) != who.allocation_attempt))))
    return timer.Done(ToGrpc(Status::PermissionDenied(
        who.allocation() ? "the token of allocation " + who.user + " registers its own attempt's workers only"
                         : "worker " + who.user + ": a worker token may not register an allocation's worker (its "
                                                  "token is in " + std::string(kAllocationTokenEnv) + ")")));
  if (who.allocation()) {  // the token of an attempt that is over (it never expires) registers nothing
    auto job = c_->Get(who.allocation_job);
    if (!job.ok() || IsTerminal(job->state()) || job->attempt() != who.allocation_attempt)
      return timer.Done(ToGrpc(Status::PermissionDenied("the token of allocation " + who.user +
                                                        ": that attempt of the job is over")));
  }
  v1::WorkerInfo worker;
  worker.set_name(req->name());
  worker.set_slots(req->slots());
  worker.set_memory_bytes(req->memory_bytes());
  worker.set_log_address(req->log_address());
  *worker.mutable_gpus() = req->gpus();
  for (const auto& t : req->tasks()) *worker.add_tasks() = t.task();
  if (req->has_allocation()) *worker.mutable_allocation() = req->allocation();
  RegistrationSource from;
  from.peer_host = PeerHost(ctx->peer());
  from.admin = who.role == Role::kAdmin;
  auto registered = c_->Register(worker, from);
  if (!registered.ok()) return timer.Done(ToGrpc(registered.status()));
  out->set_heartbeat_interval_ms(registered->heartbeat_interval_ms);
  out->set_file_service_key(registered->file_service_key);
  out->set_lease_ms(static_cast<int32_t>(c_->lease_seconds() * 1000));
  return timer.Done(grpc::Status::OK);
}

grpc::Status WorkerServiceImpl::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                          v1::HeartbeatResponse* out) {
  RpcTimer timer(metrics_, "Heartbeat");
  Status allowed = CheckWorker(auth_, ctx, Method::kHeartbeat, req->name());
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  std::vector<v1::TaskStatus> tasks(req->tasks().begin(), req->tasks().end());
  const std::vector<v1::HeldCheckpoint> held(req->checkpoints().begin(), req->checkpoints().end());
  auto reply = c_->Heartbeat(req->name(), std::move(tasks), req->has_cache() ? &req->cache() : nullptr, held);
  if (!reply.ok()) return timer.Done(ToGrpc(reply.status()));
  for (auto& a : reply->start) *out->add_start() = std::move(a);
  for (auto& t : reply->stop) *out->add_stop() = std::move(t);
  for (auto& t : reply->dump_stacks) *out->add_dump_stacks() = std::move(t);
  for (auto& key : reply->evict_cache_keys) out->add_evict_cache_keys(std::move(key));
  out->set_evict_cache_all(reply->evict_cache_all);
  for (auto& c : reply->copy_checkpoints) *out->add_copy_checkpoints() = std::move(c);
  out->set_release(reply->release);
  for (auto& j : reply->judged) *out->add_judged() = std::move(j);
  return timer.Done(grpc::Status::OK);
}

grpc::Status WorkerServiceImpl::ReportTask(grpc::ServerContext* ctx, const v1::ReportTaskRequest* req,
                                           v1::ReportTaskResponse*) {
  RpcTimer timer(metrics_, "ReportTask");
  Status allowed = CheckWorker(auth_, ctx, Method::kReportTask, req->name());
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  return timer.Done(ToGrpc(c_->ReportTask(req->name(), req->status())));
}

grpc::Status AdminServiceImpl::ListWorkers(grpc::ServerContext* ctx, const v1::ListWorkersRequest*,
                                           v1::ListWorkersResponse* out) {
  RpcTimer timer(metrics_, "ListWorkers");
  Status allowed = Check(auth_, ctx, Method::kListWorkers);
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  for (auto& w : c_->ListWorkers()) *out->add_workers() = std::move(w);
  return timer.Done(grpc::Status::OK);
}

grpc::Status AdminServiceImpl::ListCache(grpc::ServerContext* ctx, const v1::ListCacheRequest* req,
                                         v1::ListCacheResponse* out) {
  RpcTimer timer(metrics_, "ListCache");
  Status allowed = Check(auth_, ctx, Method::kListCache);
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  for (auto& w : c_->ListCache(req->worker())) *out->add_workers() = std::move(w);
  return timer.Done(grpc::Status::OK);
}

grpc::Status AdminServiceImpl::EvictCache(grpc::ServerContext* ctx, const v1::EvictCacheRequest* req,
                                          v1::EvictCacheResponse* out) {
  RpcTimer timer(metrics_, "EvictCache");
  Status allowed = Check(auth_, ctx, Method::kEvictCache);
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  auto n = c_->EvictCache(req->worker(), req->key(), req->all());
  if (!n.ok()) return timer.Done(ToGrpc(n.status()));
  out->set_workers(n.value());
  return timer.Done(grpc::Status::OK);
}

grpc::Status AdminServiceImpl::CordonWorker(grpc::ServerContext* ctx, const v1::CordonWorkerRequest* req,
                                            v1::WorkerResponse* out) {
  RpcTimer timer(metrics_, "CordonWorker");
  Status allowed = Check(auth_, ctx, Method::kCordonWorker);
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  auto info = c_->Cordon(req->name(), req->uncordon());
  if (!info.ok()) return timer.Done(ToGrpc(info.status()));
  *out->mutable_worker() = info.value();
  return timer.Done(grpc::Status::OK);
}

grpc::Status AdminServiceImpl::DrainWorker(grpc::ServerContext* ctx, const v1::DrainWorkerRequest* req,
                                           v1::WorkerResponse* out) {
  RpcTimer timer(metrics_, "DrainWorker");
  Status allowed = Check(auth_, ctx, Method::kDrainWorker);
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  auto info = c_->Drain(req->name());
  if (!info.ok()) return timer.Done(ToGrpc(info.status()));
  *out->mutable_worker() = info.value();
  return timer.Done(grpc::Status::OK);
}

grpc::Status AdminServiceImpl::RemoveWorker(grpc::ServerContext* ctx, const v1::RemoveWorkerRequest* req,
                                            v1::RemoveWorkerResponse*) {
  RpcTimer timer(metrics_, "RemoveWorker");
  Status allowed = Check(auth_, ctx, Method::kRemoveWorker);
  if (!allowed.ok()) return timer.Done(ToGrpc(allowed));
  return timer.Done(ToGrpc(c_->RemoveWorker(req->name())));
}

}  // namespace nightshift
