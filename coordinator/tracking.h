// Reports every job to an MLflow tracking server (--mlflow-uri, issue 45): one MLflow run
// per job, in its owner's experiment (--mlflow-experiment, "nightshift/{owner}" unless
// the operator names one for all), found again by its tag
// nightshift.job_id, with the spec's fields as params (dotted names: train.lr), every
// training point (loss, learning_rate, tokens_per_second, epoch) and every evaluation
// (val_loss, val_accuracy, ...) the coordinator keeps (v1::JobMetrics) at its step, tags
// for owner, sweep (a trial's), attempt and state, and at the end the run's status (SUCCEEDED: FINISHED,
// FAILED: FAILED, CANCELLED: KILLED), its end time and where the model is
// (nightshift.model: worker and folder; `nightshift job artifacts` fetches it).
//
// Why the coordinator and not the workers: it holds every job's history already (workers
// come and go, a job moves between them), and the tracking server's token stays on one
// host instead of on every node that runs users' code.
//
// Never in a job's way: a pass runs on its own thread, outside the coordinator's lock
// except for the short calls it makes; while the server is down (or refuses our token)
// the pass stops and everything waits for the next one; progress is kept in
// job.tracked_run, so a coordinator restart goes on where it stopped. A point sent twice
// (a crash between the server's answer and the note) adds nothing on MLflow's SQL store:
// every point carries the time the coordinator took it, so it is the same row.
//
// Who sees a run: whoever the server lets read its experiment. With MLflow's basic-auth
// app (default_permission NO_PERMISSIONS) the coordinator's MLflow user makes each owner's
// experiment (and so may manage it) and, with --mlflow-owner-permission, grants the MLflow
// user of the owner's name that permission on it, once per experiment and process: each
// user reads their own runs and no one else's. Each experiment it makes carries a seal
// (kSealTag); an experiment found without a valid one was made (or renamed) by someone
// else, who could read what goes there: the runs meant for it are given up, not put there
// (with grants or without).
#ifndef NIGHTSHIFT_COORDINATOR_TRACKING_H_
#define NIGHTSHIFT_COORDINATOR_TRACKING_H_

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordinator/coordinator.h"
#include "coordinator/mlflow.h"
#include "nightshift/v1/jobs.pb.h"

namespace nightshift {

// The spec as MLflow params: every set field, nested names joined with dots, lists and
// maps as JSON; values longer than kMlflowParamValueBytes cut, ending in "...".
std::vector<MlflowPair> SpecParams(const v1::JobSpec& spec);

// What of `metrics` is past `run`'s cursors, as MLflow points, in attempt and step order;
// advances the cursors. `fallback_time_ms` stamps points taken before they carried a time.
std::vector<MlflowMetric> NewPoints(const v1::JobMetrics& metrics, int64_t fallback_time_ms, v1::TrackedRun* run);

// The experiment a job of `owner` goes to: `pattern` with every "{owner}" replaced by the
// owner, or by "anonymous" for a job without one (insecure mode).
std::string ExperimentName(const std::string& pattern, const std::string& owner);
// Whether --mlflow-owner-permission may go with the pattern: INVALID_ARGUMENT naming both
// flags when `permission` is set and `pattern` names no {owner} (every owner would be
// granted the one experiment every job goes to).
Status CheckOwnerPermission(const std::string& pattern, const std::string& permission);

class TrackingReporter {
 public:
  // Not owned; both must outlive the reporter. `owner_permission`: what an owner's MLflow
  // user is granted on their experiment (READ, EDIT, MANAGE); "": nothing is granted.
  // `seal_key`: the key of the experiments' kSealTag ("": none made, none shared).
  TrackingReporter(Coordinator* coordinator, MlflowClient* mlflow, std::string experiment = "nightshift/{owner}",
                   std::string owner_permission = "", std::string seal_key = "")
      : coordinator_(coordinator),
        mlflow_(mlflow),
        experiment_(std::move(experiment)),
        owner_permission_(std::move(owner_permission)),
        seal_key_(std::move(seal_key)) {}

  // The tag that marks an experiment this coordinator made for an owner:
  // HMAC-SHA256(seal key, name "\n" owner) as hex, the owner "" where the pattern names none
  // (one experiment for every job). Nobody without the key can make one that verifies, and
  // a renamed experiment's no longer does.
  static constexpr char kSealTag[] = "nightshift.seal";

  // Brings every job's run up to date, in submit order. UNAVAILABLE or UNAUTHENTICATED
  // from the server ends the pass; PERMISSION_DENIED skips that job until the next pass with that error (nothing is lost: the next pass goes on
  // from job.tracked_run). A run whose values MLflow refuses (INVALID_ARGUMENT: its
  // INVALID_PARAMETER_VALUE) is given up: the reason goes to tracked_run.error, and the
  // other jobs go on.
  Status Pass();

 private:
  // Everything `job` lacks on the server; `run` is noted after every step that succeeded.
  // A run (or experiment) deleted on the server is forgotten and made again next pass.
  Status Report(const v1::Job& job, v1::TrackedRun* run);
  Status ReportTo(const v1::Job& job, v1::TrackedRun* run);
  // The id of `job`'s experiment, made (and shared with its owner) when new;
  // INVALID_ARGUMENT for one this coordinator did not make for that owner (no valid seal).
  StatusOr<std::string> ExperimentOf(const v1::Job& job);
  std::string Seal(const std::string& name, const std::string& owner) const;

  Coordinator* const coordinator_;
  MlflowClient* const mlflow_;
  const std::string experiment_, owner_permission_, seal_key_;
  // (name, owner sealed for) -> id, once known (and shared): owner "" and owner "anonymous"
  // share a name, and each is checked against its own seal.
  std::map<std::pair<std::string, std::string>, std::string> experiment_ids_;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_TRACKING_H_
