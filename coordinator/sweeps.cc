#include "coordinator/sweeps.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "common/job_state.h"
#include "common/log.h"
#include "coordinator/asha.h"
#include "coordinator/sweep_spec.h"

namespace nightshift {
namespace {

SuccessiveHalving AshaOf(const v1::Sweep& sweep) {
  SuccessiveHalvingOptions o;
  const v1::AshaSpec& a = sweep.spec().asha();
  o.min_resource = a.min_epochs() > 0 ? a.min_epochs() : a.min_steps();
  o.reduction_factor = sweep.spec().asha().reduction_factor();
  o.min_early_stopping_rate = sweep.spec().asha().min_early_stopping_rate();
  o.maximize = sweep.spec().maximize();
  SuccessiveHalving asha(o);
  std::map<std::string, std::vector<double>> recorded;
  for (const v1::Trial& t : sweep.trials())
    if (t.rung_values_size() > 0) recorded[t.job_id()] = {t.rung_values().begin(), t.rung_values().end()};
  asha.Restore(std::move(recorded));
  return asha;
}

bool Better(const v1::Sweep& sweep, double a, double b) { return sweep.spec().maximize() ? a > b : a < b; }

std::string TrialName(const v1::Trial& t) {
  return "trial " + std::to_string(t.index()) + " (" + t.job_id() + ")";
}

}  // namespace

Status SweepRunner::Pass() {
  Status first;  // one sweep's trouble does not hold up the others
  for (v1::Sweep& sweep : coordinator_->RunningSweeps()) {
    const std::string id = sweep.id();
    Status s = Step(std::move(sweep));
    if (!s.ok() && first.ok()) first = Status::Unavailable("sweep " + id + ": " + s.message());  // logged by the caller
  }
  return first;
}

// One pass over one sweep: its state, the coordinator, and what the pass decided.
struct SweepRunner::SweepPass {
  Coordinator* c;
  v1::Sweep sweep;
  SuccessiveHalving asha;
  int running = 0;  // trials whose jobs are queued or running
  std::map<std::string, v1::JobMetrics> metrics;  // by job id, read this pass
  struct Steps {
    int64_t done = 0;  // the job's progress
    int64_t last = 0;  // its last step (max_steps, or what its epochs come to); 0: unknown
  };
  std::map<std::string, Steps> steps;  // by job id, read this pass

  // Coordinator::Judged's calls, made after the pass is written (a pass that fails would
  // judge the evaluations again, and may pause a trial its ranks were told goes on).
  std::vector<std::pair<std::string, int64_t>> judged;

  void Event(const std::string& text) { sweep.add_events()->set_text(text); }  // stamped when written
  bool Asha() const { return sweep.spec().method() == "asha"; }

  // Takes the trial's evaluations past reported_step, in step order; with `judge`, each
  // one goes to ASHA until one pauses the trial (the later ones wait: if it is promoted
  // they are judged at their own rungs). Once the job has trained its last step nothing
  // pauses it: pausing would save no step, and its job is writing its model; it completes
  // (as Determined's ASHA completes the trials that reach max_length), its values still
  // counted at their rungs for the others.
  Status Judge(v1::Trial* t, bool judge) {
    const std::string& metric = sweep.spec().metric();
    const Steps job_steps = steps[t->job_id()];
    for (const v1::AttemptMetrics& a : metrics[t->job_id()].attempts()) {
      for (const v1::EvalPoint& e : a.evals()) {
        auto it = e.metrics().find(metric);
        if (e.step() <= t->reported_step() || it == e.metrics().end()) continue;
        if (judge && t->state() != v1::TRIAL_RUNNING) return Status::OK();
        t->set_reported_step(e.step());
        t->set_has_value(true);
        t->set_value(it->second);
        t->set_step(e.step());
        if (!judge) continue;
        // Rungs by epochs: an evaluation in epoch e (from 0) counts as e + 1 epochs (trials
        // evaluate at each epoch's end then: TrialSpec).
        const bool epochs = sweep.spec().asha().min_epochs() > 0;
        const RungDecision d = asha.Report(t->job_id(), epochs ? e.epoch() + 1 : e.step(), it->second);
        if (d.rung < 0) continue;
        const auto& recorded = asha.recorded().at(t->job_id());
        t->mutable_rung_values()->Assign(recorded.begin(), recorded.end());
        t->set_rung(d.rung);
        const std::string judged = "rung " + std::to_string(d.rung) + " (" +
                                   (epochs ? "epoch " + std::to_string(e.epoch() + 1) + ", " : "") + "step " +
                                   std::to_string(e.step()) + ", " + metric + " " + FormatNumber(it->second) +
                                   ", cut-off " + FormatNumber(d.cutoff) + ")";
        const bool trained_all = job_steps.last > 0 && std::max(job_steps.done, e.step()) >= job_steps.last;
        if (!d.stop || trained_all) {
          Event(TrialName(*t) + (d.stop ? " trained every step it had: not paused at " : " goes on past ") + judged);
          continue;
        }
        NS_RETURN_IF_ERROR(c->Hold(t->job_id(), "sweep " + sweep.id() + ": paused at " + judged));
        t->set_state(v1::TRIAL_PAUSED);
        Event(TrialName(*t) + " paused at " + judged);
      }
    }
    return Status::OK();
  }

