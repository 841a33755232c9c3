// Slurm as the cluster under the coordinator (issue 44, --cluster slurm): each attempt of
// a job becomes one Slurm batch job, an allocation of its nodes, submitted with sbatch
// and followed with squeue, as TorchX's and Determined's Slurm launchers do. Slurm's own
// queue, fair share, limits, preemption and backfill decide when it runs; the
// coordinator keeps the job's record and attempts.
//
// What is here: the commands (sbatch's arguments and batch script, scancel) and the
// reading of `squeue --json` and, for an allocation that left squeue, of `sacct --json`
// where Slurm keeps accounting (Slurm 22.05's shapes and 23.02+'s: states as lists,
// numbers as {"set", "infinite", "number"}), behind CommandRunner so they are tested with
// a fake and against real daemons (tests/support/slurm_cluster.py). The coordinator's
// side is coordinator/provisioner.h, the worker's --allocation-job.
#ifndef NIGHTSHIFT_COORDINATOR_SLURM_H_
#define NIGHTSHIFT_COORDINATOR_SLURM_H_

#include <map>
#include <string>
#include <vector>

#include "common/command.h"
#include "common/status.h"
#include "coordinator/cluster_allocator.h"

namespace nightshift {

// The operator's table from a job's priority to where Slurm runs it: the row with the
// largest min_priority at or below the job's priority applies (none: Slurm's defaults).
struct SlurmPriorityRow {
  int min_priority = 0;
  std::string partition, qos, account;  // empty: not passed
};

struct SlurmOptions {
  std::string sbatch = "sbatch", squeue = "squeue", scancel = "scancel", sinfo = "sinfo", sacct = "sacct";
  std::map<std::string, std::string> env;  // for every command, e.g. SLURM_CONF
  std::vector<SlurmPriorityRow> priorities;
  std::string log_dir;               // sbatch --output (slurm-%j.out per allocation); "" : Slurm's default
  int signal_before_end_seconds = 120;  // SIGTERM to the steps this long before the time limit
  double command_timeout_seconds = 30;
  // Submit each allocation as the job's owner (`sudo -n -u OWNER`), so Slurm accounts it
  // to them and their job runs as them, as Determined and SkyPilot do; the coordinator's
  // user needs a sudoers rule for sbatch. A job without an owner (insecure mode) is
  // submitted as the coordinator's user. Cancelling stays the coordinator's (root or
  // SlurmUser may scancel anyone's job).
  bool submit_as_owner = false;
  std::string sudo = "sudo";
};

// The allocation's Slurm job name: "nightshift-<job>-a<attempt>".
std::string SlurmJobName(const std::string& job_id, int attempt);
// Inverse; false for a name that is not one of ours.
bool ParseSlurmJobName(const std::string& name, std::string* job_id, int* attempt);

// sbatch's arguments (after the program) and the batch script it reads on stdin.
std::vector<std::string> SbatchArgs(const AllocationRequest& request, const SlurmOptions& options);
std::string SbatchScript(const AllocationRequest& request);

enum class SlurmState {
  kPending,    // queued (reason says why), configuring, or requeued
  kRunning,    // running, completing, suspended
  kCompleted,  // every step exited 0
  kFailed,     // a non-zero exit, out of memory, boot failure, deadline
  kCancelled,
  kPreempted,
  kTimeout,
  kNodeFail,
  kUnknown,  // a state this code does not know (named in `slurm_state`)
};
const char* SlurmStateName(SlurmState s);

struct SlurmJob {
  std::string slurm_id;
  std::string name;
  SlurmState state = SlurmState::kUnknown;
  std::string slurm_state;  // as Slurm names it (the first when it lists several)
  std::string reason;       // state_reason ("Resources", "Priority", "None", ...)
  std::string nodes;        // Slurm's host list ("n[1-2]"), empty while pending
  std::string partition;
  std::string user;         // who submitted it (user_name; sacct's user)
  int exit_code = 0;        // the batch script's; 128 + N when killed by signal N
  bool exit_code_known = true;  // false: sacct --json of 22.05, whose exit codes are all 0
  int64_t start_time = 0, end_time = 0;  // Unix seconds; 0: not yet (or not given)
  int64_t time_limit_minutes = 0;        // 0: none given
};

// The jobs of a `squeue --json` output. INVALID_ARGUMENT naming what does not parse.
StatusOr<std::vector<SlurmJob>> ParseSqueueJson(const std::string& text);
// The jobs of a `sacct --json` output (slurmdbd's records: Slurm 22.05's shape and
// 23.02+'s; state, reason, exit code, nodes, times). 22.05 writes every exit code as 0:
// its records say exit_code_known false. INVALID_ARGUMENT likewise.
StatusOr<std::vector<SlurmJob>> ParseSacctJson(const std::string& text);

class SlurmCluster : public ClusterAllocator {
 public:
  SlurmCluster(SlurmOptions options, CommandRunner* runner);  // runner not owned

  const char* name() const override { return "slurm"; }
  // sbatch --parsable: Slurm's job id. With sbatch's message: INVALID_ARGUMENT for a
  // request Slurm can never run (more nodes than there are, an unknown partition, QOS or
  // account), UNAVAILABLE for the rest (the controller down, a limit): retry later.
  StatusOr<std::string> Submit(const AllocationRequest& request) override;
  // scancel; a job Slurm no longer knows is not an error.
  Status Cancel(const std::string& slurm_id) override;
  // Our allocations Slurm still lists (squeue --json, jobs named nightshift-*), by id.
  // A job that ended leaves the list MinJobAge seconds after its end.
  StatusOr<std::map<std::string, SlurmJob>> Poll();
  // Poll's jobs as allocations: PREEMPTED and TIMEOUT end as kPreempted, NODE_FAIL as
  // kNodeFail (its failed_nodes: those of its nodes sinfo lists down, drained or failing),
  // every other end as kDone.
  StatusOr<std::vector<Allocation>> List() override;
  // An allocation that left squeue, as Slurm's accounting recorded its end (sacct --json;
  // the newest record of a requeued job; on 22.05 the exit code from sacct's text
  // format), mapped as List maps squeue's. NOT_FOUND without accounting (sacct exits 1:
  // "accounting storage is disabled"), without a whole record of it (until slurmctld has
  // sent its start, sacct names the job "allocation"), and when sacct is not installed;
  // UNAVAILABLE (asked again) when it fails otherwise, times out or is cut short.
  StatusOr<Allocation> Lookup(const std::string& slurm_id) override;
  // The owner under submit_as_owner, else the coordinator's own user: squeue lists every
  // user's jobs, and any user may name one nightshift-<job>-a<attempt>.
  std::string RunsAs(const std::string& owner) const override;
  // FAILED_PRECONDITION where the process's effective uid has no user name (no passwd
  // entry, as in a container given an arbitrary uid): squeue names jobs' users by name,
  // and ours are told from other users' (named like ours) by it. Checked at start-up.
  static Status CheckUserName();

 private:
  Allocation AllocationOf(const SlurmJob& job);
  StatusOr<CommandResult> Run(const std::string& program, const std::vector<std::string>& args,
                              const std::string& input = "");
  // Of `nodes` (a host list), those Slurm has down, drained or failing, as a host list;
  // "" when none or when sinfo cannot say.
  std::string DownNodes(const std::string& nodes);
  const SlurmOptions options_;
  CommandRunner* const runner_;
  const std::string self_;  // the coordinator's user name (its effective uid's)
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_SLURM_H_
