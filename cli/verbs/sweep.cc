// nightshift sweep submit | list | describe | cancel
#include <grpcpp/grpcpp.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "cli/retry.h"
#include "cli/verbs/verbs.h"
#include "nightshift/v1/jobs.grpc.pb.h"

namespace nightshift::cli {
namespace {

std::string TrialStateName(v1::TrialState s) {
  std::string name = v1::TrialState_Name(s);
  return name.rfind("TRIAL_", 0) == 0 ? name.substr(6) : name;
}

// The sweep file's text; `base: FILE` (a path, relative to the sweep file) is replaced
// by that job spec, so one spec serves a job and a sweep.
StatusOr<std::string> SweepText(const std::string& file) {
  std::ifstream in(file);
  if (!in) return Status::InvalidArgument("cannot read sweep file " + file);
  std::stringstream text;
  text << in.rdbuf();
  YAML::Node root;
  try {
    root = YAML::Load(text.str());
  } catch (const YAML::Exception&) {
    return text.str();  // the coordinator names the line
  }
  if (!root.IsMap() || !root["base"] || !root["base"].IsScalar()) return text.str();
  std::filesystem::path base = root["base"].as<std::string>();
  if (base.is_relative()) base = std::filesystem::path(file).parent_path() / base;
  try {
    root["base"] = YAML::LoadFile(base.string());
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("base: cannot read the job spec " + base.string() + ": " + e.what());
  }
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str());
}

int Submit(const Session& s, const std::string& file) {
  StatusOr<std::string> text = SweepText(file);
  if (!text.ok()) return LocalError(text.status());
  v1::SubmitSweepRequest req;
  req.set_sweep_yaml(*text);
  // One id for every attempt: a retry after a lost reply gets the sweep the first made.
  req.set_request_id(NewRequestId());
  auto stub = v1::JobService::NewStub(s.channel);
  v1::Sweep out;
  grpc::Status status = CallWithRetry(RetryPolicy(), [&](std::chrono::system_clock::time_point deadline) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::min(deadline, s.Deadline()));
    return stub->SubmitSweep(&ctx, req, &out);
  });
  if (!status.ok()) return CallFailed(status, file);
  std::printf("%s\n", s.json ? ToJson(out).c_str() : out.id().c_str());
  return kExitOk;
}

// Every page of ListSweeps.
int List(const Session& s, const std::string&) {
  auto stub = v1::JobService::NewStub(s.channel);
  v1::ListSweepsRequest req;
  v1::ListSweepsResponse out;
  do {
    v1::ListSweepsResponse page;
    grpc::ClientContext ctx;
    ctx.set_deadline(s.Deadline());
    grpc::Status status = stub->ListSweeps(&ctx, req, &page);
    if (!status.ok()) return CallFailed(status);
    for (auto& w : *page.mutable_sweeps()) *out.add_sweeps() = std::move(w);
    req.set_page_token(page.next_page_token());
  } while (!req.page_token().empty());
  if (s.json) {
    std::printf("%s\n", ToJson(out).c_str());
    return kExitOk;
  }
  std::printf("%-10s %-10s %-20s %-6s %-7s %s\n", "ID", "STATE", "NAME", "METHOD", "TRIALS", "BEST");
  for (const v1::Sweep& w : out.sweeps())
    std::printf("%-10s %-10s %-20s %-6s %3d/%-3d %s\n", w.id().c_str(), v1::JobState_Name(w.state()).c_str(),
                w.spec().name().c_str(), w.spec().method().c_str(), w.trials_size(), w.spec().max_trials(),
                w.best_job_id().c_str());
  return kExitOk;
}

void Describe(const v1::Sweep& w) {
  const v1::SweepSpec& spec = w.spec();
  std::printf("Sweep:      %s (%s)\n", w.id().c_str(), spec.name().c_str());
  std::printf("State:      %s\n", v1::JobState_Name(w.state()).c_str());
  if (!w.reason().empty()) std::printf("Reason:     %s\n", w.reason().c_str());
  std::printf("Method:     %s, %s %s, %d trials, %d at a time\n", spec.method().c_str(),
              spec.maximize() ? "maximize" : "minimize", spec.metric().c_str(), spec.max_trials(), spec.parallelism());
  if (spec.method() == "asha")
    std::printf("Rungs:      every %lld x %d^k %s (from k = %d)\n",
                static_cast<long long>(spec.asha().min_epochs() > 0 ? spec.asha().min_epochs() : spec.asha().min_steps()),
                spec.asha().reduction_factor(), spec.asha().min_epochs() > 0 ? "epochs" : "steps",
                spec.asha().min_early_stopping_rate());
  if (!w.best_job_id().empty()) std::printf("Best:       %s\n", w.best_job_id().c_str());
  std::printf("\n%-5s %-10s %-10s %-4s %-12s %-7s %s\n", "TRIAL", "JOB", "STATE", "RUNG", spec.metric().c_str(), "STEP",
              "PARAMS");
  for (const v1::Trial& t : w.trials()) {
    std::string params;
    for (const auto& [field, value] : t.params()) params += (params.empty() ? "" : " ") + field + "=" + value;
    char value[32] = "-";
    if (t.has_value()) std::snprintf(value, sizeof value, "%.6g", t.value());
    std::printf("%-5d %-10s %-10s %-4s %-12s %-7lld %s\n", t.index(), t.job_id().c_str(),
                TrialStateName(t.state()).c_str(), t.rung() < 0 ? "-" : std::to_string(t.rung()).c_str(), value,
                static_cast<long long>(t.step()), params.c_str());
  }
  std::printf("\nEvents:\n");
  for (const v1::SweepEvent& e : w.events()) std::printf("  %s  %s\n", UtcTime(e.time().seconds()).c_str(), e.text().c_str());
}

int Get(const Session& s, const std::string& id) {
  v1::GetSweepRequest req;
  req.set_id(id);
  v1::Sweep out;
  grpc::ClientContext ctx;
  ctx.set_deadline(s.Deadline());
  grpc::Status status = v1::JobService::NewStub(s.channel)->GetSweep(&ctx, req, &out);
  if (!status.ok()) return CallFailed(status);
  if (s.json) std::printf("%s\n", ToJson(out).c_str());
  else Describe(out);
  return kExitOk;
}

int Cancel(const Session& s, const std::string& id) {
  v1::CancelSweepRequest req;
  req.set_id(id);
  v1::Sweep out;
  grpc::ClientContext ctx;
  ctx.set_deadline(s.Deadline());
  grpc::Status status = v1::JobService::NewStub(s.channel)->CancelSweep(&ctx, req, &out);
  if (!status.ok()) return CallFailed(status);
  if (s.json) std::printf("%s\n", ToJson(out).c_str());
  else std::printf("%s %s\n", out.id().c_str(), v1::JobState_Name(out.state()).c_str());
  return kExitOk;
}

}  // namespace

Handler SweepSubmit(CLI::App* cmd) {
  auto file = std::make_shared<std::string>();
  cmd->add_option("FILE", *file, "sweep file (docs/sweeps.md)")->required();
  return [file](const Session& s) { return Submit(s, *file); };
}

Handler SweepList(CLI::App*) {
  return [](const Session& s) { return List(s, ""); };
}

Handler SweepDescribe(CLI::App* cmd) { return WithId(cmd, Get); }
Handler SweepCancel(CLI::App* cmd) { return WithId(cmd, Cancel); }

}  // namespace nightshift::cli
