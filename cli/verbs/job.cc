// nightshift job submit | list | describe | watch | logs | cancel | delete | artifacts | metrics
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/retry.h"
#include "cli/verbs/verbs.h"
#include "common/model_folder.h"
#include "nightshift/v1/jobs.grpc.pb.h"

namespace nightshift::cli {
namespace {

std::string StateName(v1::JobState s) { return v1::JobState_Name(s); }

// One WatchJob stream, printed as it comes: every change of state on a line of its own
// and, while RUNNING (table output only), the progress: a bar redrawn in place on a
// terminal, else a line every 5 s. *last: the job as last seen, kept across streams.
grpc::Status FollowStream(v1::JobService::Stub* stub, const std::string& id, const Session& s, bool tty,
                          v1::Job* last) {
  grpc::ClientContext ctx;
  v1::WatchJobRequest req;
  req.set_id(id);
  auto reader = stub->WatchJob(&ctx, req);
  v1::Job job;
  v1::JobState printed_state = v1::JOB_STATE_UNSPECIFIED;
  auto last_line = std::chrono::steady_clock::now() - std::chrono::seconds(60);
  while (reader->Read(&job)) {
    *last = job;
    if (job.state() != printed_state) {
      if (tty) std::printf("\r\033[K");
      std::printf("%s %s: %s\n", job.id().c_str(), StateName(job.state()).c_str(), job.reason().c_str());
      printed_state = job.state();
    }
    if (!s.json && job.state() == v1::RUNNING && job.progress().step() > 0) {
      auto now = std::chrono::steady_clock::now();
      if (tty) {
        std::printf("\r\033[K%s", ProgressLine(job).c_str());
      } else if (now - last_line > std::chrono::seconds(5)) {
        std::printf("%s\n", ProgressLine(job).c_str());
        last_line = now;
      }
    }
    std::fflush(stdout);
  }
  return reader->Finish();
}

// Whether a watch's stream ended in a refusal that another try meets again (the server
// cancelling it as it shuts down, or nobody answering, is followed again).
bool Refused(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
      return true;
    default:
      return false;
  }
}

// Follows a job to its end, reconnecting (up to 30 times, 1 s apart) when the
// coordinator goes away, then prints its metrics (or the job, -o json) and error. A
// refusal (not found, not the caller's, too many streams) ends it at once, and a job not
// ended when the reconnects run out is the last failure's: said as any call's, exit 3 or 4.
int Watch(const Session& s, const std::string& id) {
  const bool tty = ::isatty(1);
  auto stub = v1::JobService::NewStub(s.channel);
  v1::Job last;
  grpc::Status status;
  for (int reconnects = 0; reconnects < 30; ++reconnects) {
    status = FollowStream(stub.get(), id, s, tty, &last);
    if (IsTerminal(last.state())) break;
    if (Refused(status)) return CallFailed(status);
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  if (!IsTerminal(last.state()))
    return CallFailed(status.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "the job's stream kept ending before it did")
                                  : status);
  if (tty) std::printf("\n");
  if (s.json) std::printf("%s\n", ToJson(last).c_str());
  else std::fputs(MetricLines(last.metrics()).c_str(), stdout);
  if (!last.error().empty() && last.state() != v1::SUCCEEDED) std::printf("error: %s\n", last.error().c_str());
  return ExitCodeOf(last.state());
}

void PrintPlacements(const v1::Job& job) {
  for (const auto& p : job.placements())
    std::printf("Placement:  %s ranks %d..%d%s\n", p.worker().c_str(), p.first_rank(),
                p.first_rank() + p.num_ranks() - 1, p.finished() ? " (finished)" : p.running() ? " (running)" : "");
}

void Describe(const v1::Job& job) {
  std::printf("Job:        %s (%s)\n", job.id().c_str(), job.spec().name().c_str());
  std::printf("State:      %s\n", StateName(job.state()).c_str());
  std::printf("Reason:     %s\n", job.reason().c_str());
  std::printf("World size: %d   Attempt: %d   Restarts: %d/%d\n", job.spec().resources().world_size(),
              job.attempt(), job.restarts(), job.spec().restart().max_restarts());
  PrintPlacements(job);
  const v1::ClusterAllocation& a = job.allocation();
  if (!a.id().empty())
    std::printf("Allocation: %s job %s for attempt %d, last seen %s%s%s\n", a.cluster().c_str(), a.id().c_str(), a.attempt(),
                a.state().c_str(), a.reason().empty() || a.reason() == "None" ? "" : (" (" + a.reason() + ")").c_str(),
                a.nodes().empty() ? "" : (" on " + a.nodes()).c_str());
  if (!job.excluded_nodes().empty())
    std::printf("Avoiding:   %s (nodes that failed under its allocations)\n", job.excluded_nodes().c_str());
  if (!job.sweep_id().empty()) std::printf("Sweep:      %s\n", job.sweep_id().c_str());
  if (!job.held_by().empty()) std::printf("Held:       %s\n", job.held_by().c_str());
  const v1::TrackedRun& tracked = job.tracked_run();
  if (!tracked.run_id().empty())
    std::printf("MLflow:     run %s in experiment %s%s\n", tracked.run_id().c_str(), tracked.experiment_id().c_str(),
                !tracked.error().empty() ? (", not reported further: " + tracked.error()).c_str()
                : tracked.ended()        ? ", complete"
                                         : "");
  if (job.progress().step() > 0) std::printf("Progress:   %s\n", ProgressLine(job).c_str());
  if (job.checkpoint_step() > 0)
    std::printf("Checkpoint: step %lld at %s\n", static_cast<long long>(job.checkpoint_step()),
                job.checkpoint_path().c_str());
  if (!job.metrics().empty()) std::printf("Metrics:\n%s", MetricLines(job.metrics()).c_str());
  if (!job.data_cache().key().empty())
    std::printf("Data:       cache %s %s on %s, ready in %.1f s\n", job.data_cache().hit() ? "hit" : "miss (built)",
                job.data_cache().key().c_str(), job.data_cache().worker().c_str(), job.data_cache().prepare_seconds());
  if (!job.error().empty()) std::printf("Error:      %s\n", job.error().c_str());
  std::printf("Events:\n");
  for (const auto& e : job.events())
    std::printf("  %s  %-10s attempt %d  %s\n", UtcTime(e.time().seconds()).c_str(), StateName(e.state()).c_str(),
                e.attempt(), e.reason().c_str());
}

struct SubmitFlags {
  std::string file;   // the spec, YAML or JSON; sent as it is, the coordinator parses it
  bool wait = false;  // then follow the job to its end
  double retry_for_seconds = 60;  // retry UNAVAILABLE / DEADLINE_EXCEEDED this long; 0: never
};

int Submit(const Session& s, const SubmitFlags& f) {
  std::ifstream in(f.file);
  if (!in) return LocalError(Status::InvalidArgument("cannot read spec file " + f.file));
  std::stringstream text;
  text << in.rdbuf();
  v1::SubmitJobRequest req;
  req.set_spec_yaml(text.str());
  if (req.spec_yaml().empty()) return LocalError(Status::InvalidArgument("spec file " + f.file + " is empty"));
  // One id for every attempt: a retry after a lost reply gets the job the first made.
  req.set_request_id(NewRequestId());
  RetryPolicy policy;
  policy.retry_for_seconds = f.retry_for_seconds;
  auto stub = v1::JobService::NewStub(s.channel);
  v1::Job out;
  grpc::Status status = CallWithRetry(policy, [&](std::chrono::system_clock::time_point deadline) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::min(deadline, s.Deadline()));
    return stub->SubmitJob(&ctx, req, &out);
  });
  if (!status.ok()) return CallFailed(status, f.file);
  if (!f.wait) {
    std::printf("%s\n", s.json ? ToJson(out).c_str() : out.id().c_str());
    return kExitOk;
  }
  if (!s.json) std::printf("%s\n", out.id().c_str());
  return Watch(s, out.id());
}

