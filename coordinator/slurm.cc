#include "coordinator/slurm.h"

#include <nlohmann/json.hpp>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "common/log.h"
#include "coordinator/allocation_tokens.h"

namespace nightshift {
namespace {

using nlohmann::json;

constexpr char kNamePrefix[] = "nightshift-";

// The name of the process's effective uid ("" when it has no passwd entry).
std::string EffectiveUserName() {
  std::vector<char> buffer(16384);
  struct passwd pw, *found = nullptr;
  if (getpwuid_r(geteuid(), &pw, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) return "";
  return pw.pw_name;
}

// A number as Slurm 22.05 writes it (plain) or as 23.02+ does ({"set", "infinite",
// "number"}); `fallback` when unset or absent.
int64_t SlurmNumber(const json& v, int64_t fallback) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number()) return static_cast<int64_t>(v.get<double>());
  if (v.is_object() && v.value("set", true) && !v.value("infinite", false) && v.contains("number"))
    return SlurmNumber(v["number"], fallback);
  return fallback;
}

// A state as 22.05 writes it ("RUNNING") or as 23.02+ does (["RUNNING", "COMPLETING"]).
std::string SlurmString(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array() && !v.empty() && v.front().is_string()) return v.front().get<std::string>();
  return "";
}

SlurmState StateOf(const std::string& s) {
  static const std::map<std::string, SlurmState> kStates = {
      {"PENDING", SlurmState::kPending},     {"CONFIGURING", SlurmState::kPending},
      {"REQUEUED", SlurmState::kPending},    {"REQUEUE_HOLD", SlurmState::kPending},
      {"REQUEUE_FED", SlurmState::kPending}, {"RESV_DEL_HOLD", SlurmState::kPending},
      {"RUNNING", SlurmState::kRunning},     {"COMPLETING", SlurmState::kRunning},
      {"SUSPENDED", SlurmState::kRunning},   {"STOPPED", SlurmState::kRunning},
      {"SIGNALING", SlurmState::kRunning},   {"STAGE_OUT", SlurmState::kRunning},
      {"RESIZING", SlurmState::kRunning},    {"COMPLETED", SlurmState::kCompleted},
      {"FAILED", SlurmState::kFailed},       {"OUT_OF_MEMORY", SlurmState::kFailed},
      {"BOOT_FAIL", SlurmState::kFailed},    {"DEADLINE", SlurmState::kFailed},
      {"SPECIAL_EXIT", SlurmState::kFailed}, {"CANCELLED", SlurmState::kCancelled},
      {"REVOKED", SlurmState::kCancelled},   {"PREEMPTED", SlurmState::kPreempted},
      {"TIMEOUT", SlurmState::kTimeout},     {"NODE_FAIL", SlurmState::kNodeFail},
  };
  auto it = kStates.find(s);
  return it == kStates.end() ? SlurmState::kUnknown : it->second;
}

// The batch script's exit: 23.02+ writes {"status", "return_code", "signal"}; 22.05 the
// wait status as one number (exit code << 8, or the signal in the low bits).
int ExitCodeOf(const json& v) {
  if (v.is_object()) {
    const int64_t signal = v.contains("signal") ? SlurmNumber(v["signal"].value("id", json()), 0) : 0;
    if (signal > 0) return static_cast<int>(128 + signal);
    return static_cast<int>(SlurmNumber(v.value("return_code", json()), 0));
  }
  const int64_t status = SlurmNumber(v, 0);
  if (status & 0x7f) return static_cast<int>(128 + (status & 0x7f));
  return static_cast<int>((status >> 8) & 0xff);
}

