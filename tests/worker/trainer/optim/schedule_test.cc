// The schedules against transformers' own: optim/schedule.h promises the learning rate
// of every step equal to get_<name>_schedule_with_warmup's as Trainer steps it.
#include "worker/trainer/optim/schedule.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

namespace nightshift::trainer {
namespace {

// transformers' learning rates for `total` steps: the lr each optimizer step runs with.
nlohmann::json TransformersRates(const std::string& schedule, int warmup, int total, double peak) {
  const std::string script =
      "import json, torch, transformers as t\n"
      "p = torch.nn.Parameter(torch.zeros(1))\n"
      "o = torch.optim.AdamW([p], lr=" + std::to_string(peak) + ")\n"
      "s = getattr(t, 'get_" + schedule + "_schedule_with_warmup')(o, " + std::to_string(warmup) +
      (schedule == "constant" ? "" : ", " + std::to_string(total)) + ")\n"
      "out = []\n"
      "for _ in range(" + std::to_string(total) + "):\n"
      "    out.append(o.param_groups[0]['lr']); o.step(); s.step()\n"
      "print(json.dumps(out))\n";
  const std::string path = ::testing::TempDir() + "/schedule_reference.py";
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs(script.c_str(), f);
  std::fclose(f);
  FILE* pipe = popen((std::string(NIGHTSHIFT_PYTHON) + " " + path).c_str(), "r");
  std::string text;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) text.append(buf, n);
  EXPECT_EQ(pclose(pipe), 0) << text;
  return nlohmann::json::parse(text);
}

TEST(ScheduleTest, EveryStepEqualsTransformers) {
  for (const std::string schedule : {"linear", "cosine", "constant"})
    for (const auto& [warmup, total] : {std::pair{0, 17}, std::pair{5, 40}, std::pair{10, 10}, std::pair{3, 2}}) {
      const nlohmann::json ref = TransformersRates(schedule, warmup, total, 3e-4);
      ASSERT_EQ(ref.size(), size_t(total));
      for (int step = 0; step < total; ++step)
        EXPECT_NEAR(LearningRate(schedule, step, warmup, total, 3e-4), ref[step].get<double>(), 1e-15)
            << schedule << " warmup " << warmup << " total " << total << " step " << step;
    }
}

TEST(ScheduleTest, AnUnknownScheduleIsNamed) {
  EXPECT_THROW(LearningRate("step", 0, 0, 10, 1.0), std::invalid_argument);
}

}  // namespace
}  // namespace nightshift::trainer