// Every page of ListJobs.
int List(const Session& s, const std::string& state_filter) {
  v1::ListJobsRequest req;
  if (!state_filter.empty()) {
    v1::JobState st;
    if (!v1::JobState_Parse(state_filter, &st))
      return LocalError(Status::InvalidArgument("--state: unknown state " + state_filter));
    req.add_states(st);
  }
  auto stub = v1::JobService::NewStub(s.channel);
  v1::ListJobsResponse all;
  do {
    v1::ListJobsResponse page;
    grpc::ClientContext ctx;
    ctx.set_deadline(s.Deadline());
    grpc::Status status = stub->ListJobs(&ctx, req, &page);
    if (!status.ok()) return CallFailed(status);
    for (auto& j : *page.mutable_jobs()) *all.add_jobs() = std::move(j);
    req.set_page_token(page.next_page_token());
  } while (!req.page_token().empty());
  if (s.json) {
    std::printf("%s\n", ToJson(all).c_str());
    return kExitOk;
  }
  std::printf("%-10s %-10s %-20s %s\n", "ID", "STATE", "NAME", "REASON");
  for (const auto& j : all.jobs())
    std::printf("%-10s %-10s %-20s %s\n", j.id().c_str(), StateName(j.state()).c_str(), j.spec().name().c_str(),
                j.reason().c_str());
  return kExitOk;
}

