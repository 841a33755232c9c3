// A coordinator that answers from canned messages, on 127.0.0.1, and the way to run a
// CLI command line against it in-process, so each verb's requests, output and exit code
// are tested without a cluster.
#ifndef NIGHTSHIFT_TESTS_CLI_FAKE_COORDINATOR_H_
#define NIGHTSHIFT_TESTS_CLI_FAKE_COORDINATOR_H_

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <map>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/options.h"
#include "nightshift/v1/admin.grpc.pb.h"
#include "nightshift/v1/jobs.grpc.pb.h"

namespace nightshift::cli::testing {

inline google::protobuf::Timestamp At(int64_t seconds) {
  google::protobuf::Timestamp t;
  t.set_seconds(seconds);
  return t;
}

// Jobs in most of the shapes the verbs print: j1 RUNNING, j2 SUCCEEDED, j3 QUEUED,
// j4 FAILED, j5 PREEMPTED.
inline std::vector<v1::Job> SampleJobs() {
  std::vector<v1::Job> jobs(5);
  v1::Job& run = jobs[0];
  run.set_id("j1");
  run.set_state(v1::RUNNING);
  run.set_reason("running on w1");
  run.set_owner("alice");
  run.set_attempt(1);
  run.set_restarts(1);
  run.mutable_spec()->set_name("spam");
  run.mutable_spec()->mutable_resources()->set_world_size(2);
  run.mutable_spec()->mutable_restart()->set_max_restarts(3);
  auto* p = run.add_placements();
  p->set_worker("w1");
  p->set_first_rank(0);
  p->set_num_ranks(2);
  p->set_running(true);
  auto* prog = run.mutable_progress();
  prog->set_step(50);
  prog->set_total_steps(200);
  prog->set_epoch(1);
  prog->set_loss(0.693147);
  prog->set_tokens_per_second(12345.6);
  prog->set_host_rss_bytes(int64_t{512} << 20);
  prog->set_eta_seconds(100);
  run.set_checkpoint_step(40);
  run.set_checkpoint_path("/ckpt/j1/step-40");
  run.mutable_data_cache()->set_worker("w1");
  run.mutable_data_cache()->set_key("abc123");
  run.mutable_data_cache()->set_hit(true);
  run.mutable_data_cache()->set_prepare_seconds(0.25);
  auto* e = run.add_events();
  *e->mutable_time() = At(1714564800);  // 2024-05-01T12:00:00Z
  e->set_state(v1::QUEUED);
  e->set_reason("submitted");
  e = run.add_events();
  *e->mutable_time() = At(1714564860);
  e->set_state(v1::RUNNING);
  e->set_attempt(1);
  e->set_reason("restarted after w2 was lost");

  v1::Job& done = jobs[1];
  done.set_id("j2");
  done.set_state(v1::SUCCEEDED);
  done.set_reason("all ranks finished");
  done.mutable_spec()->set_name("lm");
  done.mutable_spec()->mutable_resources()->set_world_size(1);
  p = done.add_placements();
  p->set_worker("w2");
  p->set_num_ranks(1);
  p->set_finished(true);
  (*done.mutable_metrics())["val_loss"] = 0.25;
  (*done.mutable_metrics())["val_accuracy"] = 0.96875;

  v1::Job& queued = jobs[2];
  queued.set_id("j3");
  queued.set_state(v1::QUEUED);
  queued.set_reason("waiting for 4 slots");
  queued.mutable_spec()->set_name("big");
  queued.mutable_spec()->set_priority(5);
  queued.mutable_spec()->mutable_resources()->set_world_size(4);

  v1::Job& failed = jobs[3];
  failed.set_id("j4");
  failed.set_state(v1::FAILED);
  failed.set_reason("rank 0 exited with 1");
  failed.set_error("data.path: no such folder");
  failed.mutable_spec()->set_name("broken");

  v1::Job& preempted = jobs[4];
  preempted.set_id("j5");
  preempted.set_state(v1::PREEMPTED);
  preempted.set_reason("preempted by j3");
  preempted.set_owner("bob");
  preempted.mutable_spec()->set_name("small");
  preempted.mutable_spec()->set_priority(-1);
  preempted.mutable_spec()->mutable_resources()->set_world_size(1);
  return jobs;
}

// w1 READY with a task, w2 READY and cordoned, w3 LOST, w4 draining with two tasks.
inline std::vector<v1::WorkerInfo> SampleWorkers() {
  std::vector<v1::WorkerInfo> workers(4);
  workers[0].set_name("w1");
  workers[0].set_state(v1::WORKER_READY);
  workers[0].set_slots(4);
  workers[0].set_used_slots(2);
  workers[0].set_memory_bytes(int64_t{48} << 30);
  workers[0].add_tasks()->set_job_id("j1");
  workers[1].set_name("w2");
  workers[1].set_state(v1::WORKER_READY);
  workers[1].set_slots(2);
  workers[1].set_cordoned(true);
  workers[2].set_name("w3");
  workers[2].set_state(v1::WORKER_LOST);
  workers[2].set_slots(8);
  workers[3].set_name("w4");
  workers[3].set_state(v1::WORKER_READY);
  workers[3].set_slots(2);
  workers[3].set_used_slots(2);
  workers[3].set_cordoned(true);
  workers[3].set_draining(true);
  workers[3].add_tasks()->set_job_id("j6");
  workers[3].add_tasks()->set_job_id("j7");
  return workers;
}

inline v1::ListCacheResponse SampleCache() {
  v1::ListCacheResponse out;
  auto* w = out.add_workers();
  w->set_worker("w1");
  auto* st = w->mutable_report()->mutable_stats();
  st->set_entries(2);
  st->set_bytes(3000000);
  st->set_max_bytes(int64_t{1} << 30);
  st->set_hits(7);
  st->set_misses(2);
  st->set_build_seconds(12.34);
  st->set_build_seconds_saved(40.5);
  auto* e = w->mutable_report()->add_entries();
  e->set_key("0123456789abcdef0123456789abcdef");
  e->set_bytes(2000000);
  e->set_train_samples(800);
  e->set_val_samples(200);
  e->set_in_use(1);
  e->set_build_seconds(8.04);
  e->set_data_path("data/spamassassin");
  e = w->mutable_report()->add_entries();
  e->set_key("fedcba9876543210fedcba9876543210");
  e->set_bytes(1000000);
  e->set_train_samples(90);
  e->set_val_samples(10);
  e->set_build_seconds(4.3);
  e->set_data_path("/data/lm.jsonl");
  out.add_workers()->set_worker("w2");
  return out;
}

// Every call answers `fail` when it is set; otherwise from the canned state, recording
// the requests.
class FakeJobService final : public v1::JobService::Service {
 public:
  std::mutex mu;
  std::vector<v1::Job> jobs = SampleJobs();
  int page_size = 2;                        // ListJobs pages, so the CLI must follow them
  // Per job id, what successive WatchJob calls send (then OK; the last stream repeats).
  // An id without streams is NOT_FOUND.
  std::map<std::string, std::vector<std::vector<v1::Job>>> watch_streams;
  std::vector<std::string> log_chunks;      // what StreamLogs sends
  std::vector<v1::ArtifactChunk> artifact_chunks;  // what GetArtifacts sends (then `artifacts_end`)
  grpc::Status artifacts_end = grpc::Status::OK;
  v1::JobMetrics job_metrics;               // what GetJobMetrics answers
  grpc::Status fail = grpc::Status::OK;
  // The first `submit_failures` SubmitJob calls answer `submit_failure` (then `fail`).
  int submit_failures = 0;
  grpc::Status submit_failure{grpc::StatusCode::UNAVAILABLE, "connection reset"};
  std::vector<v1::SubmitJobRequest> submits;
  std::vector<v1::SubmitSweepRequest> sweep_submits;  // the first `submit_failures` fail too
  std::vector<std::vector<v1::Sweep>> sweep_pages;  // what ListSweeps answers, a page a call
  std::vector<v1::ListSweepsRequest> sweep_lists;
  std::vector<v1::ListJobsRequest> lists;
  std::vector<v1::StreamLogsRequest> log_requests;
  std::vector<std::string> deletes;         // ids DeleteJob was asked for
  int watches = 0;

  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req, v1::Job* out) override {
    std::lock_guard<std::mutex> l(mu);
    submits.push_back(*req);
    if (static_cast<int>(submits.size()) <= submit_failures) return submit_failure;
    if (!fail.ok()) return fail;
    out->set_id("j9");
    out->set_state(v1::QUEUED);
    return grpc::Status::OK;
  }
  grpc::Status SubmitSweep(grpc::ServerContext*, const v1::SubmitSweepRequest* req, v1::Sweep* out) override {
    std::lock_guard<std::mutex> l(mu);
    sweep_submits.push_back(*req);
    if (static_cast<int>(sweep_submits.size()) <= submit_failures) return submit_failure;
    if (!fail.ok()) return fail;
    out->set_id("s-000001");
    out->set_state(v1::RUNNING);
    return grpc::Status::OK;
  }
  // Page i's token for the next is "i+1".
  grpc::Status ListSweeps(grpc::ServerContext*, const v1::ListSweepsRequest* req, v1::ListSweepsResponse* out) override {
    std::lock_guard<std::mutex> l(mu);
    sweep_lists.push_back(*req);
    if (!fail.ok()) return fail;
    const size_t page = req->page_token().empty() ? 0 : std::stoul(req->page_token());
    if (page < sweep_pages.size())
      for (const v1::Sweep& w : sweep_pages[page]) *out->add_sweeps() = w;
    if (page + 1 < sweep_pages.size()) out->set_next_page_token(std::to_string(page + 1));
    return grpc::Status::OK;
  }
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* req, v1::Job* out) override {
    std::lock_guard<std::mutex> l(mu);
    if (!fail.ok()) return fail;
    return Find(req->id(), out);
  }
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* req, v1::Job* out) override {
    std::lock_guard<std::mutex> l(mu);
    if (!fail.ok()) return fail;
    grpc::Status s = Find(req->id(), out);
    out->set_state(v1::CANCELLED);
    return s;
  }
  grpc::Status DeleteJob(grpc::ServerContext*, const v1::DeleteJobRequest* req, v1::DeleteJobResponse*) override {
    std::lock_guard<std::mutex> l(mu);
    deletes.push_back(req->id());
    if (!fail.ok()) return fail;
    v1::Job found;
    return Find(req->id(), &found);
  }
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* req, v1::ListJobsResponse* out) override {
    std::lock_guard<std::mutex> l(mu);
    lists.push_back(*req);
    if (!fail.ok()) return fail;
    std::vector<v1::Job> matching;
    for (const auto& j : jobs)
      if (req->states().empty() || std::count(req->states().begin(), req->states().end(), j.state()))
        matching.push_back(j);
    const size_t first = req->page_token().empty() ? 0 : std::stoul(req->page_token());
    const size_t n = req->page_size() > 0 ? req->page_size() : page_size;
    for (size_t i = first; i < matching.size() && i < first + n; ++i) *out->add_jobs() = matching[i];
    if (first + n < matching.size()) out->set_next_page_token(std::to_string(first + n));
    return grpc::Status::OK;
  }
  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::Job>* w) override {
    std::lock_guard<std::mutex> l(mu);
    ++watches;
    if (!fail.ok()) return fail;
    auto it = watch_streams.find(req->id());
    if (it == watch_streams.end() || it->second.empty())
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "job " + req->id() + " not found");
    for (const auto& j : it->second.front()) w->Write(j);
    if (it->second.size() > 1) it->second.erase(it->second.begin());
    return grpc::Status::OK;
  }
  grpc::Status StreamLogs(grpc::ServerContext*, const v1::StreamLogsRequest* req,
                          grpc::ServerWriter<v1::LogLines>* w) override {
    std::lock_guard<std::mutex> l(mu);
    log_requests.push_back(*req);
    if (!fail.ok()) return fail;
    for (const auto& c : log_chunks) {
      v1::LogLines lines;
      lines.set_data(c);
      w->Write(lines);
    }
    return grpc::Status::OK;
  }

  grpc::Status GetArtifacts(grpc::ServerContext*, const v1::GetArtifactsRequest*,
                            grpc::ServerWriter<v1::ArtifactChunk>* w) override {
    std::lock_guard<std::mutex> l(mu);
    if (!fail.ok()) return fail;
    for (const auto& c : artifact_chunks) w->Write(c);
    return artifacts_end;
  }
  grpc::Status GetJobMetrics(grpc::ServerContext*, const v1::GetJobMetricsRequest* req, v1::JobMetrics* out) override {
    std::lock_guard<std::mutex> l(mu);
    if (!fail.ok()) return fail;
    *out = job_metrics;
    out->set_job_id(req->id());
    return grpc::Status::OK;
  }

 private:
  grpc::Status Find(const std::string& id, v1::Job* out) {
    for (const auto& j : jobs)
      if (j.id() == id) {
        *out = j;
        return grpc::Status::OK;
      }
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "job " + id + " not found");
  }
};

