// nightshift worker list | cordon | uncordon | drain | remove
#include <grpcpp/grpcpp.h>

#include <cstdio>

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/verbs/verbs.h"
#include "nightshift/v1/admin.grpc.pb.h"

namespace nightshift::cli {
namespace {

int List(const Session& s) {
  v1::ListWorkersResponse out;
  grpc::ClientContext ctx;
  ctx.set_deadline(s.Deadline());
  grpc::Status status = v1::AdminService::NewStub(s.channel)->ListWorkers(&ctx, v1::ListWorkersRequest(), &out);
  if (!status.ok()) return CallFailed(status);
  if (s.json) {
    std::printf("%s\n", ToJson(out).c_str());
    return kExitOk;
  }
  std::printf("%-16s %-14s %-6s %-6s %-7s %s\n", "NAME", "STATE", "SLOTS", "USED", "MEMORY", "TASKS");
  for (const auto& w : out.workers()) std::printf("%s\n", WorkerRow(w, 14).c_str());
  return kExitOk;
}

enum class Action { kCordon, kUncordon, kDrain };

// Prints the worker as the coordinator left it: "worker w1: READY,CORDONED".
int Change(const Session& s, const std::string& name, Action action) {
  auto admin = v1::AdminService::NewStub(s.channel);
  v1::WorkerResponse out;
  grpc::ClientContext ctx;
  ctx.set_deadline(s.Deadline());
  grpc::Status status;
  if (action == Action::kDrain) {
    v1::DrainWorkerRequest req;
    req.set_name(name);
    status = admin->DrainWorker(&ctx, req, &out);
  } else {
    v1::CordonWorkerRequest req;
    req.set_name(name);
    req.set_uncordon(action == Action::kUncordon);
    status = admin->CordonWorker(&ctx, req, &out);
  }
  if (!status.ok()) return CallFailed(status);
  if (s.json) std::printf("%s\n", ToJson(out.worker()).c_str());
  else std::printf("worker %s: %s\n", out.worker().name().c_str(), WorkerStateText(out.worker()).c_str());
  return kExitOk;
}

Handler WithName(CLI::App* cmd, Action action) {
  auto name = std::make_shared<std::string>();
  cmd->add_option("NAME", *name, "worker name")->required();
  return [name, action](const Session& s) { return Change(s, *name, action); };
}

// "worker w1 removed": the coordinator forgot it; its running jobs restart elsewhere.
int Remove(const Session& s, const std::string& name) {
  v1::RemoveWorkerRequest req;
  req.set_name(name);
  v1::RemoveWorkerResponse out;
  grpc::ClientContext ctx;
  ctx.set_deadline(s.Deadline());
  grpc::Status status = v1::AdminService::NewStub(s.channel)->RemoveWorker(&ctx, req, &out);
  if (!status.ok()) return CallFailed(status);
  if (s.json) std::printf("{\"removed\": \"%s\"}\n", name.c_str());
  else std::printf("worker %s removed\n", name.c_str());
  return kExitOk;
}

}  // namespace

Handler WorkerList(CLI::App*) { return List; }
Handler WorkerCordon(CLI::App* cmd) { return WithName(cmd, Action::kCordon); }
Handler WorkerUncordon(CLI::App* cmd) { return WithName(cmd, Action::kUncordon); }
Handler WorkerDrain(CLI::App* cmd) { return WithName(cmd, Action::kDrain); }
Handler WorkerRemove(CLI::App* cmd) {
  auto name = std::make_shared<std::string>();
  cmd->add_option("NAME", *name, "worker name")->required();
  return [name](const Session& s) { return Remove(s, *name); };
}

}  // namespace nightshift::cli
