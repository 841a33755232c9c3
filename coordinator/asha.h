// Successive halving, the decision at the heart of ASHA (issue 45): when a trial of a
// sweep reports its metric at a step, does it stop there? The rules are Optuna's
// SuccessiveHalvingPruner's, so that a sweep decides as the library users know does
// (tests/coordinator/asha_test.cc replays hundreds of random trials through both):
//
// - Rung k is at step min_resource * eta^(min_early_stopping_rate + k). A report at a step
//   below the trial's next rung decides nothing. One at or above it has reached that rung
//   (and possibly the ones after it: each is judged in turn, with the same value).
// - Reaching rung k records the value at that rung; its competitors are every value
//   recorded at rung k before (by any trial, stopped or not) plus this one. Sorted best
//   first, the trial goes on if its value is at least as good as the one at index
//   max(0, n / eta - 1): the top 1/eta, or the best while fewer than eta have competed.
// - A NaN value stops the trial at once (nothing recorded).
//
// Promotion goes beyond Optuna (whose pruned trials never come back): a stopped trial is
// judged again at its rung as more values arrive (the ASHA paper's promotion), and the
// coordinator resumes it from its checkpoint (coordinator/sweeps.h).
// Not here: Optuna's min_resource "auto" (an explicit min_resource is required).
// Not thread-safe: the caller serialises reports (the coordinator's lock).
#ifndef NIGHTSHIFT_COORDINATOR_ASHA_H_
#define NIGHTSHIFT_COORDINATOR_ASHA_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nightshift {

struct SuccessiveHalvingOptions {
  int64_t min_resource = 1;         // steps to the first rung (grace); at least 1
  int reduction_factor = 4;         // eta; at least 2
  int min_early_stopping_rate = 0;  // s: the first rung is at min_resource * eta^s
  bool maximize = false;            // the metric's direction
};

struct RungDecision {
  bool stop = false;     // the trial stops at `rung`
  int rung = -1;         // the last rung judged at this report; -1: none reached
  double cutoff = 0;     // the value it had to equal or beat there
};

class SuccessiveHalving {
 public:
  explicit SuccessiveHalving(SuccessiveHalvingOptions options);

  // The step of rung `rung`.
  int64_t RungStep(int rung) const;
  // `trial` reported `value` at `step` (its steps growing). Records the rungs it reaches.
  RungDecision Report(const std::string& trial, int64_t step, double value);
  // Asynchronous promotion (ASHA): a trial stopped at `rung` is judged again there against
  // every value recorded at that rung now (more may have come since); stop false: it is
  // now within the top 1/eta and goes on. A trial that recorded nothing there (NaN) stays.
  RungDecision Promotion(const std::string& trial, int rung) const;

  // Per trial, the value recorded at each rung it reached: the whole state (to store and
  // to Restore after a restart).
  const std::map<std::string, std::vector<double>>& recorded() const { return recorded_; }
  void Restore(std::map<std::string, std::vector<double>> recorded);

 private:
  // The value at index max(0, n / eta - 1) of `competing`, best first; whether `value`
  // equals or beats it.
  double Cutoff(std::vector<double> competing) const;
  bool Within(double value, double cutoff) const;

  const SuccessiveHalvingOptions options_;
  std::map<std::string, std::vector<double>> recorded_;  // trial -> value at rung 0, 1, ...
  std::map<int, std::vector<double>> at_rung_;           // rung -> every value recorded there
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_ASHA_H_