int Get(const Session& s, const std::string& id) {
  v1::GetJobRequest req;
  req.set_id(id);
  v1::Job out;
  grpc::ClientContext ctx;
  ctx.set_deadline(s.Deadline());
  grpc::Status status = v1::JobService::NewStub(s.channel)->GetJob(&ctx, req, &out);
  if (!status.ok()) return CallFailed(status);
  if (s.json) std::printf("%s\n", ToJson(out).c_str());
  else Describe(out);
  return kExitOk;
}

int Cancel(const Session& s, const std::string& id) {
  v1::CancelJobRequest req;
  req.set_id(id);
  v1::Job out;
  grpc::ClientContext ctx;
  ctx.set_deadline(s.Deadline());
  grpc::Status status = v1::JobService::NewStub(s.channel)->CancelJob(&ctx, req, &out);
  if (!status.ok()) return CallFailed(status);
  if (s.json) std::printf("%s\n", ToJson(out).c_str());
  else std::printf("%s %s\n", out.id().c_str(), StateName(out.state()).c_str());
  return kExitOk;
}

// Removes a finished job and its history from the coordinator (FAILED_PRECONDITION for
// one that has not finished: cancel it first).
int Delete(const Session& s, const std::string& id) {
  v1::DeleteJobRequest req;
  req.set_id(id);
  v1::DeleteJobResponse out;
  grpc::ClientContext ctx;
  ctx.set_deadline(s.Deadline());
  grpc::Status status = v1::JobService::NewStub(s.channel)->DeleteJob(&ctx, req, &out);
  if (!status.ok()) return CallFailed(status);
  if (s.json) std::printf("{\"id\": \"%s\", \"deleted\": true}\n", id.c_str());
  else std::printf("%s deleted\n", id.c_str());
  return kExitOk;
}

struct LogsFlags {
  std::string id;
  int rank = 0;
  bool follow = false;  // until the rank ends
};

// The rank's log as the coordinator relays it from the worker, byte for byte.
int Logs(const Session& s, const LogsFlags& f) {
  grpc::ClientContext ctx;
  v1::StreamLogsRequest req;
  req.set_id(f.id);
  req.set_rank(f.rank);
  req.set_follow(f.follow);
  auto reader = v1::JobService::NewStub(s.channel)->StreamLogs(&ctx, req);
  v1::LogLines lines;
  while (reader->Read(&lines)) {
    std::fwrite(lines.data().data(), 1, lines.data().size(), stdout);
    std::fflush(stdout);
  }
  grpc::Status status = reader->Finish();
  return status.ok() ? kExitOk : CallFailed(status);
}

struct ArtifactsFlags {
  std::string id;
  std::string output;  // default ./<id>-model
  int64_t step = 0;    // 0: the final model; N: the kept checkpoint at step N
};

