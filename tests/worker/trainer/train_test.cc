#include "worker/trainer/train.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <thread>

#include "common/format/step_metrics.h"
#include "tests/worker/trainer/ranks_util.h"
#include "tests/worker/trainer/test_util.h"

namespace nightshift::trainer {
namespace {

using testing::FreshDir;
using testing::TinyConfig;

TEST(TrainTest, LearnsAnEasyTaskAndReportsProgress) {
  const std::string dir = FreshDir("easy");
  TrainConfig c = TinyConfig(dir, /*n_train=*/480, /*n_val=*/100);
  c.model.d_model = 32;
  c.model.heads = 2;
  c.model.ffn = 64;
  c.model.dropout = 0.0;
  c.train.epochs = 3;
  c.train.lr = 5e-3;
  c.train.warmup_steps = 10;
  c.train.batch_size = 0;
  c.train.max_tokens = 192;  // token-budget batches
  c.train.threads = 2;
  c.checkpoint.every_steps = 0;
  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(c, RankInfo{}, progress), kExitOk);

  std::map<std::string, int> count;
  for (const auto& r : progress.records) {
    count[r.event]++;
    // Every record survives the line format.
    format::ProgressRecord parsed;
    ASSERT_EQ(format::ParseProgressLine(format::FormatProgressLine(r), &parsed), "");
    if (r.event == "step") {
      // Exactly the keys of the one table of step metrics, both ways.
      for (const format::StepMetric& m : format::kStepMetrics) EXPECT_TRUE(r.numbers.count(m.key)) << m.key;
      for (const auto& [key, value] : r.numbers) EXPECT_NE(format::FindStepMetric(key.c_str()), nullptr) << key;
      EXPECT_GT(r.Number("padding_efficiency"), 0.5);
      EXPECT_LE(r.Number("padding_efficiency"), 1.0);
      EXPECT_LE(r.Number("batch_padded_tokens"), 192);
    }
  }
  EXPECT_EQ(progress.records.front().event, "start");  // before any warning
  EXPECT_GT(progress.records.front().Number("blas_gflops"), 0);
  EXPECT_EQ(count["start"], 1);
  EXPECT_GE(count["step"], 3);
  EXPECT_EQ(count["eval"], 3);        // one per epoch; the final one is the last epoch's
  EXPECT_EQ(count["checkpoint"], 1);  // the final checkpoint
  const auto& done = progress.records.back();
  ASSERT_EQ(done.event, "done");
  EXPECT_GE(done.Number("val_accuracy"), 0.9) << "val_loss " << done.Number("val_loss");
  EXPECT_GE(done.Number("val_f1"), 0.9);
}

TEST(TrainTest, MaxStepsStopsEarlyWithEvalCheckpointAndDone) {
  TrainConfig c = TinyConfig(FreshDir("max_steps"));
  c.train.max_steps = 4;
  c.checkpoint.every_steps = 0;
  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(c, RankInfo{}, progress), kExitOk);
  EXPECT_EQ(progress.records.front().event, "start");
  EXPECT_EQ(progress.records.front().Number("total_steps"), 4);
  std::vector<std::string> tail;
  for (size_t i = progress.records.size() - 4; i < progress.records.size(); ++i)
    tail.push_back(progress.records[i].event);
  EXPECT_EQ(tail, (std::vector<std::string>{"eval", "checkpoint", "export", "done"}));
  EXPECT_EQ(progress.records.back().Number("step"), 4);
}

// The worker of an ASHA trial, as a progress sink: the evaluation at step `judge_at` is
// judged (judged_file written: the run goes on); the one at `pause_at` pauses the trial: a
// SIGTERM 0.3 s later (while the ranks wait). Checkpoints() and LastStep() after the run.
class RungWorker : public ProgressSink {
 public:
  RungWorker(std::string judged_file, int64_t judge_at, int64_t pause_at)
      : judged_file_(std::move(judged_file)), judge_at_(judge_at), pause_at_(pause_at) {}
  ~RungWorker() override {
    if (pause_.joinable()) pause_.join();
    ClearStopRequest();
  }
  void Emit(const format::ProgressRecord& r) override {
    records_.push_back(r);
    if (r.event != "eval") return;
    if (r.Number("step") == judge_at_) std::ofstream(judged_file_) << judge_at_ << "\n";
    if (r.Number("step") == pause_at_)
      pause_ = std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        RequestStop();
      });
  }
  std::vector<double> Checkpoints() const {
    std::vector<double> steps;
    for (const auto& r : records_)
      if (r.event == "checkpoint") steps.push_back(r.Number("step"));
    return steps;
  }
  double LastStep() const {
    double last = 0;
    for (const auto& r : records_)
      if (r.event == "step") last = std::max(last, r.Number("step"));
    return last;
  }
  bool Waited() const {  // a wait ran out
    for (const auto& r : records_)
      if (r.event == "warning" && r.String("message").find("no judgement") != std::string::npos) return true;
    return false;
  }

 private:
  const std::string judged_file_;
  const int64_t judge_at_, pause_at_;
  std::vector<format::ProgressRecord> records_;
  std::thread pause_;
};

