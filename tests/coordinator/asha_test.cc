// coordinator/asha.h: successive halving decides as Optuna's SuccessiveHalvingPruner does.
// A small case by hand, then hundreds of random trials (interleaved reports, both
// directions, several reduction factors, minimum resources and early-stopping rates, NaNs)
// replayed through both: every decision equal (tests/support/asha_reference.py runs
// Optuna, pinned in scripts/requirements.txt).
#include "coordinator/asha.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "common/command.h"

namespace nightshift {
namespace {

using nlohmann::json;

TEST(SuccessiveHalvingTest, RungsAtGraceTimesEtaAndTheTopOneOverEtaGoOn) {
  SuccessiveHalving sh({/*min_resource=*/2, /*reduction_factor=*/2, /*min_early_stopping_rate=*/0, /*maximize=*/false});
  EXPECT_EQ(sh.RungStep(0), 2);
  EXPECT_EQ(sh.RungStep(3), 16);
  EXPECT_EQ(sh.Report("a", 1, 0.9).rung, -1);  // below the first rung: nothing decided
  RungDecision d = sh.Report("a", 2, 0.5);      // the first at rung 0: the best so far
  EXPECT_FALSE(d.stop);
  EXPECT_EQ(d.rung, 0);
  d = sh.Report("b", 2, 0.7);                   // 2 competing, index 2/2-1 = 0: must be the best
  EXPECT_TRUE(d.stop);
  EXPECT_EQ(d.cutoff, 0.5);
  d = sh.Report("c", 2, 0.4);
  EXPECT_FALSE(d.stop);
  d = sh.Report("d", 3, 0.6);                   // 4 competing, index 1: [0.4, 0.5, 0.6, 0.7] -> 0.5
  EXPECT_TRUE(d.stop);
  EXPECT_EQ(d.cutoff, 0.5);
  d = sh.Report("c", 9, 0.3);                   // rungs 1 (4) and 2 (8) at once, with the same value
  EXPECT_FALSE(d.stop);
  EXPECT_EQ(d.rung, 2);
  EXPECT_EQ(sh.recorded().at("c"), (std::vector<double>{0.4, 0.3, 0.3}));
  EXPECT_TRUE(sh.Report("e", 2, std::nan("")).stop);  // NaN stops
  // The state restores: the same decisions after.
  SuccessiveHalving again({2, 2, 0, false});
  again.Restore(sh.recorded());
  EXPECT_EQ(again.Report("f", 4, 0.35).stop, sh.Report("f", 4, 0.35).stop);
}

struct Replay {
  SuccessiveHalvingOptions options;
  json events = json::array();  // [trial, step, value or null]
};

// Trials that report every `every` steps up to `steps`, their values a noisy curve of a
// quality of their own, interleaved as trials that run side by side would be.
Replay RandomReplay(std::mt19937_64& rng, int trials) {
  Replay r;
  const int etas[] = {2, 3, 4};
  const int64_t grace[] = {1, 2, 5};
  r.options.reduction_factor = etas[rng() % 3];
  r.options.min_resource = grace[rng() % 3];
  r.options.min_early_stopping_rate = static_cast<int>(rng() % 2);
  r.options.maximize = rng() % 2 == 0;
  std::uniform_real_distribution<double> unit(0, 1);
  std::vector<std::vector<std::pair<int64_t, double>>> streams(trials);
  for (auto& s : streams) {
    const double quality = unit(rng), every = 1 + static_cast<int>(rng() % 3);
    const int64_t steps = 5 + static_cast<int64_t>(rng() % 80);
    for (int64_t step = static_cast<int64_t>(every); step <= steps; step += static_cast<int64_t>(every)) {
      double v = quality + 1.0 / static_cast<double>(step) + 0.05 * unit(rng);
      if (unit(rng) < 0.1) v = std::round(v * 10) / 10;  // ties
      if (unit(rng) < 0.003) v = std::nan("");
      s.push_back({step, v});
    }
  }
  // Interleaved: a few trials run at once; each next report comes from one of them.
  std::vector<size_t> next(trials, 0);
  std::vector<int> running;
  int started = 0;
  while (started < trials || !running.empty()) {
    while (started < trials && running.size() < 6) running.push_back(started++);
    const size_t k = rng() % running.size();
    const int t = running[k];
    const auto [step, v] = streams[t][next[t]++];
    r.events.push_back({t, step, std::isnan(v) ? json(nullptr) : json(v)});
    if (next[t] == streams[t].size()) running.erase(running.begin() + static_cast<long>(k));
  }
  return r;
}

// Optuna's decisions for a replay: per event true, false or null (skipped).
json OptunaDecisions(const Replay& r) {
  const std::string file = std::filesystem::temp_directory_path() / ("asha-" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << json{{"min_resource", r.options.min_resource},
                              {"reduction_factor", r.options.reduction_factor},
                              {"min_early_stopping_rate", r.options.min_early_stopping_rate},
                              {"maximize", r.options.maximize},
                              {"events", r.events}}
                             .dump();
  SubprocessRunner runner;
  StatusOr<CommandResult> out = runner.Run(
      {NIGHTSHIFT_PYTHON, std::string(NIGHTSHIFT_SOURCE_DIR) + "/tests/support/asha_reference.py", file}, "", {}, 300);
  std::filesystem::remove(file);
  EXPECT_TRUE(out.ok() && out->exit_code == 0) << (out.ok() ? out->err : out.status().ToString());
  return out.ok() ? json::parse(out->out, nullptr, false) : json();
}

// ASHA's promotion: a trial stopped at a rung because it was second of two (eta 2: only
// the best goes on) is promoted once four values are there and it is within the top two;
// the worst stays stopped; a trial stopped on NaN recorded nothing and is never promoted.
TEST(SuccessiveHalvingTest, AStoppedTrialIsPromotedOnceTheRungsNewValuesPutItInTheTopOneOverEta) {
  SuccessiveHalving sh({/*min_resource=*/10, /*reduction_factor=*/2, /*min_early_stopping_rate=*/0, /*maximize=*/false});
  EXPECT_FALSE(sh.Report("a", 10, 1.0).stop);
  EXPECT_TRUE(sh.Report("b", 10, 2.0).stop);   // n = 2: must equal the best
  EXPECT_TRUE(sh.Promotion("b", 0).stop);
  EXPECT_TRUE(sh.Report("c", 10, 3.0).stop);   // n = 3: index 0 still
  RungDecision d = sh.Promotion("b", 0);
  EXPECT_TRUE(d.stop);
  EXPECT_EQ(d.cutoff, 1.0);
  EXPECT_TRUE(sh.Report("d", 10, 4.0).stop);   // n = 4: index 1, cut-off 2.0
  d = sh.Promotion("b", 0);
  EXPECT_FALSE(d.stop);
  EXPECT_EQ(d.cutoff, 2.0);
  EXPECT_EQ(d.rung, 0);
  EXPECT_TRUE(sh.Promotion("c", 0).stop);
  EXPECT_TRUE(sh.Report("e", 10, std::nan("")).stop);
  EXPECT_TRUE(sh.Promotion("e", 0).stop);
  EXPECT_TRUE(sh.Promotion("b", 1).stop);      // nothing recorded at rung 1 yet
  // Maximizing, the same with the order reversed.
  SuccessiveHalving up({10, 2, 0, /*maximize=*/true});
  up.Report("a", 10, 4.0);
  EXPECT_TRUE(up.Report("b", 10, 3.0).stop);
  up.Report("c", 10, 2.0);
  up.Report("d", 10, 1.0);
  EXPECT_FALSE(up.Promotion("b", 0).stop);
  EXPECT_TRUE(up.Promotion("c", 0).stop);
}

TEST(SuccessiveHalvingTest, EveryDecisionEqualsOptunasOnHundredsOfRandomTrials) {
  std::mt19937_64 rng(20261205);
  int decisions = 0, stops = 0;
  for (int replay = 0; replay < 12; ++replay) {
    const Replay r = RandomReplay(rng, 40);
    const json want = OptunaDecisions(r);
    ASSERT_TRUE(want.is_array() && want.size() == r.events.size()) << want.dump().substr(0, 200);
    SuccessiveHalving sh(r.options);
    std::set<int> stopped;
    for (size_t i = 0; i < r.events.size(); ++i) {
      const int trial = r.events[i][0];
      if (stopped.count(trial)) {
        EXPECT_TRUE(want[i].is_null()) << "replay " << replay << " event " << i;
        continue;
      }
      const double value = r.events[i][2].is_null() ? std::nan("") : r.events[i][2].get<double>();
      const RungDecision d = sh.Report(std::to_string(trial), r.events[i][1], value);
      ASSERT_TRUE(want[i].is_boolean()) << "replay " << replay << " event " << i;
      ASSERT_EQ(d.stop, want[i].get<bool>()) << "replay " << replay << " event " << i << " trial " << trial << " step "
                                             << r.events[i][1] << " value " << value << " eta "
                                             << r.options.reduction_factor << " grace " << r.options.min_resource;
      ++decisions;
      if (d.stop) {
        stopped.insert(trial);
        ++stops;
      }
    }
  }
  // The replays must have exercised both outcomes, many times.
  std::printf("%d decisions equal to Optuna's, %d of them stops\n", decisions, stops);
  EXPECT_GT(decisions, 3000);
  EXPECT_GT(stops, 200);
}

}  // namespace
}  // namespace nightshift
