// Sweeps end to end (issue 45): an ASHA sweep of 8 trials (each a real job fine-tuning a
// small BERT folder that transformers saves here, tests/support/hf_folders.py, on the
// SpamAssassin corpus) through the CLI, the coordinator SIGKILLed mid-sweep and restarted: the
// losing trials stop at their rungs (paused, then stopped, their jobs CANCELLED before
// max_steps, checkpointed at the rung's step), a promoted trial resumes from its checkpoint without recomputing a step,
// no trial is made twice, and the best trial's model downloads.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "tests/e2e/cluster.h"

namespace nightshift::testing_e2e {
namespace {

using json = nlohmann::json;

constexpr int kMaxSteps = 400, kTrials = 8;
const std::string kSource = NIGHTSHIFT_SOURCE_DIR;
const std::string kCorpus = kSource + "/data/spamassassin";

// A BERT of 2 layers of width 32 with a WordPiece tokenizer trained on the corpus, in
// `dir`/bert, readable by the user a root worker runs jobs as.
std::string BertFolder(const std::string& dir) {
  std::string out;
  const std::string cmd = std::string(NIGHTSHIFT_PYTHON) + " " + kSource + "/tests/support/hf_folders.py " + dir +
                          " " + kCorpus + " --kinds bert --labels ham,spam";
  EXPECT_EQ(Cluster::Shell(cmd, &out), 0) << cmd << "\n" << out;
  EXPECT_EQ(Cluster::Shell("chmod -R a+rX " + dir, &out), 0) << out;
  return dir + "/bert";
}

json Sweep(Cluster& cluster, const std::string& id) {
  std::string out;
  if (cluster.Cli({"-o", "json", "sweep", "describe", id}, &out) != 0) return nullptr;
  return json::parse(out, nullptr, false);
}

TEST(SweepE2E, AshaStopsTheLosersAtTheirRungsResumesPromotedTrialsAndSurvivesACoordinatorKill) {
  if (!fs::exists(kCorpus + "/ham")) GTEST_SKIP() << "no corpus at " << kCorpus << ": run scripts/fetch-data.sh";
  Cluster cluster("sweep");
  const std::string models = cluster.dir() + "/models";
  const std::string bert = BertFolder(models);
  ASSERT_TRUE(fs::exists(bert + "/config.json"));
  cluster.StartCoordinator({"--sweep-poll-seconds", "0.3"});
  cluster.StartWorker("w1", 2, {}, {"--data-root", kCorpus, "--data-root", models});
  std::ofstream(cluster.dir() + "/base.yaml")
      << "model: {pretrained: " << bert << ", max_len: 48}\n"
         "data: {path: " << kCorpus << ", max_samples: 400}\n"
         "train: {epochs: 500, max_steps: " << kMaxSteps << ", batching: {batch_size: 32}, threads: 1}\n";
  std::ofstream(cluster.dir() + "/sweep.yaml")
      << "name: lr\n"
         "base: base.yaml\n"
         "search:\n"
         "  train.lr: {log_uniform: [1.0e-5, 3.0e-2]}\n"
         "method: asha\n"
         "metric: val_loss\n"
         "max_trials: " << kTrials << "\n"
         "parallelism: 1\n"
         "seed: 7\n"
         "asha: {min_steps: 50, reduction_factor: 2}\n";
  std::string out;
  ASSERT_EQ(cluster.Cli({"sweep", "submit", cluster.dir() + "/sweep.yaml"}, &out), 0) << out;
  const std::string id = out.substr(0, out.find('\n'));
  ASSERT_EQ(id, "s-000001");

  // Mid-sweep (a third of the trials made, one of them paused or past a rung), the
  // coordinator is killed and comes back on its port.
  json sweep;
  for (int i = 0; i < 1200; ++i) {
    sweep = Sweep(cluster, id);
    if (!sweep.is_null() && sweep.value("trials", json::array()).size() >= 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GE(sweep.value("trials", json::array()).size(), 3u) << sweep.dump();
  cluster.coordinator().Kill(SIGKILL);
  cluster.StartCoordinator({"--sweep-poll-seconds", "0.3"}, /*same_port=*/true);

  for (int i = 0; i < 3000; ++i) {
    sweep = Sweep(cluster, id);
    if (!sweep.is_null() && sweep["state"] == "SUCCEEDED") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(sweep["state"], "SUCCEEDED") << sweep.dump(1);
  ASSERT_EQ(sweep["trials"].size(), static_cast<size_t>(kTrials));

  // No trial made twice: exactly 8 jobs in the cluster, one per trial.
  v1::ListJobsResponse jobs;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(cluster.jobs()->ListJobs(&ctx, v1::ListJobsRequest(), &jobs).ok());
  }
  ASSERT_EQ(jobs.jobs_size(), kTrials);
  std::set<std::string> trial_jobs;
  for (const json& t : sweep["trials"]) trial_jobs.insert(t["job_id"]);
  EXPECT_EQ(trial_jobs.size(), static_cast<size_t>(kTrials));
  for (const v1::Job& j : jobs.jobs()) {
    EXPECT_TRUE(trial_jobs.count(j.id())) << j.id();
    EXPECT_EQ(j.sweep_id(), id);
  }

  // Losers stop at their rungs: their jobs end CANCELLED short of max_steps, after an
  // event naming the rung, the value and the cut-off.
  int stopped = 0, promoted = 0, resumed = 0;
  int64_t trial_steps = 0;
  for (const json& t : sweep["trials"]) {
    v1::Job job;
    ASSERT_TRUE(cluster.Get(t["job_id"], &job).ok());
    trial_steps += job.progress().step();
    if (t["state"] == "TRIAL_STOPPED") {
      ++stopped;
      EXPECT_EQ(job.state(), v1::CANCELLED) << job.id();
      EXPECT_LT(job.progress().step(), kMaxSteps) << job.id();
      EXPECT_NE(job.reason().find("stopped at rung"), std::string::npos) << job.reason();
      // Its ranks waited at the rung for the judgement (Job.await_steps): no step past the
      // rung's was trained, and no checkpoint is past it (the pause's is of that step; an
      // earlier pause's stays the job's when the sweep's end cancelled it before this
      // pause's checkpoint was taken in: a promoted trial stopped at its next rung).
      const int64_t rung_step = int64_t{50} << t.value("rung", 0);
      v1::JobMetrics m;
      grpc::ClientContext ctx;
      v1::GetJobMetricsRequest req;
      req.set_id(job.id());
      ASSERT_TRUE(cluster.jobs()->GetJobMetrics(&ctx, req, &m).ok());
      int64_t furthest = 0;
      for (const v1::AttemptMetrics& a : m.attempts())
        for (const auto& p : a.train()) furthest = std::max(furthest, p.step());
      EXPECT_LE(furthest, rung_step) << job.id() << " trained past its rung";
      EXPECT_LE(job.checkpoint_step(), rung_step) << job.id() << " paused past its rung";
    } else {
      EXPECT_EQ(t["state"], "TRIAL_COMPLETED") << t.dump();
      EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.id() << " " << job.reason();
    }
    if (t.value("promotions", 0) == 0) continue;
    ++promoted;
    // Promoted: every attempt that trained after a pause starts past every step the ones
    // before it trained (it resumed from the checkpoint its stop wrote).
    v1::JobMetrics m;
    grpc::ClientContext ctx;
    v1::GetJobMetricsRequest req;
    req.set_id(job.id());
    ASSERT_TRUE(cluster.jobs()->GetJobMetrics(&ctx, req, &m).ok());
    std::string history;
    for (const v1::JobEvent& e : job.events())
      history += v1::JobState_Name(e.state()) + " attempt " + std::to_string(e.attempt()) + " step " +
                 std::to_string(e.step()) + ": " + e.reason() + "\n";
    int64_t trained_up_to = 0;
    for (const v1::AttemptMetrics& a : m.attempts()) {
      if (a.train_size() == 0) continue;
      if (trained_up_to > 0) {
        ++resumed;
        EXPECT_GT(a.train(0).step(), trained_up_to) << job.id() << ": attempt " << a.attempt() << " recomputed steps\n"
                                                    << history;
      }
      trained_up_to = a.train(a.train_size() - 1).step();
    }
  }
  EXPECT_GE(stopped, 1) << sweep.dump(1);
  // Seed 7, one trial at a time: trial 2 goes past rung 0, is paused at rung 1 and is
  // promoted once enough trials reached that rung (measured; every run of the trials is
  // deterministic, one thread each, so the decisions are too).
  EXPECT_GE(promoted, 1) << sweep.dump(1);
  std::string events;
  for (const json& e : sweep["events"]) events += e["text"].get<std::string>() + "\n";
  EXPECT_NE(events.find("paused at rung 0 (step 50, val_loss "), std::string::npos) << events;
  EXPECT_NE(events.find("cut-off"), std::string::npos) << events;
  std::printf("sweep: %d stopped, %d promoted, %d attempts resumed, %lld trial-steps of %d for a full grid\n%s", stopped, promoted,
              resumed, static_cast<long long>(trial_steps), kTrials * kMaxSteps, events.c_str());

  // The best trial's model downloads.
  const std::string best = sweep["best_job_id"];
  ASSERT_TRUE(trial_jobs.count(best));
  ASSERT_EQ(cluster.Cli({"job", "artifacts", best, "--output", cluster.dir() + "/best"}, &out), 0) << out;
  EXPECT_TRUE(fs::exists(cluster.dir() + "/best/config.json")) << out;
}

}  // namespace
}  // namespace nightshift::testing_e2e