class FakeAdminService final : public v1::AdminService::Service {
 public:
  std::mutex mu;
  std::vector<v1::WorkerInfo> workers = SampleWorkers();
  v1::ListCacheResponse cache = SampleCache();
  grpc::Status fail = grpc::Status::OK;
  std::vector<v1::ListCacheRequest> cache_lists;
  std::vector<v1::EvictCacheRequest> evictions;
  std::vector<v1::CordonWorkerRequest> cordons;
  std::vector<v1::DrainWorkerRequest> drains;
  std::vector<v1::RemoveWorkerRequest> removals;

  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*, v1::ListWorkersResponse* out) override {
    std::lock_guard<std::mutex> l(mu);
    if (!fail.ok()) return fail;
    for (const auto& w : workers) *out->add_workers() = w;
    return grpc::Status::OK;
  }
  grpc::Status ListCache(grpc::ServerContext*, const v1::ListCacheRequest* req, v1::ListCacheResponse* out) override {
    std::lock_guard<std::mutex> l(mu);
    cache_lists.push_back(*req);
    if (!fail.ok()) return fail;
    *out = cache;
    return grpc::Status::OK;
  }
  grpc::Status EvictCache(grpc::ServerContext*, const v1::EvictCacheRequest* req, v1::EvictCacheResponse* out) override {
    std::lock_guard<std::mutex> l(mu);
    evictions.push_back(*req);
    if (!fail.ok()) return fail;
    out->set_workers(req->worker().empty() ? cache.workers_size() : 1);
    return grpc::Status::OK;
  }
  grpc::Status CordonWorker(grpc::ServerContext*, const v1::CordonWorkerRequest* req, v1::WorkerResponse* out) override {
    std::lock_guard<std::mutex> l(mu);
    cordons.push_back(*req);
    if (!fail.ok()) return fail;
    v1::WorkerInfo* w = FindWorker(req->name());
    if (w == nullptr) return grpc::Status(grpc::StatusCode::NOT_FOUND, "worker " + req->name() + " not found");
    w->set_cordoned(!req->uncordon());
    if (req->uncordon()) w->set_draining(false);
    *out->mutable_worker() = *w;
    return grpc::Status::OK;
  }
  grpc::Status DrainWorker(grpc::ServerContext*, const v1::DrainWorkerRequest* req, v1::WorkerResponse* out) override {
    std::lock_guard<std::mutex> l(mu);
    drains.push_back(*req);
    if (!fail.ok()) return fail;
    v1::WorkerInfo* w = FindWorker(req->name());
    if (w == nullptr) return grpc::Status(grpc::StatusCode::NOT_FOUND, "worker " + req->name() + " not found");
    w->set_cordoned(true);
    w->set_draining(true);
    *out->mutable_worker() = *w;
    return grpc::Status::OK;
  }

  grpc::Status RemoveWorker(grpc::ServerContext*, const v1::RemoveWorkerRequest* req, v1::RemoveWorkerResponse*) override {
    std::lock_guard<std::mutex> l(mu);
    removals.push_back(*req);
    if (!fail.ok()) return fail;
    for (auto it = workers.begin(); it != workers.end(); ++it)
      if (it->name() == req->name()) {
        workers.erase(it);
        return grpc::Status::OK;
      }
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no worker " + req->name());
  }

 private:
  v1::WorkerInfo* FindWorker(const std::string& name) {
    for (auto& w : workers)
      if (w.name() == name) return &w;
    return nullptr;
  }
};