// Runs `c` beside a RungWorker that judges step `judged` and pauses the trial at step
// `paused`: the run stops there, its only checkpoint that step, no step trained past it.
void ExpectStopsAtRung(const TrainConfig& c, int64_t judged, int64_t paused) {
  RungWorker worker(c.judged_file, judged, paused);
  EXPECT_EQ(RunTraining(c, RankInfo{}, worker), kExitStopped);
  EXPECT_EQ(worker.Checkpoints(), std::vector<double>{static_cast<double>(paused)});
  EXPECT_LE(worker.LastStep(), paused);
  EXPECT_FALSE(worker.Waited());
}

// An ASHA trial's ranks wait after the evaluation at each rung (config.await_steps) for the
// sweep's judgement: judged at step 2, paused at step 6 (0.3 s into the wait), the run
// checkpoints step 6 and stops there, not a step past it.
TEST(TrainTest, AnAshaTrialWaitsAtItsRungsAndStopsThereWhenPaused) {
  const std::string dir = FreshDir("await");
  TrainConfig c = TinyConfig(dir);  // 5 batches an epoch
  c.train.epochs = 3;
  c.eval_every_steps = 2;
  c.checkpoint.every_steps = 0;
  c.await_steps = {2, 6};
  c.judged_file = dir + "/judged-step";
  ExpectStopsAtRung(c, 2, 6);

  // Nothing judged (a coordinator that is down): each rung's wait runs out, and the run
  // goes on to its end.
  TrainConfig unjudged = TinyConfig(FreshDir("await_unjudged"));
  unjudged.eval_every_steps = 2;
  unjudged.await_steps = {2, 6};
  unjudged.judged_file = dir + "/never-written";
  unjudged.await_seconds = 1;
  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(unjudged, RankInfo{}, progress), kExitOk);
  std::vector<std::string> waits;
  for (const auto& r : progress.records)
    if (r.event == "warning") waits.push_back(r.String("message"));
  EXPECT_EQ(waits, (std::vector<std::string>{"no judgement of the evaluation at step 2 within 1 s: going on",
                                             "no judgement of the evaluation at step 6 within 1 s: going on"}));
  EXPECT_EQ(progress.records.back().event, "done");

  // Rungs by epochs (config.await_epochs; evaluations at each epoch's end): judged after
  // the first epoch (step 5), paused after the second (step 10), checkpointed there; the
  // resumed run starts the third epoch without evaluating the second again.
  const std::string by_epochs = FreshDir("await_epochs");
  TrainConfig e = TinyConfig(by_epochs);
  e.train.epochs = 4;
  e.checkpoint.every_steps = 0;
  e.await_epochs = {1, 2};
  e.judged_file = by_epochs + "/judged-step";
  ExpectStopsAtRung(e, 5, 10);
  MemoryProgressSink resumed;
  e.await_epochs.clear();
  ASSERT_EQ(RunTraining(e, RankInfo{}, resumed), kExitOk);
  EXPECT_EQ(resumed.records.front().Number("resumed_step"), 10);
  for (const auto& r : resumed.records)
    if (r.event == "eval") EXPECT_GT(r.Number("step"), 10) << "the second epoch evaluated again";
}

// Two ranks at a rung (threads of this process: one stop flag, as both workers' SIGTERMs
// would be): judged at step 2, both go on; paused at step 6 while both wait, they agree on
// the stop (one all-reduce), save step 6 together and end there.
TEST(TrainTest, TwoRanksWaitAtARungAndStopThereTogether) {
  const std::string dir = FreshDir("await_ranks");
  TrainConfig c = TinyConfig(dir);
  c.train.epochs = 3;
  c.eval_every_steps = 2;
  c.checkpoint.every_steps = 0;
  c.await_steps = {2, 6};
  c.judged_file = dir + "/judged-step";
  c.data_parallel.world_size = 2;
  c.data_parallel.timeout_seconds = 60;
  const int port = testing::FreePort();
  std::vector<int> exit_codes(2, -1);
  std::vector<std::vector<double>> checkpoints(2);
  std::vector<double> last_steps(2);
  {
    RungWorker rank0(c.judged_file, 2, 6), rank1(c.judged_file, 2, -1);
    testing::RunRanks(2, [&](int r) {
      exit_codes[r] = RunTraining(c, testing::LoopbackRank(r, 2, port), r == 0 ? rank0 : rank1);
    });
    for (int r = 0; r < 2; ++r) {
      const RungWorker& w = r == 0 ? rank0 : rank1;
      checkpoints[r] = w.Checkpoints();
      last_steps[r] = w.LastStep();
      EXPECT_FALSE(w.Waited()) << r;
    }
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(exit_codes[r], kExitStopped) << r;
    EXPECT_LE(last_steps[r], 6) << r;
  }
  EXPECT_EQ(checkpoints[0], std::vector<double>{6});  // rank 0 writes the shared folder
}