  // The record is the truth: a Hold or Release whose pass did not get written (an error
  // later in it, a crash) is undone here, so a trial the record says runs is not held, and
  // one it says is paused is.
  Status Reconcile(const v1::Trial& t, const v1::Job& job) {
    if (IsTerminal(job.state())) return Status::OK();
    if (t.state() == v1::TRIAL_RUNNING && !job.held_by().empty()) return c->Release(t.job_id());
    if (t.state() == v1::TRIAL_PAUSED && job.held_by().empty())
      return c->Hold(t.job_id(), "sweep " + sweep.id() + ": paused at rung " + std::to_string(t.rung()));
    return Status::OK();
  }

  // What each trial's job did since the last pass.
  Status Observe() {
    for (v1::Trial& t : *sweep.mutable_trials()) {
      if (t.state() != v1::TRIAL_RUNNING && t.state() != v1::TRIAL_PAUSED) continue;
      StatusOr<v1::Job> job = c->Get(t.job_id());
      if (job.status().code() == Status::kNotFound) {
        t.set_state(v1::TRIAL_FAILED);
        Event(TrialName(t) + ": its job was deleted");
        continue;
      }
      if (!job.ok()) return job.status();
      NS_RETURN_IF_ERROR(Reconcile(t, *job));
      StatusOr<v1::JobMetrics> m = c->Metrics(t.job_id());
      if (!m.ok()) return m.status();
      metrics[t.job_id()] = std::move(*m);
      steps[t.job_id()] = {job->progress().step(), job->progress().total_steps() > 0 ? job->progress().total_steps()
                                                                                      : job->spec().train().max_steps()};
      NS_RETURN_IF_ERROR(Judge(&t, Asha() && !IsTerminal(job->state())));
      // Judged through its newest evaluation (one without the metric has nothing to judge)
      // and going on: its ranks waiting at that rung go on, once this pass is written.
      if (Asha() && t.state() == v1::TRIAL_RUNNING && !IsTerminal(job->state())) {
        int64_t newest = 0;
        for (const v1::AttemptMetrics& a : metrics[t.job_id()].attempts())
          for (const v1::EvalPoint& e : a.evals()) newest = std::max(newest, e.step());
        if (newest > job->judged_step()) judged.emplace_back(t.job_id(), newest);
      }
      if (job->state() == v1::SUCCEEDED) t.set_state(v1::TRIAL_COMPLETED);
      if (job->state() == v1::FAILED) t.set_state(v1::TRIAL_FAILED);
      if (job->state() == v1::CANCELLED) t.set_state(StoppedBySweep(*job) ? v1::TRIAL_STOPPED : v1::TRIAL_CANCELLED);
      if (IsTerminal(job->state()))
        Event(TrialName(t) + " " + v1::TrialState_Name(t.state()) +
              (t.has_value() ? ", " + sweep.spec().metric() + " " + FormatNumber(t.value()) + " at step " +
                                   std::to_string(t.step())
                             : ""));
      if (t.state() == v1::TRIAL_RUNNING) ++running;
    }
    return Status::OK();
  }

