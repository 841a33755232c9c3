#include "coordinator/tracking.h"

#include <google/protobuf/util/json_util.h>

#include <map>

#include <nlohmann/json.hpp>

#include "common/crypto/sha256.h"
#include "common/log.h"

namespace nightshift {

namespace {

using json = nlohmann::json;

int64_t UnixMs(const google::protobuf::Timestamp& t) { return t.seconds() * 1000 + t.nanos() / 1000000; }

void Flatten(const json& j, const std::string& name, std::vector<MlflowPair>* out) {
  if (j.is_object() && !j.empty()) {
    for (const auto& [key, value] : j.items()) Flatten(value, name.empty() ? key : name + "." + key, out);
    return;
  }
  std::string value = j.is_string() ? j.get<std::string>() : j.dump();
  if (value.empty()) return;  // an unset string says nothing
  if (value.size() > kMlflowParamValueBytes) value = value.substr(0, kMlflowParamValueBytes - 3) + "...";
  out->push_back({name, value});
}

std::string RunStatus(v1::JobState state) {
  switch (state) {
    case v1::SUCCEEDED: return "FINISHED";
    case v1::FAILED: return "FAILED";
    default: return "KILLED";  // CANCELLED
  }
}

bool Finished(v1::JobState s) { return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED; }

v1::TrackedAttempt* CursorOf(int attempt, v1::TrackedRun* run) {
  for (auto& a : *run->mutable_attempts())
    if (a.attempt() == attempt) return &a;
  v1::TrackedAttempt* a = run->add_attempts();
  a->set_attempt(attempt);
  return a;
}

}  // namespace

std::string ExperimentName(const std::string& pattern, const std::string& owner) {
  const std::string who = owner.empty() ? "anonymous" : owner;
  std::string name = pattern;
  for (size_t at = name.find("{owner}"); at != std::string::npos; at = name.find("{owner}", at + who.size()))
    name.replace(at, 7, who);
  return name;
}

std::vector<MlflowPair> SpecParams(const v1::JobSpec& spec) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(spec, &text, options);
  std::vector<MlflowPair> params;
  Flatten(json::parse(text), "", &params);
  return params;
}

std::vector<MlflowMetric> NewPoints(const v1::JobMetrics& metrics, int64_t fallback_time_ms, v1::TrackedRun* run) {
  std::vector<MlflowMetric> points;
  for (const v1::AttemptMetrics& a : metrics.attempts()) {
    v1::TrackedAttempt* cursor = CursorOf(a.attempt(), run);
    for (const v1::TrainPoint& t : a.train()) {
      if (t.step() <= cursor->train_step()) continue;
      const int64_t time = t.time_ms() > 0 ? t.time_ms() : fallback_time_ms;
      points.push_back({"loss", t.loss(), time, t.step()});
      points.push_back({"learning_rate", t.lr(), time, t.step()});
      points.push_back({"tokens_per_second", t.tokens_per_second(), time, t.step()});
      points.push_back({"epoch", static_cast<double>(t.epoch()), time, t.step()});
      cursor->set_train_step(t.step());
    }
    for (int i = cursor->evals(); i < a.evals_size(); ++i) {
      const v1::EvalPoint& e = a.evals(i);
      const int64_t time = e.time_ms() > 0 ? e.time_ms() : fallback_time_ms;
      std::map<std::string, double> sorted(e.metrics().begin(), e.metrics().end());  // a stable order
      for (const auto& [name, value] : sorted) points.push_back({name, value, time, e.step()});
    }
    cursor->set_evals(a.evals_size());
  }
  return points;
}

Status TrackingReporter::Pass() {
  bool denied_logged = false;  // once a pass
  JobQuery query;
  query.limit = 100;
  for (;;) {
    StatusOr<JobPage> page = coordinator_->List(query);
    if (!page.ok()) return page.status();
    for (const v1::Job& job : page->jobs) {
      if (job.tracked_run().ended() || !job.tracked_run().error().empty()) continue;
      v1::TrackedRun run = job.tracked_run();
      Status s = Report(job, &run);
      // Refused here only (an experiment our MLflow user may not read or manage): the other
      // jobs go on; this one is tried again next pass.
      if (s.code() == Status::kPermissionDenied) {
        if (!denied_logged) NS_WARN("coordinator: MLflow denies reporting job " << job.id() << ": " << s.message());
        denied_logged = true;
        continue;
      }
      if (s.code() == Status::kInvalidArgument) {
        NS_WARN("coordinator: MLflow refuses the run of job " << job.id() << ", not reported further: " << s.message());
        run.set_error(s.message());
        s = coordinator_->NoteTracked(job.id(), run);
      }
      if (s.code() == Status::kNotFound) continue;  // deleted meanwhile
      if (!s.ok()) return s;
    }
    if (page->next_after_seq == 0) return Status::OK();
    query.after_seq = page->next_after_seq;
  }
}

std::string TrackingReporter::Seal(const std::string& name, const std::string& owner) const {
  return seal_key_.empty() ? "" : crypto::HmacSha256Hex(seal_key_, name + "\n" + owner);
}

Status CheckOwnerPermission(const std::string& pattern, const std::string& permission) {
  if (permission.empty() || pattern.find("{owner}") != std::string::npos) return Status::OK();
  return Status::InvalidArgument("--mlflow-owner-permission " + permission + ": --mlflow-experiment '" + pattern +
                                 "' names no {owner}, so every job's run goes to one experiment and every owner "
                                 "would be granted it");
}

