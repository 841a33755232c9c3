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
    std::vector<double> competing = at_rung_[rung];  // the others' values, recorded before
    competing.push_back(value);
    mine.push_back(value);
    at_rung_[rung].push_back(value);
    const int n = static_cast<int>(competing.size());
    const int index = std::max(0, n / options_.reduction_factor - 1);
    std::sort(competing.begin(), competing.end());
    decision.cutoff = options_.maximize ? competing[n - 1 - index] : competing[index];
    const bool promoted = options_.maximize ? value >= decision.cutoff : value <= decision.cutoff;
    if (!promoted) {
      decision.stop = true;
      return decision;
    }
  }
  return decision;
}

void SuccessiveHalving::Restore(std::map<std::string, std::vector<double>> recorded) {
  recorded_ = std::move(recorded);
  at_rung_.clear();
  for (const auto& [trial, values] : recorded_)
    for (size_t rung = 0; rung < values.size(); ++rung) at_rung_[static_cast<int>(rung)].push_back(values[rung]);
}

}  // namespace nightshift