  // A paused trial now within its rung's top 1/eta goes on: first its evaluations that
  // waited are judged (they may pause it at a later rung); if none does, it resumes.
  Status Promote() {
    for (v1::Trial& t : *sweep.mutable_trials()) {
      if (!Asha() || t.state() != v1::TRIAL_PAUSED || running >= sweep.spec().parallelism()) continue;
      const RungDecision d = asha.Promotion(t.job_id(), t.rung());
      if (d.stop) continue;
      Event(TrialName(t) + " promoted at rung " + std::to_string(t.rung()) + " (" + sweep.spec().metric() + " " +
            FormatNumber(t.rung_values(t.rung())) + ", cut-off now " + FormatNumber(d.cutoff) + ")");
      t.set_state(v1::TRIAL_RUNNING);
      t.set_promotions(t.promotions() + 1);
      NS_RETURN_IF_ERROR(Judge(&t, /*judge=*/true));
      if (t.state() != v1::TRIAL_RUNNING) continue;  // paused again, still held
      NS_RETURN_IF_ERROR(c->Release(t.job_id()));
      Event(TrialName(t) + " resumes from its checkpoint");
      ++running;
    }
    return Status::OK();
  }

  // An ASHA trial's rungs, where its ranks wait for the judgement: steps (or epochs, with
  // asha.min_epochs) before its last one (`last`: max_steps, or epochs; 0: the first 32).
  std::vector<int64_t> AwaitRungs(int64_t last) const {
    std::vector<int64_t> rungs;
    if (!Asha()) return rungs;
    for (int k = 0; k < 32; ++k) {
      const int64_t at = asha.RungStep(k);
      if (at <= 0 || at > (int64_t{1} << 40) || (last > 0 && at >= last) || (!rungs.empty() && at <= rungs.back()))
        break;
      rungs.push_back(at);
    }
    return rungs;
  }

  // New trials while the budget and the parallelism allow.
  Status MakeTrials() {
    const v1::SweepSpec& spec = sweep.spec();
    while (running < spec.parallelism() && sweep.trials_size() < spec.max_trials()) {
      const int index = sweep.trials_size();
      const std::map<std::string, std::string> params = TrialParams(spec, index);
      StatusOr<v1::JobSpec> job_spec = TrialSpec(spec, params);
      if (!job_spec.ok()) {
        sweep.set_state(v1::FAILED);
        sweep.set_reason("trial " + std::to_string(index) + ": " + job_spec.status().message());
        Event(sweep.reason());
        return Status::OK();
      }
      job_spec->set_name(spec.name() + "-t" + std::to_string(index));
      const bool by_epochs = spec.asha().min_epochs() > 0;
      StatusOr<v1::Job> job = c->SubmitTrial(
          *job_spec, sweep.owner(), sweep.id() + "-t" + std::to_string(index), sweep.id(),
          AwaitRungs(by_epochs ? job_spec->train().epochs() : job_spec->train().max_steps()), by_epochs);
      if (job.status().code() == Status::kResourceExhausted) return Status::OK();  // the owner's job limit: later
      if (job.status().code() == Status::kFailedPrecondition) return Status::OK();  // cancelled meanwhile
      if (job.status().code() == Status::kInvalidArgument) {  // e.g. its request id taken by another spec
        sweep.set_state(v1::FAILED);
        sweep.set_reason("trial " + std::to_string(index) + ": " + job.status().message());
        Event(sweep.reason());
        return Status::OK();
      }
      if (!job.ok()) return job.status();
      v1::Trial* t = sweep.add_trials();
      t->set_index(index);
      t->set_job_id(job->id());
      t->mutable_params()->insert(params.begin(), params.end());
      t->set_state(v1::TRIAL_RUNNING);
      t->set_rung(-1);
      ++running;
      std::string listed;
      for (const auto& [field, value] : params) listed += (listed.empty() ? "" : ", ") + field + "=" + value;
      Event("trial " + std::to_string(index) + ": job " + job->id() + " with " + listed);
    }
    return Status::OK();
  }

  // The best so far: completed trials first, then any with a finite value (a NaN is never
  // best); null when none has a value.
  const v1::Trial* Best() const {
    const v1::Trial* best = nullptr;
    for (const v1::Trial& t : sweep.trials()) {
      if (!t.has_value() || !std::isfinite(t.value())) continue;
      const bool done = t.state() == v1::TRIAL_COMPLETED, best_done = best && best->state() == v1::TRIAL_COMPLETED;
      if (!best || (done && !best_done) || (done == best_done && Better(sweep, t.value(), best->value()))) best = &t;
    }
    return best;
  }

