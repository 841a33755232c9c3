// nightshift cluster status
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <map>

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/verbs/verbs.h"
#include "nightshift/v1/admin.grpc.pb.h"
#include "nightshift/v1/jobs.grpc.pb.h"

namespace nightshift::cli {
namespace {

// One row per worker, then "N workers ready, U of T schedulable slots in use": T counts
// the slots of READY workers that are not cordoned, U the used slots of every worker.
void PrintWorkers(const v1::ListWorkersResponse& workers) {
  int total = 0, used = 0, ready = 0;
  std::printf("%-16s %-18s %-6s %-6s %-7s %s\n", "WORKER", "STATE", "SLOTS", "USED", "MEMORY", "JOBS");
  for (const auto& w : workers.workers()) {
    std::printf("%s\n", WorkerRow(w, 18).c_str());
    if (w.state() == v1::WORKER_READY) {
      ready++;
      if (!w.cordoned()) total += w.slots();
    }
    used += w.used_slots();
  }
  std::printf("\n%d workers ready, %d of %d schedulable slots in use\n", ready, used, total);
}

// Unfinished jobs counted by state, then the queue (QUEUED and PREEMPTED) with reasons.
void PrintJobs(const v1::ListJobsResponse& jobs) {
  std::map<std::string, int> by_state;
  for (const auto& j : jobs.jobs()) by_state[v1::JobState_Name(j.state())]++;
  for (const auto& [st, n] : by_state) std::printf("%s: %d  ", st.c_str(), n);
  std::printf("\n\n%-10s %-9s %-5s %-6s %s\n", "QUEUE", "PRIORITY", "SIZE", "OWNER", "REASON");
  for (const auto& j : jobs.jobs()) {
    if (j.state() != v1::QUEUED && j.state() != v1::PREEMPTED) continue;
    std::printf("%-10s %-9d %-5d %-6s %s\n", j.id().c_str(), j.spec().priority(), j.spec().resources().world_size(),
                j.owner().empty() ? "-" : j.owner().c_str(), j.reason().c_str());
  }
}

int Show(const Session& s) {
  v1::ListWorkersResponse workers;
  grpc::ClientContext wctx;
  wctx.set_deadline(s.Deadline());
  grpc::Status status = v1::AdminService::NewStub(s.channel)->ListWorkers(&wctx, v1::ListWorkersRequest(), &workers);
  if (!status.ok()) return CallFailed(status);
  v1::ListJobsRequest jreq;
  jreq.set_page_size(1000);  // one page: the status is a glance, not an inventory
  for (auto st : {v1::QUEUED, v1::SCHEDULED, v1::RUNNING, v1::PREEMPTED, v1::STUCK}) jreq.add_states(st);
  v1::ListJobsResponse jobs;
  grpc::ClientContext jctx;
  jctx.set_deadline(s.Deadline());
  status = v1::JobService::NewStub(s.channel)->ListJobs(&jctx, jreq, &jobs);
  if (!status.ok()) return CallFailed(status);
  if (s.json) {
    std::printf("{\"workers\": %s, \"jobs\": %s}\n", ToJson(workers).c_str(), ToJson(jobs).c_str());
    return kExitOk;
  }
  PrintWorkers(workers);
  PrintJobs(jobs);
  return kExitOk;
}

}  // namespace

Handler ClusterStatus(CLI::App*) { return Show; }

}  // namespace nightshift::cli
