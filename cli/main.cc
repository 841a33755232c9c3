// nightshift: the user and operator CLI (noun verb, like kubectl).
//
// Exit codes: 0 success; 1 the job ended FAILED or CANCELLED (submit --wait, watch);
// 2 bad usage; 3 the coordinator refused the call (the message says why);
// 4 the coordinator cannot be reached.
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <iostream>
#include <sstream>
#include <thread>

#include "cli/config.h"
#include "common/client.h"
#include "common/grpc_status.h"
#include "nightshift/v1/admin.grpc.pb.h"
#include "nightshift/v1/jobs.grpc.pb.h"

namespace {

using namespace nightshift;

struct Globals {
  std::string coordinator;
  std::string output = "table";
};

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

int RpcFailed(const grpc::Status& s) {
  std::cerr << "error: " << GrpcErrorString(s) << "\n";
  return s.error_code() == grpc::StatusCode::UNAVAILABLE || s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
             ? 4 : 3;
}

std::string StateName(v1::JobState s) { return v1::JobState_Name(s); }

std::string Duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "-";
  int s = static_cast<int>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof(buf), "%dh%02dm", s / 3600, (s / 60) % 60);
  else if (s >= 60) std::snprintf(buf, sizeof(buf), "%dm%02ds", s / 60, s % 60);
  else std::snprintf(buf, sizeof(buf), "%ds", s);
  return buf;
}

std::string ProgressLine(const v1::Job& job) {
  const v1::Progress& p = job.progress();
  std::ostringstream os;
  const int width = 24;
  double frac = p.total_steps() > 0 ? std::min(1.0, double(p.step()) / p.total_steps()) : 0;
  int filled = static_cast<int>(frac * width);
  os << "[" << std::string(filled, '#') << std::string(width - filled, '.') << "] "
     << static_cast<int>(frac * 100) << "% step " << p.step() << "/" << p.total_steps() << " epoch "
     << p.epoch();
  char buf[128];
  std::snprintf(buf, sizeof(buf), " loss %.4f %.0f tok/s", p.loss(), p.tokens_per_second());
  os << buf;
  if (p.host_rss_bytes() > 0) os << " rss " << p.host_rss_bytes() / (1 << 20) << " MiB";
  os << " ETA " << Duration(p.eta_seconds());
  return os.str();
}

void PrintJobTable(const v1::Job& job) {
  std::printf("%-10s %-10s %-20s %s\n", job.id().c_str(), StateName(job.state()).c_str(),
              job.spec().name().c_str(), job.reason().c_str());
}

void Describe(const v1::Job& job) {
  std::printf("Job:        %s (%s)\n", job.id().c_str(), job.spec().name().c_str());
  std::printf("State:      %s\n", StateName(job.state()).c_str());
  std::printf("Reason:     %s\n", job.reason().c_str());
  std::printf("World size: %d   Attempt: %d   Restarts: %d/%d\n", job.spec().resources().world_size(),
              job.attempt(), job.restarts(), job.spec().restart().max_restarts());
  for (const auto& p : job.placements())
    std::printf("Placement:  %s ranks %d..%d%s\n", p.worker().c_str(), p.first_rank(),
                p.first_rank() + p.num_ranks() - 1, p.finished() ? " (finished)" : p.running() ? " (running)" : "");
  if (job.progress().step() > 0) std::printf("Progress:   %s\n", ProgressLine(job).c_str());
  if (job.checkpoint_step() > 0)
    std::printf("Checkpoint: step %lld at %s\n", static_cast<long long>(job.checkpoint_step()),
                job.checkpoint_path().c_str());
  if (!job.metrics().empty()) {
    std::printf("Metrics:\n");
    std::map<std::string, double> sorted(job.metrics().begin(), job.metrics().end());
    for (const auto& [k, v] : sorted) std::printf("  %-20s %.4f\n", k.c_str(), v);
  }
  if (!job.data_cache().key().empty())
    std::printf("Data:       cache %s %s on %s, ready in %.1f s\n", job.data_cache().hit() ? "hit" : "miss (built)",
                job.data_cache().key().c_str(), job.data_cache().worker().c_str(), job.data_cache().prepare_seconds());
  if (!job.error().empty()) std::printf("Error:      %s\n", job.error().c_str());
  std::printf("Events:\n");
  for (const auto& e : job.events()) {
    time_t t = e.time().seconds();
    std::tm tm;
    gmtime_r(&t, &tm);
    char ts[32];
    std::strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
    std::printf("  %s  %-10s attempt %d  %s\n", ts, StateName(e.state()).c_str(), e.attempt(), e.reason().c_str());
  }
}

