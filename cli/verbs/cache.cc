// nightshift cache list | stats | evict: the workers' feature caches, through the coordinator.
#include <grpcpp/grpcpp.h>

#include <cstdio>

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/verbs/verbs.h"
#include "nightshift/v1/admin.grpc.pb.h"

namespace nightshift::cli {
namespace {

void PrintEntries(const v1::ListCacheResponse& out) {
  std::printf("%-12s %-34s %10s %8s %6s %8s  %s\n", "WORKER", "KEY", "BYTES", "SAMPLES", "IN_USE", "BUILD_S", "DATA");
  for (const auto& w : out.workers())
    for (const auto& e : w.report().entries())
      std::printf("%-12s %-34s %10lld %8lld %6d %8.1f  %s\n", w.worker().c_str(), e.key().c_str(),
                  static_cast<long long>(e.bytes()), static_cast<long long>(e.train_samples() + e.val_samples()),
                  e.in_use(), e.build_seconds(), e.data_path().c_str());
}

void PrintStats(const v1::ListCacheResponse& out) {
  std::printf("%-12s %8s %12s %12s %6s %6s %10s %12s\n", "WORKER", "ENTRIES", "BYTES", "MAX_BYTES", "HITS", "MISSES",
              "BUILD_S", "SAVED_S");
  for (const auto& w : out.workers()) {
    const auto& st = w.report().stats();
    std::printf("%-12s %8lld %12lld %12lld %6lld %6lld %10.1f %12.1f\n", w.worker().c_str(),
                static_cast<long long>(st.entries()), static_cast<long long>(st.bytes()),
                static_cast<long long>(st.max_bytes()), static_cast<long long>(st.hits()),
                static_cast<long long>(st.misses()), st.build_seconds(), st.build_seconds_saved());
  }
}

// list and stats: the same call, two views of it.
int Show(const Session& s, const std::string& worker, void (*print)(const v1::ListCacheResponse&)) {
  v1::ListCacheRequest req;
  req.set_worker(worker);
  v1::ListCacheResponse out;
  grpc::ClientContext ctx;
  ctx.set_deadline(s.Deadline());
  grpc::Status status = v1::AdminService::NewStub(s.channel)->ListCache(&ctx, req, &out);
  if (!status.ok()) return CallFailed(status);
  if (s.json) std::printf("%s\n", ToJson(out).c_str());
  else print(out);
  return kExitOk;
}

struct EvictFlags {
  std::string worker;  // empty: every worker
  std::string key;     // exactly one of key and all
  bool all = false;
};

int Evict(const Session& s, const EvictFlags& f) {
  if (f.key.empty() == !f.all) return LocalError(Status::InvalidArgument("cache evict takes a KEY or --all"));
  v1::EvictCacheRequest req;
  req.set_worker(f.worker);
  req.set_key(f.key);
  req.set_all(f.all);
  v1::EvictCacheResponse out;
  grpc::ClientContext ctx;
  ctx.set_deadline(s.Deadline());
  grpc::Status status = v1::AdminService::NewStub(s.channel)->EvictCache(&ctx, req, &out);
  if (!status.ok()) return CallFailed(status);
  std::printf("eviction queued for %d worker(s)\n", out.workers());
  return kExitOk;
}

Handler ShowWith(CLI::App* cmd, void (*print)(const v1::ListCacheResponse&)) {
  auto worker = std::make_shared<std::string>();
  cmd->add_option("--worker", *worker, "only this worker");
  return [worker, print](const Session& s) { return Show(s, *worker, print); };
}

}  // namespace

Handler CacheList(CLI::App* cmd) { return ShowWith(cmd, PrintEntries); }
Handler CacheStats(CLI::App* cmd) { return ShowWith(cmd, PrintStats); }

Handler CacheEvict(CLI::App* cmd) {
  auto f = std::make_shared<EvictFlags>();
  cmd->add_option("--worker", f->worker, "only this worker");
  cmd->add_option("KEY", f->key, "entry key");
  cmd->add_flag("--all", f->all, "every entry not in use");
  return [f](const Session& s) { return Evict(s, *f); };
}

}  // namespace nightshift::cli
