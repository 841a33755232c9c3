#include "worker/trainer/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace nightshift::trainer {

double LearningRate(const std::string& schedule, int64_t step, int64_t warmup, int64_t total, double peak) {
  if (step < warmup) return peak * double(step) / double(std::max<int64_t>(1, warmup));
  const double span = double(std::max<int64_t>(1, total - warmup));
  if (schedule == "linear") return peak * std::max(0.0, double(total - step) / span);
  if (schedule == "cosine") {
    const double progress = double(step - warmup) / span;
    return peak * std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * 0.5 * 2.0 * progress)));  // num_cycles 0.5
  }
  if (schedule == "constant") return peak;
  throw std::invalid_argument("train.schedule: unknown schedule '" + schedule + "'");
}

}  // namespace nightshift::trainer
