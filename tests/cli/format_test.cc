#include "cli/format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace nightshift::cli {
namespace {

TEST(FormatTest, DurationRoundsToSecondsAndRefusesNonsense) {
  EXPECT_EQ(Duration(0), "0s");
  EXPECT_EQ(Duration(41.6), "42s");
  EXPECT_EQ(Duration(59.4), "59s");
  EXPECT_EQ(Duration(59.5), "1m00s");
  EXPECT_EQ(Duration(187), "3m07s");
  EXPECT_EQ(Duration(3600), "1h00m");
  EXPECT_EQ(Duration(7500), "2h05m");
  EXPECT_EQ(Duration(-1), "-");
  EXPECT_EQ(Duration(1e8), "-");
  EXPECT_EQ(Duration(std::nan("")), "-");
}

TEST(FormatTest, UtcTimeIsIso8601InUtc) {
  EXPECT_EQ(UtcTime(0), "1970-01-01T00:00:00Z");
  EXPECT_EQ(UtcTime(1714564800), "2024-05-01T12:00:00Z");
}

TEST(FormatTest, ProgressLineShowsBarStepsLossThroughputMemoryAndEta) {
  v1::Job job;
  auto* p = job.mutable_progress();
  p->set_step(50);
  p->set_total_steps(200);
  p->set_epoch(1);
  p->set_loss(0.693147);
  p->set_tokens_per_second(12345.6);
  p->set_host_rss_bytes(int64_t{512} << 20);
  p->set_eta_seconds(100);
  EXPECT_EQ(ProgressLine(job),
            "[######..................] 25% step 50/200 epoch 1 loss 0.6931 12346 tok/s rss 512 MiB ETA 1m40s");
  // No total: an empty bar; no RSS: not shown; past the total: a full bar, not more.
  p->set_total_steps(0);
  p->set_host_rss_bytes(0);
  p->set_eta_seconds(-1);
  EXPECT_EQ(ProgressLine(job), "[........................] 0% step 50/0 epoch 1 loss 0.6931 12346 tok/s ETA -");
  p->set_total_steps(40);
  EXPECT_EQ(ProgressLine(job).substr(0, 31), "[########################] 100%");
}

TEST(FormatTest, MetricLinesAreSortedByName) {
  google::protobuf::Map<std::string, double> m;
  EXPECT_EQ(MetricLines(m), "");
  m["val_loss"] = 0.25;
  m["val_accuracy"] = 0.96875;
  m["a_metric_with_a_name_longer_than_the_column"] = 1;
  EXPECT_EQ(MetricLines(m),
            "  a_metric_with_a_name_longer_than_the_column 1.0000\n"
            "  val_accuracy         0.9688\n"
            "  val_loss             0.2500\n");
}

TEST(FormatTest, WorkerStateSaysCordonedOrDraining) {
  v1::WorkerInfo w;
  w.set_state(v1::WORKER_READY);
  EXPECT_EQ(WorkerStateText(w), "WORKER_READY");
  w.set_cordoned(true);
  EXPECT_EQ(WorkerStateText(w), "WORKER_READY,CORDONED");
  w.set_draining(true);  // a drain cordons too; it is the one shown
  EXPECT_EQ(WorkerStateText(w), "WORKER_READY,DRAINING");
  w.set_state(v1::WORKER_LOST);
  w.set_cordoned(false);
  w.set_draining(false);
  EXPECT_EQ(WorkerStateText(w), "WORKER_LOST");
}

TEST(FormatTest, WorkerRowHasNameStateSlotsMemoryAndTasks) {
  v1::WorkerInfo w;
  w.set_name("w1");
  w.set_state(v1::WORKER_READY);
  w.set_slots(4);
  w.set_used_slots(2);
  EXPECT_EQ(WorkerRow(w, 14), "w1               WORKER_READY   4      2      -       ");  // memory unknown
  w.set_memory_bytes(int64_t{24683772} * 1024);
  w.add_tasks()->set_job_id("j1");
  w.add_tasks()->set_job_id("j2");
  EXPECT_EQ(WorkerRow(w, 18), "w1               WORKER_READY       4      2      23.5G   j1,j2");
  // Columns widen for long values rather than cut them.
  w.set_name(std::string(600, 'n'));
  EXPECT_EQ(WorkerRow(w, 14), std::string(600, 'n') + " WORKER_READY   4      2      23.5G   j1,j2");
}

TEST(FormatTest, TerminalStatesAreTheThreeFinalOnes) {
  for (int s = v1::JobState_MIN; s <= v1::JobState_MAX; ++s) {
    if (!v1::JobState_IsValid(s)) continue;
    const auto state = static_cast<v1::JobState>(s);
    EXPECT_EQ(IsTerminal(state), state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED)
        << v1::JobState_Name(state);
  }
}

TEST(FormatTest, SprintfIsNotLimitedToABuffer) {
  EXPECT_EQ(Sprintf("%-4s|%d", "ab", 7), "ab  |7");
  EXPECT_EQ(Sprintf("%s", std::string(10000, 'x').c_str()).size(), 10000u);
  EXPECT_EQ(Sprintf("%s", ""), "");
}

TEST(FormatTest, JsonUsesTheProtoFieldNames) {
  v1::Job job;
  job.set_id("j1");
  job.set_checkpoint_step(40);
  const std::string json = ToJson(job);
  EXPECT_NE(json.find("\"checkpoint_step\": \"40\""), std::string::npos) << json;
  EXPECT_EQ(json.find("checkpointStep"), std::string::npos) << json;
}

}  // namespace
}  // namespace nightshift::cli