// What squeue's and sacct's records of a job write alike: its id, name, nodes, partition.
Status ReadJobIdentity(const json& j, const std::string& command, SlurmJob* job) {
  if (!j.is_object()) return Status::InvalidArgument(command + ": a job that is not an object");
  const int64_t id = j.contains("job_id") ? SlurmNumber(j["job_id"], -1) : -1;
  if (id < 0) return Status::InvalidArgument(command + ": a job without job_id");
  job->slurm_id = std::to_string(id);
  job->name = j.value("name", "");
  job->nodes = j.contains("nodes") ? SlurmString(j["nodes"]) : "";
  job->partition = j.contains("partition") ? SlurmString(j["partition"]) : "";
  const char* user = j.contains("user_name") ? "user_name" : "user";  // squeue's; sacct's
  job->user = j.contains(user) && j[user].is_string() ? j[user].get<std::string>() : "";
  return Status::OK();
}

std::string Quoted(const std::string& s) {  // for a POSIX shell
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

const char* SlurmStateName(SlurmState s) {
  switch (s) {
    case SlurmState::kPending: return "pending";
    case SlurmState::kRunning: return "running";
    case SlurmState::kCompleted: return "completed";
    case SlurmState::kFailed: return "failed";
    case SlurmState::kCancelled: return "cancelled";
    case SlurmState::kPreempted: return "preempted";
    case SlurmState::kTimeout: return "timeout";
    case SlurmState::kNodeFail: return "node_fail";
    case SlurmState::kUnknown: break;
  }
  return "unknown";
}

std::string SlurmJobName(const std::string& job_id, int attempt) {
  return kNamePrefix + job_id + "-a" + std::to_string(attempt);
}

bool ParseSlurmJobName(const std::string& name, std::string* job_id, int* attempt) {
  const size_t prefix = sizeof(kNamePrefix) - 1, a = name.rfind("-a");
  if (name.compare(0, prefix, kNamePrefix) != 0 || a == std::string::npos || a <= prefix || a + 2 >= name.size())
    return false;
  const std::string digits = name.substr(a + 2);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) || digits.size() > 9)
    return false;
  *job_id = name.substr(prefix, a - prefix);
  *attempt = std::stoi(digits);
  return true;
}

std::vector<std::string> SbatchArgs(const AllocationRequest& r, const SlurmOptions& o) {
  std::vector<std::string> args = {
      "--parsable",
      "--job-name=" + SlurmJobName(r.job_id, r.attempt),
      "--nodes=" + std::to_string(r.nodes),
      "--ntasks-per-node=1",  // one worker per node; it starts the node's ranks
      // An attempt ends with its allocation: the coordinator makes the next one (and
      // decides whether there is one), never Slurm.
      "--no-requeue",
      // SIGTERM to every step's tasks before the time limit: the worker stops its ranks,
      // which checkpoint.
      "--signal=TERM@" + std::to_string(o.signal_before_end_seconds),
  };
  if (r.gpus_per_node > 0) args.push_back("--gres=gpu:" + std::to_string(r.gpus_per_node));
  if (r.cpus_per_node > 0) args.push_back("--cpus-per-task=" + std::to_string(r.cpus_per_node));
  if (r.memory_gb_per_node > 0)
    args.push_back("--mem=" + std::to_string(static_cast<int64_t>(std::ceil(r.memory_gb_per_node * 1024))) + "M");
  if (r.time_limit_minutes > 0) args.push_back("--time=" + std::to_string(r.time_limit_minutes));
  if (!r.exclude_nodes.empty()) args.push_back("--exclude=" + r.exclude_nodes);
  const SlurmPriorityRow* row = nullptr;
  for (const SlurmPriorityRow& candidate : o.priorities)
    if (candidate.min_priority <= r.priority && (row == nullptr || candidate.min_priority > row->min_priority))
      row = &candidate;
  if (row != nullptr) {
    if (!row->partition.empty()) args.push_back("--partition=" + row->partition);
    if (!row->qos.empty()) args.push_back("--qos=" + row->qos);
    if (!row->account.empty()) args.push_back("--account=" + row->account);
  }
  if (!o.log_dir.empty()) args.push_back("--output=" + o.log_dir + "/slurm-%j.out");
  return args;
}

