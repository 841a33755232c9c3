// A sweep's file and its trials' specs (issue 45; docs/sweeps.md). Pure.
//
//   name: lr-sweep
//   base: {model: ..., data: ..., train: ...}   # the job spec every trial starts from
//   search:                                     # spec fields, dotted, and their values
//     train.lr: {log_uniform: [1.0e-4, 1.0e-2]}
//     train.warmup_steps: {choices: [0, 20]}
//     model.adapter.r: {int: [4, 16]}
//     train.weight_decay: {uniform: [0, 0.1]}
//   method: asha            # grid | random | asha
//   metric: val_loss        # an evaluation metric of the trials
//   direction: minimize     # or maximize
//   max_trials: 16
//   parallelism: 4          # trials queued or running at once (default 1)
//   seed: 0
//   asha: {min_steps: 100, reduction_factor: 4, min_early_stopping_rate: 0}
//
// The search space is checked against the spec's rules before anything runs: every choice,
// and both ends of every range, set on the base must give a valid job spec.
#ifndef NIGHTSHIFT_COORDINATOR_SWEEP_SPEC_H_
#define NIGHTSHIFT_COORDINATOR_SWEEP_SPEC_H_

#include <map>
#include <string>

#include "common/status.h"
#include "nightshift/v1/jobs.pb.h"
#include "nightshift/v1/spec.pb.h"

namespace nightshift {

// INVALID_ARGUMENT naming the key (`search.train.lr: ...`, `asha.min_steps: ...`).
StatusOr<v1::SweepSpec> LoadSweepSpec(const std::string& text);

// A number as a trial's params and the sweep's events write it (%.6g).
std::string FormatNumber(double v);

// How many trials a grid has (the product of its params' sizes).
int64_t GridSize(const v1::SweepSpec& spec);

// Trial `index`'s params, field -> value as YAML text: grid, the index-th point in order
// (the last param changing fastest); random and asha, drawn from (seed, index) alone, so
// a trial made again after a restart gets the same.
std::map<std::string, std::string> TrialParams(const v1::SweepSpec& spec, int index);

// The base with `params` set, checked (LoadJobSpec). For asha, evaluations every
// asha.min_steps steps unless the base's already fall on every rung; with
// asha.min_epochs, at every epoch's end (eval.every_steps cleared).
StatusOr<v1::JobSpec> TrialSpec(const v1::SweepSpec& spec, const std::map<std::string, std::string>& params);

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_SWEEP_SPEC_H_