// A folder removed when the download does not complete (unless released).
class PartialDir {
 public:
  explicit PartialDir(std::filesystem::path dir) : dir_(std::move(dir)) {}
  ~PartialDir() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  void Release() { dir_.clear(); }

 private:
  std::filesystem::path dir_;
};

// Receives the stream into `dir`: every chunk's file must be listed in the checksums and
// come in order of offset. Fills *checksums_json and *step from the first chunk.
Status Receive(grpc::ClientReader<v1::ArtifactChunk>* reader, const std::string& dir, std::string* checksums_json,
               int64_t* step) {
  v1::ArtifactChunk chunk;
  ModelChecksums sums;
  std::map<std::string, int64_t> written;
  std::ofstream out;
  std::string open_file;
  bool first = true;
  while (reader->Read(&chunk)) {
    if (first) {
      auto parsed = ParseChecksums(chunk.checksums_json());
      if (!parsed.ok()) return parsed.status();
      sums = std::move(parsed.value());
      *checksums_json = chunk.checksums_json();
      *step = chunk.step();
      first = false;
      continue;
    }
    const std::string& name = chunk.file();
    if (!sums.count(name)) return Status::Corruption("the coordinator sent '" + name + "', not in checksums.json");
    if (chunk.offset() != written[name]) return Status::Corruption(name + ": a chunk out of order");
    if (name != open_file) {
      out.close();
      out.open(dir + "/" + name, std::ios::binary | std::ios::trunc);
      open_file = name;
    }
    out.write(chunk.data().data(), static_cast<std::streamsize>(chunk.data().size()));
    if (!out) return Status::IOError("cannot write " + dir + "/" + name);
    written[name] += static_cast<int64_t>(chunk.data().size());
  }
  out.close();
  if (first) return Status::OK();  // the call failed (the caller reads its status)
  for (const auto& [name, sum] : sums)
    if (!written.count(name)) std::ofstream(dir + "/" + name, std::ios::binary);  // verify names it missing or empty
  return Status::OK();
}

// Downloads into a hidden folder beside DIR, verifies every checksum, and renames it
// into place only when every file is whole; otherwise nothing is left behind.
int Artifacts(const Session& s, const ArtifactsFlags& f) {
  namespace fs = std::filesystem;
  fs::path dest = !f.output.empty() ? fs::path(f.output)
                  : f.step > 0   ? fs::path(f.id + "-model-step-" + std::to_string(f.step))
                                 : fs::path(f.id + "-model");
  if (dest.filename().empty()) dest = dest.parent_path();  // --output out/: the folder out
  std::error_code ec;
  if (fs::exists(dest, ec))
    return LocalError(Status::InvalidArgument(dest.string() + " already exists: remove it or choose another --output"));
  const fs::path parent = dest.parent_path().empty() ? fs::path(".") : dest.parent_path();
  fs::create_directories(parent, ec);
  const fs::path tmp = parent / ("." + dest.filename().string() + ".partial-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec) || ec)
    return LocalError(Status::InvalidArgument("cannot create " + tmp.string() + ": " + ec.message()));
  PartialDir partial(tmp);

  grpc::ClientContext ctx;
  v1::GetArtifactsRequest req;
  req.set_id(f.id);
  req.set_step(f.step);
  auto reader = v1::JobService::NewStub(s.channel)->GetArtifacts(&ctx, req);
  std::string checksums_json;
  int64_t step = 0;
  Status received = Receive(reader.get(), tmp.string(), &checksums_json, &step);
  if (!received.ok()) {
    ctx.TryCancel();
    reader->Finish();
    const std::string what = "download of job " + f.id + " failed, nothing kept: " + received.message();
    // Our own disk (full, not writable) is a local error, exit 2; what was sent, exit 5.
    return LocalError(received.code() == Status::kInternal ? Status::Internal(what) : Status::Corruption(what));
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return CallFailed(status, f.id);
  std::ofstream(tmp / kChecksumsFile, std::ios::binary) << checksums_json;
  Status verified = VerifyModelFolder(tmp.string());
  if (!verified.ok())
    return LocalError(Status::Corruption("the model of job " + f.id + " did not verify, nothing kept: " +
                                         verified.message()));
  fs::rename(tmp, dest, ec);
  if (ec) return LocalError(Status::InvalidArgument("cannot rename into " + dest.string() + ": " + ec.message()));
  partial.Release();
  int files = 0;
  int64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(dest, ec)) {
    ++files;
    bytes += static_cast<int64_t>(e.file_size());
  }
  if (s.json)
    std::printf("{\n  \"id\": \"%s\",\n  \"dir\": \"%s\",\n  \"step\": %lld,\n  \"files\": %d,\n  \"bytes\": %lld\n}\n",
                f.id.c_str(), dest.string().c_str(), static_cast<long long>(step), files,
                static_cast<long long>(bytes));
  else
    std::printf("%s: model at step %lld in %s (%d files, %lld bytes, checksums verified)\n", f.id.c_str(),
                static_cast<long long>(step), dest.string().c_str(), files, static_cast<long long>(bytes));
  return kExitOk;
}

int Metrics(const Session& s, const std::string& id) {
  v1::GetJobMetricsRequest req;
  req.set_id(id);
  v1::JobMetrics out;
  grpc::ClientContext ctx;
  ctx.set_deadline(s.Deadline());
  grpc::Status status = v1::JobService::NewStub(s.channel)->GetJobMetrics(&ctx, req, &out);
  if (!status.ok()) return CallFailed(status);
  if (s.json) std::printf("%s\n", ToJson(out).c_str());
  else if (s.csv) std::fputs(MetricsCsv(out).c_str(), stdout);
  else std::printf("%s%s", MetricsTable(out).c_str(), LossCurve(out).c_str());
  return kExitOk;
}

// For the verbs whose only argument is the job's ID.
}  // namespace