std::string SbatchScript(const AllocationRequest& r) {
  std::string command;
  for (const std::string& word : r.node_command) command += " " + Quoted(word);
  // exec: srun gets the batch shell's signals; --kill-on-bad-exit: one node's worker
  // failing ends the others' at once (the attempt is over), as TorchX does.
  // The token in the script, which Slurm shows its owner and operators only (srun passes
  // the environment on), and never in an argument, which `ps` and `squeue` show anyone.
  const std::string token = r.token.empty() ? "" : "export " + std::string(kAllocationTokenEnv) + "=" + Quoted(r.token) + "\n";
  return "#!/bin/sh\n# Nightshift job " + r.job_id + ", attempt " + std::to_string(r.attempt) + "\n" + token +
         "exec srun --export=ALL --kill-on-bad-exit=1 --ntasks-per-node=1" + command + "\n";
}

StatusOr<std::vector<SlurmJob>> ParseSqueueJson(const std::string& text) {
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object())
    return Status::InvalidArgument("squeue --json: the output is not a JSON object");
  if (doc.contains("errors") && doc["errors"].is_array() && !doc["errors"].empty()) {
    const json& e = doc["errors"].front();
    return Status::Unavailable("squeue --json: " + (e.is_object() ? e.value("description", e.dump()) : e.dump()));
  }
  if (!doc.contains("jobs") || !doc["jobs"].is_array())
    return Status::InvalidArgument("squeue --json: no \"jobs\" list");
  std::vector<SlurmJob> jobs;
  for (const json& j : doc["jobs"]) {
    SlurmJob job;
    if (Status s = ReadJobIdentity(j, "squeue --json", &job); !s.ok()) return s;
    job.slurm_state = j.contains("job_state") ? SlurmString(j["job_state"]) : "";
    job.state = StateOf(job.slurm_state);
    job.reason = j.contains("state_reason") ? SlurmString(j["state_reason"]) : "";
    job.exit_code = j.contains("exit_code") ? ExitCodeOf(j["exit_code"]) : 0;
    // 23.02+ lists flags after the base state: a job COMPLETING still has processes
    // (ranks writing their checkpoint), so it has not ended yet.
    if (j.contains("job_state") && j["job_state"].is_array())
      for (const json& flag : j["job_state"])
        if (flag.is_string() && flag.get<std::string>() == "COMPLETING") job.state = SlurmState::kRunning;
    job.start_time = j.contains("start_time") ? SlurmNumber(j["start_time"], 0) : 0;
    job.end_time = j.contains("end_time") ? SlurmNumber(j["end_time"], 0) : 0;
    job.time_limit_minutes = j.contains("time_limit") ? SlurmNumber(j["time_limit"], 0) : 0;
    jobs.push_back(std::move(job));
  }
  return jobs;
}

StatusOr<std::vector<SlurmJob>> ParseSacctJson(const std::string& text) {
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("jobs") || !doc["jobs"].is_array())
    return Status::InvalidArgument("sacct --json: the output is not a JSON object with a \"jobs\" list");
  // 22.05 (openapi/dbv0.0.38) writes every exit code as {"status": "SUCCESS",
  // "return_code": 0}, a failed job's too (its text format has them: recorded in
  // tests/coordinator/testdata/slurm).
  const bool exit_codes = !(doc.contains("meta") && doc["meta"].is_object() &&
                            doc["meta"].value("plugin", json::object()).value("type", "") == "openapi/dbv0.0.38");
  std::vector<SlurmJob> jobs;
  for (const json& j : doc["jobs"]) {
    SlurmJob job;
    if (Status s = ReadJobIdentity(j, "sacct --json", &job); !s.ok()) return s;
    const json state = j.value("state", json::object());
    job.slurm_state = state.is_object() && state.contains("current") ? SlurmString(state["current"]) : "";
    job.state = StateOf(job.slurm_state);
    job.reason = state.is_object() && state.contains("reason") ? SlurmString(state["reason"]) : "";
    job.exit_code_known = exit_codes;
    if (exit_codes && j.contains("exit_code")) job.exit_code = ExitCodeOf(j["exit_code"]);
    const json time = j.value("time", json::object());
    job.start_time = time.is_object() && time.contains("start") ? SlurmNumber(time["start"], 0) : 0;
    job.end_time = time.is_object() && time.contains("end") ? SlurmNumber(time["end"], 0) : 0;
    job.time_limit_minutes = time.is_object() && time.contains("limit") ? SlurmNumber(time["limit"], 0) : 0;
    jobs.push_back(std::move(job));
  }
  return jobs;
}