  // What a paused trial's job is cancelled with when the sweep stops it. Only StopPaused
  // uses the prefix (StoppedBySweep recognises it).
  std::string StopPrefix() const { return "sweep " + sweep.id() + ": stopped at rung "; }
  std::string StopReason(const v1::Trial& t) const {
    return StopPrefix() + std::to_string(t.rung()) + (sweep.state() == v1::FAILED ? " (the sweep FAILED)" : "");
  }
  // Whether this sweep stopped the (cancelled) job: a pass that cancelled it but whose record
  // was not written (a crash between the two) had decided the trial STOPPED, not cancelled.
  bool StoppedBySweep(const v1::Job& job) const { return job.reason().rfind(StopPrefix(), 0) == 0; }

  // Every paused trial STOPPED, its job CANCELLED (checkpoints kept): once the sweep ends
  // none is promoted, and a held job left QUEUED would never run nor finish (counted against
  // its owner's job limit, out of CancelSweep's reach). The jobs are cancelled before the
  // record is written: after a crash between, the record still says RUNNING and PAUSED, so
  // the next pass reads the sweep again and Observe finds those jobs stopped (StoppedBySweep).
  Status StopPaused() {
    for (v1::Trial& t : *sweep.mutable_trials()) {
      if (t.state() != v1::TRIAL_PAUSED) continue;
      StatusOr<v1::Job> cancelled = c->Cancel(t.job_id(), StopReason(t));
      if (!cancelled.ok() && cancelled.status().code() != Status::kFailedPrecondition) return cancelled.status();
      t.set_state(v1::TRIAL_STOPPED);
    }
    return Status::OK();
  }

  // The best so far; the end once the budget is spent and nothing runs. A sweep that ends,
  // SUCCEEDED here or FAILED in MakeTrials, stops its paused trials.
  Status Finish() {
    const v1::Trial* best = Best();  // into sweep.trials(), which StopPaused adds none to
    if (best) sweep.set_best_job_id(best->job_id());
    // Only RUNNING sweeps get a pass (RunningSweeps): one not RUNNING now ended in this one,
    // and no later pass comes to stop its paused trials.
    if (sweep.state() != v1::RUNNING) return StopPaused();
    if (running > 0 || sweep.trials_size() < sweep.spec().max_trials()) return Status::OK();
    NS_RETURN_IF_ERROR(StopPaused());
    sweep.set_state(v1::SUCCEEDED);
    sweep.set_reason(best ? "best: " + TrialName(*best) + ", " + sweep.spec().metric() + " " + FormatNumber(best->value())
                          : "no trial reported " + sweep.spec().metric());
    Event("ended: " + sweep.reason());
    return Status::OK();
  }
};

Status SweepRunner::Step(v1::Sweep sweep) {
  const std::string before = sweep.SerializeAsString();
  SuccessiveHalving asha = AshaOf(sweep);
  SweepPass pass{coordinator_, std::move(sweep), std::move(asha)};
  NS_RETURN_IF_ERROR(pass.Observe());
  NS_RETURN_IF_ERROR(pass.Promote());
  NS_RETURN_IF_ERROR(pass.MakeTrials());
  NS_RETURN_IF_ERROR(pass.Finish());
  // A sweep that ended (FAILED: a trial it could not make) judges no more: the ranks of
  // its trials still running wait at no rung (its paused ones Finish stopped).
  if (pass.sweep.state() != v1::RUNNING)
    for (const v1::Trial& t : pass.sweep.trials())
      if (t.state() == v1::TRIAL_RUNNING) pass.judged.emplace_back(t.job_id(), std::numeric_limits<int64_t>::max());
  if (pass.sweep.SerializeAsString() != before) NS_RETURN_IF_ERROR(coordinator_->UpdateSweep(pass.sweep));
  for (const auto& [job_id, step] : pass.judged) NS_RETURN_IF_ERROR(coordinator_->Judged(job_id, step));
  return Status::OK();
}

}  // namespace nightshift