// Both services on a port of 127.0.0.1 that the constructor picks.
class FakeCoordinator {
 public:
  FakeJobService jobs;
  FakeAdminService admin;

  FakeCoordinator() {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(&jobs);
    b.RegisterService(&admin);
    server_ = b.BuildAndStart();
  }
  ~FakeCoordinator() { server_->Shutdown(); }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::shared_ptr<grpc::Channel> Channel() const {
    return grpc::CreateChannel(address(), grpc::InsecureChannelCredentials());
  }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// What one command line printed and returned.
struct Run {
  int code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Parses `args` (what follows `nightshift`) with the global options and the command
// table, as main does, then runs the chosen verb on `channel` with stdout and stderr
// captured. The settings file and the environment are main's business, not read here.
inline Run RunCli(std::vector<std::string> args, const std::shared_ptr<grpc::Channel>& channel) {
  CLI::App app;
  app.require_subcommand(1);
  app.fallthrough();
  GlobalOptions options;
  AddGlobalOptions(&app, &options);
  const std::vector<Command> commands = AddCommands(&app);
  Run r;
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector last argument first
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  try {
    app.parse(args);
    const Command* chosen = Chosen(commands);
    r.code = chosen ? chosen->run(Session{channel, options.output == "json", options.output == "csv"}) : kExitUsage;
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    r.code = ExitCodeOf(e);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  r.out = ::testing::internal::GetCapturedStdout();
  r.err = ::testing::internal::GetCapturedStderr();
  return r;
}

}  // namespace nightshift::cli::testing

#endif  // NIGHTSHIFT_TESTS_CLI_FAKE_COORDINATOR_H_