SlurmCluster::SlurmCluster(SlurmOptions options, CommandRunner* runner)
    : options_(std::move(options)), runner_(runner), self_(EffectiveUserName()) {}

Status SlurmCluster::CheckUserName() {
  if (!EffectiveUserName().empty()) return Status::OK();
  return Status::FailedPrecondition("--cluster slurm: uid " + std::to_string(geteuid()) +
                                    " has no user name (no passwd entry): squeue names jobs' users by name, and the "
                                    "coordinator tells its allocations from other users' by it; give the uid one");
}

std::string SlurmCluster::RunsAs(const std::string& owner) const {
  return options_.submit_as_owner && !owner.empty() ? owner : self_;
}

StatusOr<CommandResult> SlurmCluster::Run(const std::string& program, const std::vector<std::string>& args,
                                          const std::string& input) {
  std::vector<std::string> argv = {program};
  argv.insert(argv.end(), args.begin(), args.end());
  return runner_->Run(argv, input, options_.env, options_.command_timeout_seconds);
}

StatusOr<std::string> SlurmCluster::Submit(const AllocationRequest& request) {
  if (request.node_command.empty()) return Status::InvalidArgument("slurm: no command for the nodes");
  // SIGTERM would come at once: every attempt would stop before it trained, uncounted.
  if (request.time_limit_minutes > 0 && request.time_limit_minutes * 60 <= options_.signal_before_end_seconds)
    return Status::InvalidArgument("resources.time_limit_minutes: " + std::to_string(request.time_limit_minutes) +
                                   " leaves no time before Slurm's SIGTERM, " +
                                   std::to_string(options_.signal_before_end_seconds) +
                                   " s before the end (--slurm-signal-seconds): give more minutes");
  std::string program = options_.sbatch;
  std::vector<std::string> args = SbatchArgs(request, options_);
  if (options_.submit_as_owner && !request.owner.empty()) {
    // A Unix user name, so that sudo reads it as one (never an option).
    const bool unix_name = request.owner.size() <= 32 && (std::islower(request.owner[0]) || request.owner[0] == '_') &&
                           std::all_of(request.owner.begin(), request.owner.end(), [](char c) {
                             return std::islower(c) || std::isdigit(c) || c == '_' || c == '-' || c == '.';
                           });
    if (!unix_name)
      return Status::InvalidArgument("owner '" + request.owner +
                                     "' is not a Unix user name: cannot submit as them (--slurm-submit-as-owner)");
    // Their allocation would run as root (any user of uid 0), or as us: it could read the
    // coordinator's secret.
    const struct passwd* account = ::getpwnam(request.owner.c_str());
    const bool as_root = request.owner == "root" || (account != nullptr && account->pw_uid == 0);
    if (as_root || request.owner == self_ || (account != nullptr && account->pw_uid == ::geteuid()))
      return Status::InvalidArgument("owner '" + request.owner + "' is " +
                                     (as_root ? "root" : "the coordinator's own user") +
                                     ": no job is submitted as them (--slurm-submit-as-owner); give the job's owner a "
                                     "token of their own user");
    std::vector<std::string> as_owner = {"-n", "-u", request.owner, "--preserve-env=SLURM_CONF", "--", program};
    args.insert(args.begin(), as_owner.begin(), as_owner.end());
    program = options_.sudo;
  }
  StatusOr<CommandResult> r = Run(program, args, SbatchScript(request));
  if (!r.ok()) return Status::Unavailable("sbatch: " + r.status().message());
  if (r->exit_code != 0) {
    // A request Slurm can never run (more nodes than the partition has, an unknown
    // partition, QOS or account) is the job's error; anything else (the controller
    // unreachable, a limit on queued jobs) passes.
    const std::string what = "sbatch refused " + SlurmJobName(request.job_id, request.attempt) + ": " + r->err;
    const bool never = r->err.find("Invalid") != std::string::npos ||
                       r->err.find("not available") != std::string::npos ||
                       r->err.find("invalid") != std::string::npos;
    return never ? Status::InvalidArgument(what) : Status::Unavailable(what);
  }
  // --parsable: "<id>" or "<id>;<cluster>".
  std::string id = r->out.substr(0, r->out.find_first_of(";\n"));
  if (id.empty() || !std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return Status::Internal("sbatch printed no job id: " + r->out);
  return id;
}

Status SlurmCluster::Cancel(const std::string& slurm_id) {
  StatusOr<CommandResult> r = Run(options_.scancel, {slurm_id});
  if (!r.ok()) return Status::Unavailable("scancel: " + r.status().message());
  // scancel of a job that already ended says "Invalid job id specified" and exits 1 on
  // some versions, 0 on others: the job is gone either way.
  if (r->exit_code != 0 && r->err.find("Invalid job id") == std::string::npos)
    return Status::Unavailable("scancel " + slurm_id + ": " + r->err);
  return Status::OK();
}

StatusOr<std::map<std::string, SlurmJob>> SlurmCluster::Poll() {
  // --all: jobs in hidden partitions and in partitions the coordinator's group may not
  // use too (an allocation submitted as its owner may sit in one), which would otherwise
  // look gone and be cancelled after the wait for their record. 22.05's --json lists a
  // Hidden partition's jobs to an unprivileged user without it (checked on real daemons);
  // --all keeps them listed where a version applies squeue's filters to --json.
  StatusOr<CommandResult> r = Run(options_.squeue, {"--json", "--all"});
  if (!r.ok()) return Status::Unavailable("squeue: " + r.status().message());
  if (r->exit_code != 0) return Status::Unavailable("squeue --json --all: " + r->err);
  StatusOr<std::vector<SlurmJob>> jobs = ParseSqueueJson(r->out);
  if (!jobs.ok()) return jobs.status();
  std::map<std::string, SlurmJob> ours;
  for (SlurmJob& job : *jobs) {
    std::string id;
    int attempt = 0;
    if (ParseSlurmJobName(job.name, &id, &attempt)) ours[job.slurm_id] = std::move(job);
  }
  return ours;
}

std::string SlurmCluster::DownNodes(const std::string& nodes) {
  if (nodes.empty()) return "";
  StatusOr<CommandResult> r =
      Run(options_.sinfo, {"--noheader", "--nodes=" + nodes, "--states=down,drain,fail,no_respond", "--format=%N"});
  if (!r.ok() || r->exit_code != 0) return "";
  std::string down;  // one hostlist per line (per partition, say), joined by commas: one hostlist
  std::istringstream lines(r->out);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line != "n/a") down += (down.empty() ? "" : ",") + line;
  return down;
}

