#include "coordinator/asha.h"

#include <algorithm>
#include <cmath>

namespace nightshift {

SuccessiveHalving::SuccessiveHalving(SuccessiveHalvingOptions options) : options_(options) {}

int64_t SuccessiveHalving::RungStep(int rung) const {
  int64_t step = options_.min_resource;
  for (int i = 0; i < options_.min_early_stopping_rate + rung; ++i) step *= options_.reduction_factor;
  return step;
}

RungDecision SuccessiveHalving::Report(const std::string& trial, int64_t step, double value) {
  RungDecision decision;
  std::vector<double>& mine = recorded_[trial];
  for (int rung = static_cast<int>(mine.size()); step >= RungStep(rung); ++rung) {
    decision.rung = rung;
    if (std::isnan(value)) {
      decision.stop = true;
      return decision;
    }
    mine.push_back(value);
    at_rung_[rung].push_back(value);  // the others' values, recorded before, and this one
    decision.cutoff = Cutoff(at_rung_[rung]);
    if (!Within(value, decision.cutoff)) {
      decision.stop = true;
      return decision;
    }
  }
  return decision;
}

RungDecision SuccessiveHalving::Promotion(const std::string& trial, int rung) const {
  RungDecision decision;
  decision.rung = rung;
  decision.stop = true;
  auto mine = recorded_.find(trial);
  auto at = at_rung_.find(rung);
  if (mine == recorded_.end() || static_cast<int>(mine->second.size()) <= rung || at == at_rung_.end()) return decision;
  decision.cutoff = Cutoff(at->second);
  decision.stop = !Within(mine->second[rung], decision.cutoff);
  return decision;
}

double SuccessiveHalving::Cutoff(std::vector<double> competing) const {
  const int n = static_cast<int>(competing.size());
  const int index = std::max(0, n / options_.reduction_factor - 1);
  std::sort(competing.begin(), competing.end());
  return options_.maximize ? competing[n - 1 - index] : competing[index];
}

bool SuccessiveHalving::Within(double value, double cutoff) const {
  return options_.maximize ? value >= cutoff : value <= cutoff;
}

void SuccessiveHalving::Restore(std::map<std::string, std::vector<double>> recorded) {
  recorded_ = std::move(recorded);
  at_rung_.clear();
  for (const auto& [trial, values] : recorded_)
    for (size_t rung = 0; rung < values.size(); ++rung) at_rung_[static_cast<int>(rung)].push_back(values[rung]);
}

}  // namespace nightshift