Handler JobSubmit(CLI::App* cmd) {
  auto f = std::make_shared<SubmitFlags>();
  cmd->add_option("FILE", f->file, "job spec")->required();
  cmd->add_flag("--wait", f->wait, "follow the job to its end; exit 0 only if it SUCCEEDED");
  cmd->add_option("--retry-for", f->retry_for_seconds,
                  "seconds to keep retrying when the coordinator is unreachable or slow (the same request id "
                  "each time, so the job is created once); 0: no retry")
      ->check(CLI::Range(0.0, 86400.0));
  return [f](const Session& s) { return Submit(s, *f); };
}

Handler JobList(CLI::App* cmd) {
  auto state = std::make_shared<std::string>();
  cmd->add_option("--state", *state, "only jobs in this state (QUEUED, RUNNING, ...)");
  return [state](const Session& s) { return List(s, *state); };
}

Handler JobDescribe(CLI::App* cmd) { return WithId(cmd, Get); }
Handler JobWatch(CLI::App* cmd) { return WithId(cmd, Watch); }
Handler JobCancel(CLI::App* cmd) { return WithId(cmd, Cancel); }
Handler JobDelete(CLI::App* cmd) { return WithId(cmd, Delete); }

Handler JobMetrics(CLI::App* cmd) { return WithId(cmd, Metrics); }

Handler JobArtifacts(CLI::App* cmd) {
  auto f = std::make_shared<ArtifactsFlags>();
  cmd->add_option("ID", f->id)->required();
  cmd->add_option("--output", f->output, "folder to create (default ./<ID>-model[-step-N]); must not exist");
  cmd->add_option("--step", f->step,
                  "the kept checkpoint at step N, exported on request (default: the job's final model)")
      ->check(CLI::NonNegativeNumber);
  return [f](const Session& s) { return Artifacts(s, *f); };
}

Handler JobLogs(CLI::App* cmd) {
  auto f = std::make_shared<LogsFlags>();
  cmd->add_option("ID", f->id)->required();
  cmd->add_option("--rank", f->rank, "which rank (default 0)");
  cmd->add_flag("-f,--follow", f->follow, "keep printing new lines until the rank ends");
  return [f](const Session& s) { return Logs(s, *f); };
}

}  // namespace nightshift::cli