// Whether the job ended because its time limit's warning (--signal's SIGTERM, `signal_seconds`
// before the limit) stopped its steps: they exit 143 on it (the worker does, after its ranks
// checkpoint), so Slurm says FAILED with exit code 143 at about the limit less the warning,
// not TIMEOUT. Slurm may send the warning up to 60 s early (sbatch(1)); a SIGTERM before
// that (a preemption's, an operator's) is not the limit's. One in the last minute before
// the warning is taken for it.
bool StoppedByTimeLimitWarning(const SlurmJob& job, int signal_seconds) {
  constexpr int kStoppedBySignal = 128 + 15;
  if (job.exit_code != kStoppedBySignal || job.time_limit_minutes <= 0 || job.start_time <= 0 ||
      job.end_time < job.start_time)
    return false;
  const int64_t warned_at = job.time_limit_minutes * 60 - signal_seconds;
  return job.end_time - job.start_time >= warned_at - 65;  // 60 s early at most, whole seconds
}

StatusOr<std::vector<Allocation>> SlurmCluster::List() {
  StatusOr<std::map<std::string, SlurmJob>> jobs = Poll();
  if (!jobs.ok()) return jobs.status();
  std::vector<Allocation> allocations;
  for (const auto& [id, job] : *jobs) allocations.push_back(AllocationOf(job));
  return allocations;
}

