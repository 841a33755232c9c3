// The learning rate at each step: warm-up, then train.schedule. Equal, step for step, to
// transformers' get_linear_schedule_with_warmup, get_cosine_schedule_with_warmup (half a
// cosine) and get_constant_schedule_with_warmup, as Trainer steps them (the scheduler
// steps after the optimizer, so the step with 0-based index `step` uses lr_lambda(step):
// the very first step of a warm-up trains at 0).
#ifndef NIGHTSHIFT_WORKER_TRAINER_OPTIM_SCHEDULE_H_
#define NIGHTSHIFT_WORKER_TRAINER_OPTIM_SCHEDULE_H_

#include <cstdint>
#include <string>

namespace nightshift::trainer {

// `schedule`: linear | cosine | constant (the spec's rules checked it; anything else
// throws std::invalid_argument). `step`: 0-based index of the optimizer step about to run
// (RunPosition::lr_steps: a skipped step does not count, as Trainer does not step its
// scheduler when optimizer_step_was_skipped); `total`: the run's steps.
double LearningRate(const std::string& schedule, int64_t step, int64_t warmup, int64_t total, double peak);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_OPTIM_SCHEDULE_H_