TEST(TrainTest, UnsupportedSettingsFailWithAnErrorEvent) {
  TrainConfig c = TinyConfig(FreshDir("unsupported"));
  RankInfo two;
  two.world_size = 2;
  MemoryProgressSink p1;
  EXPECT_EQ(RunTraining(c, two, p1), kExitError);
  ASSERT_EQ(p1.records.back().event, "error");
  // Two ranks without a rendezvous address: the message says what is missing.
  EXPECT_EQ(p1.records.back().String("message"),
            "process group: MASTER_PORT is required when WORLD_SIZE > 1");

  c.train.precision = "fp16";  // no fp16 autocast on the CPU
  MemoryProgressSink p2;
  EXPECT_EQ(RunTraining(c, RankInfo{}, p2), kExitError);
  EXPECT_NE(p2.records.back().String("message").find("fp16 needs a CUDA device"), std::string::npos);

  c.train.precision = "fp32";
  if (!torch::cuda::is_available()) {  // a GPU job on a machine without one: refused, no crash
    c.device = "cuda";
    MemoryProgressSink p4;
    EXPECT_EQ(RunTraining(c, RankInfo{}, p4), kExitError);
    EXPECT_NE(p4.records.back().String("message").find("spec.resources.device is cuda"), std::string::npos)
        << p4.records.back().String("message");
    c.device = "auto";
  }
  c.data.train_shard = "/nonexistent/train.shard";
  MemoryProgressSink p3;
  EXPECT_EQ(RunTraining(c, RankInfo{}, p3), kExitError);
  EXPECT_NE(p3.records.back().String("message").find("/nonexistent/train.shard"), std::string::npos);
}

TEST(ProgressSinkTest, WritesOneParseableLinePerEvent) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  FdProgressSink sink(fds[1]);
  sink.Emit(format::ProgressRecord{"step", {{"step", 3}, {"loss", 0.5}}, {}});
  sink.Emit(format::ProgressRecord{"warning", {}, {{"message", "a \"quoted\"\nline"}}});
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) text.append(buf, n);
  close(fds[0]);
  ASSERT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
  format::ProgressRecord r;
  ASSERT_EQ(format::ParseProgressLine(text.substr(0, text.find('\n')), &r), "");
  EXPECT_EQ(r.event, "step");
  EXPECT_EQ(r.Number("step"), 3);
}

TEST(ProgressSinkTest, DescriptorFromTheEnvironment) {
  int fd = 0;
  unsetenv("NIGHTSHIFT_PROGRESS_FD");
  EXPECT_EQ(ProgressFdFromEnv(&fd), "");
  EXPECT_EQ(fd, 1);
  setenv("NIGHTSHIFT_PROGRESS_FD", "none", 1);
  EXPECT_EQ(ProgressFdFromEnv(&fd), "");
  EXPECT_EQ(fd, -1);
  setenv("NIGHTSHIFT_PROGRESS_FD", "2", 1);
  EXPECT_EQ(ProgressFdFromEnv(&fd), "");
  EXPECT_EQ(fd, 2);
  setenv("NIGHTSHIFT_PROGRESS_FD", "x7", 1);
  EXPECT_NE(ProgressFdFromEnv(&fd).find("not a file descriptor number"), std::string::npos);
  unsetenv("NIGHTSHIFT_PROGRESS_FD");

  // No reporting: a run emits no step records (the loop builds none).
  TrainConfig c = TinyConfig(FreshDir("no_steps"));
  c.train.max_steps = 3;
  struct Counting : NullProgressSink {
    void Emit(const format::ProgressRecord& r) override { events.push_back(r.event); }
    std::vector<std::string> events;
  } sink;
  ASSERT_EQ(RunTraining(c, RankInfo{}, sink), kExitOk);
  EXPECT_EQ(std::count(sink.events.begin(), sink.events.end(), "step"), 0);
  EXPECT_EQ(sink.events.back(), "done");
}

}  // namespace
}  // namespace nightshift::trainer