StatusOr<Allocation> SlurmCluster::Lookup(const std::string& slurm_id) {
  StatusOr<CommandResult> r = Run(options_.sacct, {"--json", "--jobs=" + slurm_id});
  // sacct not installed: no records to wait for. A timeout (slurmdbd busy) or a failed
  // fork may pass: waited for (record_wait_seconds), as a preemption's record may come.
  if (!r.ok())
    return r.status().code() == Status::kNotFound ? Status::NotFound("sacct: " + r.status().message())
                                                  : Status::Unavailable("sacct: " + r.status().message());
  // Without accounting (AccountingStorageType none) sacct exits 1: "Slurm accounting
  // storage is disabled": no record to wait for. Any other failure (slurmdbd down or
  // restarting: "Problem talking to the database") may pass.
  if (r->exit_code != 0) {
    if (r->err.find("accounting storage is disabled") != std::string::npos)
      return Status::NotFound("sacct --json: " + r->err);
    return Status::Unavailable("sacct --json: " + r->err);
  }
  StatusOr<std::vector<SlurmJob>> jobs = ParseSacctJson(r->out);
  if (!jobs.ok()) return Status::Unavailable(jobs.status().message());  // cut short, say: asked again
  const SlurmJob* last = nullptr;  // a requeued job has a record per run: the newest is last
  for (const SlurmJob& job : *jobs) {
    std::string id;
    int attempt = 0;
    if (job.slurm_id == slurm_id && ParseSlurmJobName(job.name, &id, &attempt)) last = &job;
  }
  if (last == nullptr) return Status::NotFound("sacct has no record of our job " + slurm_id);
  SlurmJob job = *last;
  if (!job.exit_code_known) {  // 22.05: from the text format, "code:signal"
    StatusOr<CommandResult> e = Run(options_.sacct, {"--noheader", "--allocations", "--parsable2",
                                                     "--format=ExitCode", "--jobs=" + slurm_id});
    int code = 0, signal = 0;
    if (!e.ok() || e->exit_code != 0 || std::sscanf(e->out.c_str(), "%d:%d", &code, &signal) != 2)
      return Status::Unavailable("sacct --format=ExitCode: no exit code for job " + slurm_id + " yet");
    job.exit_code = signal > 0 ? 128 + signal : code;
  }
  return AllocationOf(job);
}

Allocation SlurmCluster::AllocationOf(const SlurmJob& job) {
  Allocation a;
  a.id = job.slurm_id;
  ParseSlurmJobName(job.name, &a.job_id, &a.attempt);
  a.state = job.slurm_state;
  a.reason = job.reason;
  a.nodes = job.nodes;
  a.exit_code = job.exit_code;
  a.user = job.user;
  switch (job.state) {
    case SlurmState::kPending: a.phase = Allocation::Phase::kPending; break;
    // A state this code does not know counts as running: never taken for an end.
    case SlurmState::kRunning: case SlurmState::kUnknown: a.phase = Allocation::Phase::kRunning; break;
    case SlurmState::kPreempted: case SlurmState::kTimeout:
      a.phase = Allocation::Phase::kEnded;
      a.end = job.state == SlurmState::kTimeout ? Allocation::End::kTimeLimit : Allocation::End::kPreempted;
      break;
    case SlurmState::kNodeFail:
      a.phase = Allocation::Phase::kEnded;
      a.end = Allocation::End::kNodeFail;
      a.failed_nodes = DownNodes(job.nodes);  // squeue names every node of the job
      break;
    case SlurmState::kCompleted: case SlurmState::kFailed: case SlurmState::kCancelled:
      a.phase = Allocation::Phase::kEnded;
      if (StoppedByTimeLimitWarning(job, options_.signal_before_end_seconds)) a.end = Allocation::End::kTimeLimit;
      break;
  }
  return a;
}

}  // namespace nightshift