StatusOr<std::string> TrackingReporter::ExperimentOf(const v1::Job& job) {
  const std::string name = ExperimentName(experiment_, job.owner());
  const bool own = experiment_.find("{owner}") != std::string::npos;  // one per owner
  const std::string owner = own ? job.owner() : "";
  const auto known = experiment_ids_.find({name, owner});
  if (known != experiment_ids_.end()) return known->second;
  const std::string seal = Seal(name, owner);
  std::vector<MlflowPair> tags = {{"nightshift.owner", owner}};
  if (!seal.empty()) tags.push_back({kSealTag, seal});
  StatusOr<MlflowExperiment> e = mlflow_->Experiment(name, tags);
  if (!e.ok()) return e.status();
  // Used only if this coordinator made it (for that owner): any MLflow user may make (or
  // rename one of theirs to) `name` first, and would read what goes there.
  std::string found;
  for (const MlflowPair& t : e->tags)
    if (t.key == kSealTag) found = t.value;
  const bool grants = !owner_permission_.empty() && own && !job.owner().empty();
  if (seal.empty() ? grants : !crypto::ConstantTimeEqual(found, seal))  // no key: shared with no one
    return Status::InvalidArgument("MLflow experiment " + name + " was not made by this coordinator" +
                                   (own ? " for " + job.owner() : std::string()) + " (no valid " + kSealTag +
                                   " tag): " + (own ? job.owner() + "'s runs are" : std::string("runs are")) +
                                   " not reported there");
  if (grants) {
    const Status s = mlflow_->Grant(e->id, job.owner(), owner_permission_);
    if (s.code() == Status::kNotFound) {
      // Not yet an MLflow user: the runs go there all the same (readable by admins); the
      // grant is tried again for the owner's next run.
      NS_WARN("coordinator: MLflow experiment " << name << " is not shared with " << job.owner() << ": " << s.message());
      return e->id;
    }
    if (!s.ok()) return s;
  }
  experiment_ids_.emplace(std::make_pair(name, owner), e->id);
  return e->id;
}

Status TrackingReporter::Report(const v1::Job& job, v1::TrackedRun* run) {
  Status s = ReportTo(job, run);
  if (s.code() != Status::kNotFound || s.message().rfind("MLflow", 0) != 0) return s;
  // The run or its experiment is gone from the server (deleted there): made again, in full,
  // at the next pass.
  NS_WARN("coordinator: " << s.message() << "; the run of job " << job.id() << " is made again");
  experiment_ids_.clear();
  *run = v1::TrackedRun();
  NS_RETURN_IF_ERROR(coordinator_->NoteTracked(job.id(), *run));
  return Status::Unavailable(s.message());
}

Status TrackingReporter::ReportTo(const v1::Job& job, v1::TrackedRun* run) {
  const std::string& id = job.id();
  if (run->run_id().empty()) {
    StatusOr<std::string> experiment = ExperimentOf(job);
    if (!experiment.ok()) return experiment.status();
    // Found by its tag first: a run made before a crash that lost the note is reused.
    StatusOr<std::string> found = mlflow_->FindRun(*experiment, "nightshift.job_id", id);
    if (!found.ok()) return found.status();
    std::string run_id = *found;
    if (run_id.empty()) {
      std::vector<MlflowPair> tags = {{"nightshift.job_id", id}};
      if (!job.sweep_id().empty()) tags.push_back({"nightshift.sweep", job.sweep_id()});
      if (!job.owner().empty()) {
        tags.push_back({"nightshift.owner", job.owner()});
        tags.push_back({"mlflow.user", job.owner()});
      }
      StatusOr<std::string> made =
          mlflow_->CreateRun(*experiment, job.spec().name().empty() ? id : job.spec().name(), UnixMs(job.created()), tags);
      if (!made.ok()) return made.status();
      run_id = *made;
    }
    run->set_run_id(run_id);
    run->set_experiment_id(*experiment);
    NS_RETURN_IF_ERROR(coordinator_->NoteTracked(id, *run));
  }
  if (!run->params_sent()) {
    NS_RETURN_IF_ERROR(mlflow_->LogBatch(run->run_id(), {}, SpecParams(job.spec()), {}));
    run->set_params_sent(true);
    NS_RETURN_IF_ERROR(coordinator_->NoteTracked(id, *run));
  }
  StatusOr<v1::JobMetrics> metrics = coordinator_->Metrics(id);
  if (!metrics.ok()) return metrics.status();
  v1::TrackedRun next = *run;
  std::vector<MlflowMetric> points = NewPoints(*metrics, UnixMs(job.created()), &next);
  std::vector<MlflowPair> tags;
  const std::string state = v1::JobState_Name(job.state());
  if (state != run->state_sent()) {
    tags = {{"nightshift.state", state}, {"nightshift.attempt", std::to_string(job.attempt())}};
    next.set_state_sent(state);
  }
  const bool finished = Finished(job.state());
  if (finished && !job.model().path().empty()) {
    tags.push_back({"nightshift.model", job.model().worker() + ":" + job.model().path()});
    tags.push_back({"nightshift.model_step", std::to_string(job.model().step())});
  }
  if (finished && !job.error().empty()) tags.push_back({"nightshift.error", job.error().substr(0, 5000)});
  if (!points.empty() || !tags.empty()) {
    NS_RETURN_IF_ERROR(mlflow_->LogBatch(run->run_id(), points, {}, tags));
    *run = next;
    NS_RETURN_IF_ERROR(coordinator_->NoteTracked(id, *run));
  }
  if (finished) {
    // Its end: the last event's time (job.updated moves with every note of ours).
    const int64_t end = job.events().empty() ? UnixMs(job.updated()) : UnixMs(job.events().rbegin()->time());
    NS_RETURN_IF_ERROR(mlflow_->EndRun(run->run_id(), RunStatus(job.state()), end));
    run->set_ended(true);
    NS_RETURN_IF_ERROR(coordinator_->NoteTracked(id, *run));
  }
  return Status::OK();
}

}  // namespace nightshift