bool Terminal(v1::JobState s) { return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED; }

// Follows a job to its end. Prints progress (a bar redrawn in place on a terminal, a
// line every few seconds otherwise). Returns the exit code.
int Watch(v1::JobService::Stub* stub, const std::string& id, const Globals& g) {
  const bool tty = ::isatty(1);
  v1::Job last;
  for (int reconnects = 0; reconnects < 30; ++reconnects) {
    grpc::ClientContext ctx;
    v1::WatchJobRequest req;
    req.set_id(id);
    auto reader = stub->WatchJob(&ctx, req);
    v1::Job job;
    v1::JobState printed_state = v1::JOB_STATE_UNSPECIFIED;
    auto last_line = std::chrono::steady_clock::now() - std::chrono::seconds(60);
    while (reader->Read(&job)) {
      last = job;
      if (job.state() != printed_state) {
        if (tty) std::printf("\r\033[K");
        std::printf("%s %s: %s\n", job.id().c_str(), StateName(job.state()).c_str(), job.reason().c_str());
        printed_state = job.state();
      }
      if (g.output == "table" && job.state() == v1::RUNNING && job.progress().step() > 0) {
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
    grpc::Status s = reader->Finish();
    if (Terminal(last.state())) break;
    if (s.error_code() == grpc::StatusCode::NOT_FOUND) return RpcFailed(s);
    // The coordinator went away (restart?): reconnect.
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  if (tty) std::printf("\n");
  if (g.output == "json") std::printf("%s\n", ToJson(last).c_str());
  else if (!last.metrics().empty()) {
    std::map<std::string, double> sorted(last.metrics().begin(), last.metrics().end());
    for (const auto& [k, v] : sorted) std::printf("  %-20s %.4f\n", k.c_str(), v);
  }
  if (!last.error().empty() && last.state() != v1::SUCCEEDED) std::printf("error: %s\n", last.error().c_str());
  return last.state() == v1::SUCCEEDED ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Globals g;
  g.coordinator = "127.0.0.1:7070";
  CLI::App app{"nightshift: submit and follow training jobs, operate the cluster"};
  app.require_subcommand(1);
  app.fallthrough();  // global options (--coordinator, -o) also after the subcommand
  // Global settings: flags, else the environment, else the config file (cli/config.h).
  std::string config_flag;
  app.add_option("--config", config_flag,
                 "settings file (default ~/.config/nightshift/config.yaml; env NIGHTSHIFT_CONFIG)");
  auto* coordinator_flag =
      app.add_option("--coordinator", g.coordinator, "coordinator HOST:PORT (env NIGHTSHIFT_COORDINATOR)");
  auto* output_flag =
      app.add_option("-o,--output", g.output, "table or json")->check(CLI::IsMember({"table", "json"}));
  ClientOptions client;
  auto* token_flag =
      app.add_option("--token", client.token, "bearer token (else --token-file, else env NIGHTSHIFT_TOKEN)");
  auto* token_file_flag =
      app.add_option("--token-file", client.token_file, "file whose first line is the bearer token");
  auto* tls_ca_flag =
      app.add_option("--tls-ca", client.tls_ca, "PEM CA of the coordinator's certificate: connect with TLS");
  auto* tls_cert_flag = app.add_option("--tls-cert", client.tls_cert, "PEM client certificate (mutual TLS)");
  auto* tls_key_flag = app.add_option("--tls-key", client.tls_key, "PEM key of --tls-cert");

  auto* job = app.add_subcommand("job", "jobs")->require_subcommand(1);
  std::string file, id, state_filter;
  bool wait = false;
  auto* submit = job->add_subcommand("submit", "submit a job spec (YAML or JSON); prints the job id");
  submit->add_option("FILE", file, "job spec")->required();
  submit->add_flag("--wait", wait, "follow the job to its end; exit 0 only if it SUCCEEDED");
  auto* list = job->add_subcommand("list", "list jobs");
  list->add_option("--state", state_filter, "only jobs in this state (QUEUED, RUNNING, ...)");
  auto* describe = job->add_subcommand("describe", "show a job: state, progress, metrics, events");
  describe->add_option("ID", id)->required();
  auto* watch = job->add_subcommand("watch", "follow a job's progress to its end");
  watch->add_option("ID", id)->required();
  int log_rank = 0;
  bool follow = false;
  auto* logs = job->add_subcommand("logs", "print a rank's log (relayed by the coordinator from its worker)");
  logs->add_option("ID", id)->required();
  logs->add_option("--rank", log_rank, "which rank (default 0)");
  logs->add_flag("-f,--follow", follow, "keep printing new lines until the rank ends");
  auto* cancel = job->add_subcommand("cancel", "cancel a job");
  cancel->add_option("ID", id)->required();
  auto* worker = app.add_subcommand("worker", "workers")->require_subcommand(1);
  auto* wlist = worker->add_subcommand("list", "list workers");
  std::string worker_name;
  auto* wcordon = worker->add_subcommand("cordon", "place no new work on a worker (running jobs stay)");
  auto* wuncordon = worker->add_subcommand("uncordon", "accept new work on a worker again");
  auto* wdrain = worker->add_subcommand("drain", "cordon a worker and move its jobs: they checkpoint and resume elsewhere");
  for (auto* c : {wcordon, wuncordon, wdrain}) c->add_option("NAME", worker_name, "worker name")->required();
  auto* cluster = app.add_subcommand("cluster", "the cluster as a whole")->require_subcommand(1);
  auto* cstatus = cluster->add_subcommand("status", "workers, slots and the queue");
  auto* cache = app.add_subcommand("cache", "the workers' preprocessed-feature caches")->require_subcommand(1);
  std::string worker_filter, cache_key;
  bool evict_all = false;
  auto* clist = cache->add_subcommand("list", "entries of every worker's cache");
  auto* cstats = cache->add_subcommand("stats", "entries, bytes, hits, misses, build seconds saved");
  auto* cevict = cache->add_subcommand("evict", "evict an entry (KEY) or every entry (--all); entries in use stay");
  for (auto* c : {clist, cstats, cevict}) c->add_option("--worker", worker_filter, "only this worker");
  cevict->add_option("KEY", cache_key, "entry key");
  cevict->add_flag("--all", evict_all, "every entry not in use");
  CLI11_PARSE(app, argc, argv);

  bool config_named = false;
  const std::string config_path = CliConfigPath(config_flag, &config_named);
  std::map<std::string, std::string> config;
  if (Status st = LoadCliConfig(config_path, config_named, &config); !st.ok()) {
    std::cerr << "error: " << st.message() << "\n";
    return 2;
  }
  const auto env_set = [](const char* name) {
    const char* v = name ? std::getenv(name) : nullptr;
    return v != nullptr && *v != '\0';
  };
  const auto setting = [&](CLI::Option* flag, const char* env, const char* key, std::string* value) {
    if (flag->count() > 0) return;
    if (env_set(env)) {
      *value = std::getenv(env);
    } else if (auto it = config.find(key); it != config.end()) {
      *value = it->second;
    }
  };
  setting(coordinator_flag, "NIGHTSHIFT_COORDINATOR", "coordinator", &g.coordinator);
  setting(output_flag, nullptr, "output", &g.output);
  // A token on the command line or in NIGHTSHIFT_TOKEN beats the file's token and token_file.
  if (token_flag->count() == 0 && token_file_flag->count() == 0 && !env_set("NIGHTSHIFT_TOKEN")) {
    setting(token_flag, nullptr, "token", &client.token);
    setting(token_file_flag, nullptr, "token_file", &client.token_file);
  }
  setting(tls_ca_flag, nullptr, "tls_ca", &client.tls_ca);
  setting(tls_cert_flag, nullptr, "tls_cert", &client.tls_cert);
  setting(tls_key_flag, nullptr, "tls_key", &client.tls_key);

  client.address = g.coordinator;
  Status cs = ResolveToken(&client);
  auto made = cs.ok() ? MakeChannel(client) : StatusOr<std::shared_ptr<grpc::Channel>>(cs);
  if (!made.ok()) {
    std::cerr << "error: " << made.status().message() << "\n";
    return 2;
  }
  auto channel = made.value();
  auto jobs = v1::JobService::NewStub(channel);
  auto deadline = [] { return std::chrono::system_clock::now() + std::chrono::seconds(30); };

  if (submit->parsed()) {
    std::ifstream in(file);
    if (!in) {
      std::cerr << "error: cannot read spec file " << file << "\n";
      return 2;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    v1::SubmitJobRequest req;
    req.set_spec_yaml(ss.str());
    if (req.spec_yaml().empty()) {
      std::cerr << "error: spec file " << file << " is empty\n";
      return 2;
    }
    v1::Job out;
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    grpc::Status s = jobs->SubmitJob(&ctx, req, &out);
    if (!s.ok()) {
      std::cerr << "error: " << file << ": " << GrpcErrorString(s) << "\n";
      return s.error_code() == grpc::StatusCode::UNAVAILABLE ? 4 : 3;
    }
    if (!wait) {
      if (g.output == "json") std::printf("%s\n", ToJson(out).c_str());
      else std::printf("%s\n", out.id().c_str());
      return 0;
    }
    if (g.output == "table") std::printf("%s\n", out.id().c_str());
    return Watch(jobs.get(), out.id(), g);
  }
  if (list->parsed()) {
    v1::ListJobsRequest req;
    if (!state_filter.empty()) {
      v1::JobState st;
      if (!v1::JobState_Parse(state_filter, &st)) {
        std::cerr << "error: --state: unknown state " << state_filter << "\n";
        return 2;
      }
      req.add_states(st);
    }
    v1::ListJobsResponse all;
    do {
      v1::ListJobsResponse page;
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline());
      grpc::Status s = jobs->ListJobs(&ctx, req, &page);
      if (!s.ok()) return RpcFailed(s);
      for (auto& j : *page.mutable_jobs()) *all.add_jobs() = std::move(j);
      req.set_page_token(page.next_page_token());
    } while (!req.page_token().empty());
    if (g.output == "json") {
      std::printf("%s\n", ToJson(all).c_str());
    } else {
      std::printf("%-10s %-10s %-20s %s\n", "ID", "STATE", "NAME", "REASON");
      for (const auto& j : all.jobs()) PrintJobTable(j);
    }
    return 0;
  }
  if (describe->parsed() || cancel->parsed()) {
    v1::Job out;
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    grpc::Status s;
    if (describe->parsed()) {
      v1::GetJobRequest req;
      req.set_id(id);
      s = jobs->GetJob(&ctx, req, &out);
    } else {
      v1::CancelJobRequest req;
      req.set_id(id);
      s = jobs->CancelJob(&ctx, req, &out);
    }
    if (!s.ok()) return RpcFailed(s);
    if (g.output == "json") std::printf("%s\n", ToJson(out).c_str());
    else if (describe->parsed()) Describe(out);
    else std::printf("%s %s\n", out.id().c_str(), StateName(out.state()).c_str());
    return 0;
  }
  if (watch->parsed()) return Watch(jobs.get(), id, g);
  if (logs->parsed()) {
    grpc::ClientContext ctx;
    v1::StreamLogsRequest req;
    req.set_id(id);
    req.set_rank(log_rank);
    req.set_follow(follow);
    auto reader = jobs->StreamLogs(&ctx, req);
    v1::LogLines lines;
    while (reader->Read(&lines)) {
      std::fwrite(lines.data().data(), 1, lines.data().size(), stdout);
      std::fflush(stdout);
    }
    grpc::Status s = reader->Finish();
    return s.ok() ? 0 : RpcFailed(s);
  }
  if (clist->parsed() || cstats->parsed()) {
    auto admin = v1::AdminService::NewStub(channel);
    v1::ListCacheRequest req;
    req.set_worker(worker_filter);
    v1::ListCacheResponse out;
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    grpc::Status s = admin->ListCache(&ctx, req, &out);
    if (!s.ok()) return RpcFailed(s);
    if (g.output == "json") {
      std::printf("%s\n", ToJson(out).c_str());
    } else if (clist->parsed()) {
      std::printf("%-12s %-34s %10s %8s %6s %8s  %s\n", "WORKER", "KEY", "BYTES", "SAMPLES", "IN_USE", "BUILD_S", "DATA");
      for (const auto& w : out.workers())
        for (const auto& e : w.report().entries())
          std::printf("%-12s %-34s %10lld %8lld %6d %8.1f  %s\n", w.worker().c_str(), e.key().c_str(),
                      static_cast<long long>(e.bytes()), static_cast<long long>(e.train_samples() + e.val_samples()),
                      e.in_use(), e.build_seconds(), e.data_path().c_str());
    } else {
      std::printf("%-12s %8s %12s %12s %6s %6s %10s %12s\n", "WORKER", "ENTRIES", "BYTES", "MAX_BYTES", "HITS",
                  "MISSES", "BUILD_S", "SAVED_S");
      for (const auto& w : out.workers()) {
        const auto& st = w.report().stats();
        std::printf("%-12s %8lld %12lld %12lld %6lld %6lld %10.1f %12.1f\n", w.worker().c_str(),
                    static_cast<long long>(st.entries()), static_cast<long long>(st.bytes()),
                    static_cast<long long>(st.max_bytes()), static_cast<long long>(st.hits()),
                    static_cast<long long>(st.misses()), st.build_seconds(), st.build_seconds_saved());
      }
    }
    return 0;
  }
  if (cevict->parsed()) {
    if (cache_key.empty() == !evict_all) {
      std::cerr << "error: cache evict takes a KEY or --all\n";
      return 2;
    }
    auto admin = v1::AdminService::NewStub(channel);
    v1::EvictCacheRequest req;
    req.set_worker(worker_filter);
    req.set_key(cache_key);
    req.set_all(evict_all);
    v1::EvictCacheResponse out;
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    grpc::Status s = admin->EvictCache(&ctx, req, &out);
    if (!s.ok()) return RpcFailed(s);
    std::printf("eviction queued for %d worker(s)\n", out.workers());
    return 0;
  }
  auto worker_state = [](const v1::WorkerInfo& w) {
    std::string s = v1::WorkerState_Name(w.state());
    if (w.draining()) s += ",DRAINING";
    else if (w.cordoned()) s += ",CORDONED";
    return s;
  };
  if (wcordon->parsed() || wuncordon->parsed() || wdrain->parsed()) {
    auto admin = v1::AdminService::NewStub(channel);
    v1::WorkerResponse out;
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    grpc::Status s;
    if (wdrain->parsed()) {
      v1::DrainWorkerRequest req;
      req.set_name(worker_name);
      s = admin->DrainWorker(&ctx, req, &out);
    } else {
      v1::CordonWorkerRequest req;
      req.set_name(worker_name);
      req.set_uncordon(wuncordon->parsed());
      s = admin->CordonWorker(&ctx, req, &out);
    }
    if (!s.ok()) return RpcFailed(s);
    if (g.output == "json") std::printf("%s\n", ToJson(out.worker()).c_str());
    else std::printf("worker %s: %s\n", out.worker().name().c_str(), worker_state(out.worker()).c_str());
    return 0;
  }
  if (cstatus->parsed()) {
    auto admin = v1::AdminService::NewStub(channel);
    v1::ListWorkersResponse workers;
    grpc::ClientContext wctx;
    wctx.set_deadline(deadline());
    grpc::Status s = admin->ListWorkers(&wctx, v1::ListWorkersRequest(), &workers);
    if (!s.ok()) return RpcFailed(s);
    v1::ListJobsRequest jreq;
    jreq.set_page_size(1000);
    for (auto st : {v1::QUEUED, v1::SCHEDULED, v1::RUNNING, v1::PREEMPTED, v1::STUCK}) jreq.add_states(st);
    v1::ListJobsResponse jobs_out;
    grpc::ClientContext jctx;
    jctx.set_deadline(deadline());
    s = jobs->ListJobs(&jctx, jreq, &jobs_out);
    if (!s.ok()) return RpcFailed(s);
    if (g.output == "json") {
      std::printf("{\"workers\": %s, \"jobs\": %s}\n", ToJson(workers).c_str(), ToJson(jobs_out).c_str());
      return 0;
    }
    int total = 0, used = 0, ready = 0;
    std::printf("%-16s %-18s %-6s %-6s %s\n", "WORKER", "STATE", "SLOTS", "USED", "JOBS");
    for (const auto& w : workers.workers()) {
      std::string tasks;
      for (const auto& t : w.tasks()) tasks += (tasks.empty() ? "" : ",") + t.job_id();
      std::printf("%-16s %-18s %-6d %-6d %s\n", w.name().c_str(), worker_state(w).c_str(), w.slots(),
                  w.used_slots(), tasks.c_str());
      if (w.state() == v1::WORKER_READY) {
        ready++;
        if (!w.cordoned()) total += w.slots();
      }
      used += w.used_slots();
    }
    std::map<std::string, int> by_state;
    for (const auto& j : jobs_out.jobs()) by_state[StateName(j.state())]++;
    std::printf("\n%d workers ready, %d of %d schedulable slots in use\n", ready, used, total);
    for (const auto& [st, n] : by_state) std::printf("%s: %d  ", st.c_str(), n);
    std::printf("\n\n%-10s %-9s %-5s %-6s %s\n", "QUEUE", "PRIORITY", "SIZE", "OWNER", "REASON");
    for (const auto& j : jobs_out.jobs()) {
      if (j.state() != v1::QUEUED && j.state() != v1::PREEMPTED) continue;
      std::printf("%-10s %-9d %-5d %-6s %s\n", j.id().c_str(), j.spec().priority(),
                  j.spec().resources().world_size(), j.owner().empty() ? "-" : j.owner().c_str(),
                  j.reason().c_str());
    }
    return 0;
  }
  if (wlist->parsed()) {
    auto admin = v1::AdminService::NewStub(channel);
    v1::ListWorkersResponse out;
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    grpc::Status s = admin->ListWorkers(&ctx, v1::ListWorkersRequest(), &out);
    if (!s.ok()) return RpcFailed(s);
    if (g.output == "json") {
      std::printf("%s\n", ToJson(out).c_str());
    } else {
      std::printf("%-16s %-14s %-6s %-6s %s\n", "NAME", "STATE", "SLOTS", "USED", "TASKS");
      for (const auto& w : out.workers()) {
        std::string tasks;
        for (const auto& t : w.tasks()) tasks += (tasks.empty() ? "" : ",") + t.job_id();
        std::printf("%-16s %-14s %-6d %-6d %s\n", w.name().c_str(), worker_state(w).c_str(),
                    w.slots(), w.used_slots(), tasks.c_str());
      }
    }
    return 0;
  }
  return 2;
}
