// A worker partitioned mid-job, on real (namespaced) hosts with a shared checkpoint
// root: host 0 runs the coordinator (lease 5 s), hosts 1 and 2 a one-slot worker each.
// A world_size 1 job runs; once it has a checkpoint, the link of the host running it is
// cut for 45 s. The coordinator declares that worker lost and restarts the job on the
// other one (attempt 1), while the cut-off trainer (attempt 0, the "zombie") keeps going
// on the same shared folder until its next checkpoint finds the folder claimed ("fenced
// by attempt 1") or, after the heal, the coordinator tells its worker to stop it.
//
// What it asserts:
//   - the job SUCCEEDS, once (one SUCCEEDED event), after exactly one restart;
//   - attempt 1 runs on the other worker and resumed from the newest attempt-0 checkpoint
//     committed before its claim (FENCE = 1), as its "attempt 1 resumed from step S" event says;
//   - fencing: no attempt-0 checkpoint commits (COMPLETE written) after attempt 1's claim,
//     save at most one inside the check-then-rename window (a COMPLETE within 1 s of the
//     claim; see worker/trainer/checkpoint/checkpoint.h). Every checkpoint directory that ever held
//     COMPLETE is watched while the test runs, since later saves prune old ones;
//   - the old attempt's trainer is gone at most 15 s after the heal (it may well be gone
//     before: fenced at its first checkpoint after the claim; which one is printed);
//   - redone steps = (attempt 0's last progress step reported before the cut) - S is at
//     most one checkpoint interval (negative when the cut-off trainer committed newer
//     checkpoints before the claim, which attempt 1 then resumed from).
// Two cases: the old trainer left running (it is fenced at its first checkpoint after the
// claim, seconds after the cut), and the old trainer also SIGSTOPped at the cut (it writes
// nothing, so only the coordinator's stop order after the heal can remove it; the worker
// sends SIGCONT after the SIGTERM, so it goes at once).
// A third case cuts the coordinator's host from every worker for 90 s instead: nobody is
// declared lost, and the job ends SUCCEEDED as attempt 0. More run a world_size 2 job
// across hosts: one host cut from its peer mid-job, a slow and lossy link, and workers
// without shared storage losing a rank and then rank 0's whole worker; and a one-rank
// job's worker killed without shared storage resumes from the copy on the other.
// The test process stays outside the hosts: it reads the job with `nightshift job
// describe -o json` run inside the coordinator's host, and the checkpoints on the
// shared disk directly.
#include <gtest/gtest.h>
#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/format/checkpoint_layout.h"
#include "tests/common/test_hosts.h"
#include "tests/e2e/cluster.h"

namespace nightshift::testing_e2e {
namespace {

constexpr int kCoordinatorHost = 0;
constexpr int kCheckpointEvery = 50;
constexpr int kMaxSteps = 4000;
constexpr int kPartitionSeconds = 45;
constexpr int kStaleGoneSeconds = 15;

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// `world_size` ranks; above 1 they give up on a silent peer after `timeout_seconds`.
std::string Spec(const std::string& data, int max_steps = kMaxSteps, int world_size = 1, int timeout_seconds = 300) {
  return "name: e2e-partition\n"
         "model: {arch: transformer_classifier, layers: 2, d_model: 64, heads: 2, ffn: 128, max_len: 48}\n"
         "data: {format: text_dir, path: " + data + ", validation_fraction: 0.2, tokenizer: {vocab_size: 64}}\n"
         "train: {epochs: 1000, max_steps: " + std::to_string(max_steps) +
         ", lr: 0.003, warmup_steps: 2, seed: 7, batching: {batch_size: 16}, threads: 1}\n"
         "resources: {world_size: " + std::to_string(world_size) + ", timeout_seconds: " +
         std::to_string(timeout_seconds) + "}\n"
         "checkpoint: {every_steps: " + std::to_string(kCheckpointEvery) + ", keep_last: 3}\n"
         "restart: {max_restarts: 2}\n";
}

int64_t MtimeNs(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// Alive and still the trainer we mean (not reaped-and-gone, not a zombie, not a reused pid).
bool TrainerAlive(pid_t pid, const std::string& needle) {
  const std::string cmdline = ReadAll("/proc/" + std::to_string(pid) + "/cmdline");
  return cmdline.find(needle) != std::string::npos;
}

// One committed checkpoint as seen on the shared disk.
struct Seen {
  int attempt = -1;
  int64_t complete_ns = -1;  // COMPLETE's mtime
};

// Watches <root>/step-*/: every checkpoint that holds COMPLETE, keyed by (step, COMPLETE's
// mtime) so that a directory removed and written again counts twice.
class CheckpointWatcher {
 public:
  explicit CheckpointWatcher(std::string root) : root_(std::move(root)), thread_([this] { Loop(); }) {}
  ~CheckpointWatcher() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::map<std::pair<int64_t, int64_t>, Seen> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  void Loop() {
    while (!stop_) {
      Scan();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    Scan();
  }
  void Scan() {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root_, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("step-", 0) != 0) continue;
      const int64_t ns = MtimeNs((e.path() / "COMPLETE").string());
      if (ns < 0) continue;
      const int64_t step = std::atoll(name.c_str() + 5);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (seen_.count({step, ns})) continue;
      }
      const std::string manifest = ReadAll((e.path() / "manifest.json").string());
      const size_t at = manifest.find("\"attempt\"");
      if (at == std::string::npos) continue;  // being replaced; the next scan sees it
      Seen s;
      s.attempt = std::atoi(manifest.c_str() + manifest.find(':', at) + 1);
      s.complete_ns = ns;
      std::lock_guard<std::mutex> lock(mu_);
      seen_[{step, ns}] = s;
    }
  }

  const std::string root_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<std::pair<int64_t, int64_t>, Seen> seen_;
  std::thread thread_;
};

class PartitionE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    hosts_ = testing::TestHosts::Make(3, &why);
    if (hosts_ == nullptr) GTEST_SKIP() << why;
  }

  // The job as the coordinator has it, through the CLI in the coordinator's host.
  static bool Describe(Cluster& cluster, const std::string& id, v1::Job* job) {
    std::string out;
    if (cluster.Cli({"job", "describe", id, "-o", "json"}, &out, kCoordinatorHost) != 0) return false;
    const size_t begin = out.find('{'), end = out.rfind('}');
    if (begin == std::string::npos || end == std::string::npos) return false;
    google::protobuf::util::JsonParseOptions o;
    o.ignore_unknown_fields = true;
    v1::Job parsed;
    if (!google::protobuf::util::JsonStringToMessage(out.substr(begin, end - begin + 1), &parsed, o).ok())
      return false;
    *job = parsed;
    return true;
  }

  // Submits `yaml` with the CLI in the coordinator's host; the job id, or what it printed.
  static std::string Submit(Cluster& cluster, const std::string& yaml) {
    const std::string spec = cluster.dir() + "/job.yaml";
    std::ofstream(spec) << yaml;
    std::string out, id;
    if (cluster.Cli({"job", "submit", spec}, &out, kCoordinatorHost) != 0) return out;
    for (std::istringstream lines(out); std::getline(lines, out);)
      if (!out.empty()) id = out;
    return id;
  }

  template <typename Pred>
  static v1::Job WaitFor(Cluster& cluster, const std::string& id, double seconds, Pred done) {
    v1::Job job;
    const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    while (Clock::now() < deadline) {
      if (Describe(cluster, id, &job) && done(job)) return job;
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
    }
    return job;
  }

  void Run(bool freeze_old_trainer);

  std::unique_ptr<testing::TestHosts> hosts_;
};

// The whole scenario. `freeze_old_trainer`: the old trainer is also SIGSTOPped at the
// cut (a trainer that writes no checkpoint before the link comes back), so fencing at a
// checkpoint cannot remove it: only the coordinator's stop order after the heal can.
void PartitionE2eTest::Run(bool freeze_old_trainer) {
  Cluster cluster(freeze_old_trainer ? "partition-frozen" : "partition");
  cluster.UseHosts(hosts_.get(), kCoordinatorHost);
  const std::string data = cluster.MakeData(150);
  cluster.StartCoordinator();  // --lease-seconds 5 (Cluster's default)
  const std::vector<std::string> names = {"w1", "w2"};
  for (int i = 0; i < 2; ++i) cluster.StartWorker(names[i], 1, {}, {}, /*host=*/i + 1);

  const std::string id = Submit(cluster, Spec(data));
  ASSERT_EQ(id.rfind("j-", 0), 0u) << id;
  CheckpointWatcher watcher(cluster.dir() + "/checkpoints/" + id);

  // Running with a checkpoint: cut the host that runs it.
  v1::Job job = WaitFor(cluster, id, 60, [](const v1::Job& j) {
    return IsTerminal(j.state()) || (j.state() == v1::RUNNING && j.checkpoint_step() >= kCheckpointEvery &&
                                     j.progress().step() > kCheckpointEvery);
  });
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason() << " (finished before the cut? make the job longer)";
  ASSERT_EQ(job.attempt(), 0);
  ASSERT_EQ(job.placements_size(), 1);
  const std::string old_worker = job.placements(0).worker();
  const int old_host = old_worker == "w1" ? 1 : 2;
  const std::string attempt0 = cluster.dir() + "/" + old_worker + "/jobs/" + id + "/attempt-0/";
  const pid_t zombie = Cluster::FindProcess({"nightshift-trainer", attempt0});
  ASSERT_GT(zombie, 0) << "no trainer under " << attempt0;
  ASSERT_TRUE(hosts_->Cut(old_host).ok());
  const auto cut_at = Clock::now();
  if (freeze_old_trainer) ASSERT_EQ(::kill(zombie, SIGSTOP), 0);
  const int64_t step_before_cut = job.progress().step();

  // The old trainer, watched from the cut on: when it goes, whatever stops it.
  std::atomic<bool> stop_watch{false};
  std::atomic<double> zombie_gone_at{-1};  // seconds after the cut
  std::thread zombie_watch([&] {
    while (!stop_watch && TrainerAlive(zombie, attempt0)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!TrainerAlive(zombie, attempt0)) zombie_gone_at = SecondsSince(cut_at);
  });
  // However this test ends: the watch joined, the old trainer never left behind (it would
  // keep its host's namespace alive).
  struct Guard {
    std::function<void()> f;
    ~Guard() { f(); }
  } guard{[&] {
    stop_watch = true;
    if (zombie_watch.joinable()) zombie_watch.join();
    if (TrainerAlive(zombie, attempt0)) ::kill(zombie, SIGKILL);
  }};

  // Restarted on the other worker.
  job = WaitFor(cluster, id, kPartitionSeconds - 5, [&](const v1::Job& j) {
    return IsTerminal(j.state()) || (j.state() == v1::RUNNING && j.attempt() >= 1);
  });
  const double to_running_elsewhere = SecondsSince(cut_at);
  EXPECT_EQ(job.state(), v1::RUNNING) << job.reason();
  EXPECT_EQ(job.attempt(), 1);
  ASSERT_EQ(job.placements_size(), 1);
  EXPECT_NE(job.placements(0).worker(), old_worker);

  // The link stays down for 45 s in all, then comes back.
  std::this_thread::sleep_until(cut_at + std::chrono::seconds(kPartitionSeconds));
  ASSERT_TRUE(hosts_->Heal(old_host).ok());
  const auto healed_at = Clock::now();
  v1::Job at_heal;
  Describe(cluster, id, &at_heal);
  const double healed_after = SecondsSince(cut_at);
  // The old worker's "stopping <job> attempt 0" line: when the coordinator's stop order came.
  const std::string worker_log = cluster.dir() + "/" + old_worker + ".log";
  const std::string stop_line = "stopping " + id + " attempt 0";
  double stop_order_after_heal = -1;
  while (TrainerAlive(zombie, attempt0) && SecondsSince(healed_at) < kStaleGoneSeconds + 5) {
    if (stop_order_after_heal < 0 && ReadAll(worker_log).find(stop_line) != std::string::npos)
      stop_order_after_heal = SecondsSince(healed_at);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop_watch = true;
  zombie_watch.join();
  const bool zombie_alive = TrainerAlive(zombie, attempt0);
  const double gone_after_cut = zombie_gone_at.load();
  const bool gone_before_heal = gone_after_cut >= 0 && gone_after_cut <= healed_after;
  const double heal_to_gone = gone_after_cut < 0 ? -1 : std::max(0.0, gone_after_cut - healed_after);
  EXPECT_FALSE(zombie_alive) << "attempt 0's trainer (pid " << zombie << ") still runs "
                             << SecondsSince(healed_at) << " s after the heal";
  EXPECT_LE(heal_to_gone, kStaleGoneSeconds) << "stale rank stopped too late after the heal";
  const std::string zombie_log = ReadAll(attempt0 + "rank-0.log");
  const bool fenced = zombie_log.find("fenced by attempt 1") != std::string::npos;

  // Succeeds, once.
  job = WaitFor(cluster, id, 90, [](const v1::Job& j) { return IsTerminal(j.state()); });
  watcher.Stop();
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << " / " << job.error();
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.restarts(), 1);
  int succeeded = 0;
  int64_t resumed = -1;
  std::string events;
  for (const auto& e : job.events()) {
    events += v1::JobState_Name(e.state()) + "@" + std::to_string(e.attempt()) + ":" + std::to_string(e.step()) + " ";
    if (e.state() == v1::SUCCEEDED) ++succeeded;
    if (e.attempt() == 1 && e.reason().rfind("attempt 1 resumed from step", 0) == 0) resumed = e.step();
  }
  EXPECT_EQ(succeeded, 1) << events;
  ASSERT_GT(resumed, 0) << "no \"attempt 1 resumed from step\" event: " << events;

  // Fencing, on the shared disk.
  const std::string fence_path = cluster.dir() + "/checkpoints/" + id + "/FENCE";
  EXPECT_EQ(ReadAll(fence_path), "1\n");
  const int64_t claim_ns = MtimeNs(fence_path);  // attempt 1's claim (FENCE written once since)
  int64_t newest_before_claim = -1;
  int late = 0, attempt0_commits = 0;
  int64_t late_step = -1;  // one that committed in the window, which attempt 1 may have loaded
  for (const auto& [key, s] : watcher.seen()) {
    if (s.attempt != 0) continue;
    ++attempt0_commits;
    if (s.complete_ns < claim_ns) {
      newest_before_claim = std::max(newest_before_claim, key.first);
    } else {
      ++late;
      late_step = key.first;
      EXPECT_LT(s.complete_ns - claim_ns, 1000000000LL)
          << "attempt 0 committed step " << key.first << " well after attempt 1 claimed the folder";
    }
  }
  EXPECT_LE(late, 1) << "attempt-0 checkpoints committed after attempt 1's claim";
  EXPECT_TRUE(resumed == newest_before_claim || resumed == late_step)
      << "attempt 1 resumed from step " << resumed << ", not from the newest checkpoint it may use (step "
      << newest_before_claim << ")";
  const int64_t redone = step_before_cut - resumed;
  EXPECT_LE(redone, kCheckpointEvery) << "redid more than one checkpoint interval";

  std::printf("recovery%s: cut->running elsewhere %.1f s; heal->stale ranks gone %.1f s (%s); redone steps %lld "
              "(step %lld reported before the cut, attempt 1 resumed from %lld); attempt-0 commits %d, after the "
              "claim %d; events %s\n",
              freeze_old_trainer ? " (old trainer frozen at the cut)" : "", to_running_elsewhere, heal_to_gone,
              gone_before_heal ? (fenced ? "gone before the heal: fenced by attempt 1" : "gone before the heal")
                               : (fenced ? "stopped after the heal; its log says fenced" : "stopped after the heal"),
              static_cast<long long>(redone), static_cast<long long>(step_before_cut),
              static_cast<long long>(resumed), attempt0_commits, late, events.c_str());
  if (stop_order_after_heal >= 0)
    std::printf("recovery: the old worker logged its stop order for attempt 0 %.1f s after the heal\n",
                stop_order_after_heal);
  std::printf("recovery: at the heal the job was %s, attempt %d at step %lld of %d\n",
              v1::JobState_Name(at_heal.state()).c_str(), at_heal.attempt(),
              static_cast<long long>(at_heal.progress().step()), kMaxSteps);
  if (gone_after_cut >= 0) std::printf("recovery: the old trainer went %.1f s after the cut\n", gone_after_cut);
}

TEST_F(PartitionE2eTest, CutWorkerIsFencedAndItsJobSucceedsOnceElsewhere) { Run(/*freeze_old_trainer=*/false); }

// The stale attempt's rank is alive but wrote nothing when the link comes back: its
// worker must stop it on the coordinator's word, within 15 s of the heal.
TEST_F(PartitionE2eTest, FrozenOldTrainerIsStoppedAfterTheHeal) { Run(/*freeze_old_trainer=*/true); }

// Issue 18: one rank's host cut from the other mid-step (DDP across two hosts, each
// worker with its own disk): both ranks fail within resources.timeout_seconds (the cut
// one cannot reach its peer either), the job restarts once the host is back, from the
// newest checkpoint (sent over the group to the rank that lacks it), and succeeds.
TEST_F(PartitionE2eTest, ARankCutFromItsPeerFailsBothWithinTheTimeoutAndTheJobResumes) {
  constexpr int kTimeoutSeconds = 10;
  Cluster cluster("ddp-cut");
  cluster.UseHosts(hosts_.get(), kCoordinatorHost);
  cluster.UseOwnDisks();
  const std::string data = cluster.MakeData(150);
  cluster.StartCoordinator();
  for (int i = 1; i <= 2; ++i)  // Gloo binds where the peer can reach it: the host's eth0
    cluster.StartWorker("w" + std::to_string(i), 1, {{"GLOO_SOCKET_IFNAME", "eth0"}}, {}, i);
  const std::string id = Submit(cluster, Spec(data, /*max_steps=*/400, /*world_size=*/2, kTimeoutSeconds));
  ASSERT_EQ(id.rfind("j-", 0), 0u) << id;

  v1::Job job = WaitFor(cluster, id, 90, [](const v1::Job& j) {
    return IsTerminal(j.state()) || (j.state() == v1::RUNNING && j.checkpoint_step() >= kCheckpointEvery);
  });
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason() << " / " << job.error();
  std::vector<pid_t> ranks;
  std::vector<std::string> needles;
  for (const char* w : {"w1", "w2"}) {
    needles.push_back(cluster.dir() + "/" + w + "/jobs/" + id + "/attempt-0/");
    ranks.push_back(Cluster::FindProcess({"nightshift-trainer", needles.back()}));
    ASSERT_GT(ranks.back(), 0) << "no trainer under " << needles.back();
  }
  ASSERT_TRUE(hosts_->Cut(2).ok());
  const auto cut_at = Clock::now();
  std::vector<double> gone(2, -1);
  while (SecondsSince(cut_at) < 3 * kTimeoutSeconds && (gone[0] < 0 || gone[1] < 0)) {
    for (int r = 0; r < 2; ++r)
      if (gone[r] < 0 && !TrainerAlive(ranks[r], needles[r])) gone[r] = SecondsSince(cut_at);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(hosts_->Heal(2).ok());
  for (int r = 0; r < 2; ++r) {
    if (gone[r] < 0) ::kill(ranks[r], SIGKILL);  // not left behind
    EXPECT_GE(gone[r], 0) << "the trainer on w" << r + 1 << " outlived the cut by " << 3 * kTimeoutSeconds << " s";
    EXPECT_LE(gone[r], kTimeoutSeconds + 5) << "w" << r + 1;
  }

  job = WaitFor(cluster, id, 150, [](const v1::Job& j) { return IsTerminal(j.state()); });
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << " / " << job.error();
  EXPECT_GE(job.attempt(), 1);
  int64_t resumed = -1;
  for (const auto& ev : job.events())
    if (ev.attempt() == job.attempt() && ev.reason().find(" resumed from step ") != std::string::npos) resumed = ev.step();
  EXPECT_GE(resumed, kCheckpointEvery) << "the new attempt did not resume from a checkpoint";
  std::printf("recovery (rank cut from its peer): ranks gone %.1f s and %.1f s after the cut (timeout %d s); "
              "attempt %d resumed from step %lld and SUCCEEDED\n",
              gone[0], gone[1], kTimeoutSeconds, job.attempt(), static_cast<long long>(resumed));
}

// The step attempt `attempt` resumed from, as the job's events say (-1: none yet).
int64_t ResumedStep(const v1::Job& job, int attempt) {
  for (const auto& ev : job.events())
    if (ev.attempt() == attempt && ev.reason().rfind("attempt " + std::to_string(attempt) + " resumed from step", 0) == 0)
      return ev.step();
  return -1;
}

std::string WorkerOfRank(const v1::Job& job, int rank) {
  for (const auto& p : job.placements())
    if (rank >= p.first_rank() && rank < p.first_rank() + p.num_ranks()) return p.worker();
  return "";
}

// The job's exported weights (model.safetensors of its final model folder, on the disk
// of the worker that wrote it).
std::string FinalWeights(Cluster& cluster, const v1::Job& job) {
  return ReadAll(cluster.dir() + "/" + job.model().worker() + "/checkpoints/" + job.id() + "/model/model.safetensors");
}

// No shared storage, a one-rank job on one of two worker hosts. The coordinator has the
// other worker copy each checkpoint from it (across the hosts' network); killing the
// job's worker (its trainer dies with it) resumes the job there from that copy, which is
// the newest checkpoint the killed worker had: nothing past one interval is redone.
TEST_F(PartitionE2eTest, AOneRankJobsWorkerKilledWithoutSharedStorageResumesFromTheCopy) {
  Cluster cluster("copy");
  cluster.UseHosts(hosts_.get(), kCoordinatorHost);
  cluster.UseOwnDisks();
  const std::string data = cluster.MakeData(60);
  cluster.StartCoordinator();
  for (int i = 1; i <= 2; ++i) cluster.StartWorker("w" + std::to_string(i), 1, {}, {}, i);
  // Checkpoints every 3 s: longer than a copy takes (a heartbeat, the holder's rescan, the
  // transfer). 6000 steps: still running after a few intervals where a step takes 2 ms
  // (1500 ended before its first copy there), about a minute where it takes 10 ms.
  const std::string id = Submit(
      cluster, "name: e2e-copy\n"
               "model: {arch: transformer_classifier, layers: 1, d_model: 32, heads: 2, ffn: 64, max_len: 32}\n"
               "data: {format: text_dir, path: " + data + ", validation_fraction: 0.2, tokenizer: {vocab_size: 64}}\n"
               "train: {epochs: 1000, max_steps: 6000, lr: 0.003, warmup_steps: 2, seed: 7, batching: {batch_size: 8}, threads: 1}\n"
               "checkpoint: {every_steps: 0, every_seconds: 3}\n"
               "restart: {max_restarts: 2}\n");
  ASSERT_EQ(id.rfind("j-", 0), 0u) << id;
  v1::Job job = WaitFor(cluster, id, 60, [](const v1::Job& j) { return IsTerminal(j.state()) || j.state() == v1::RUNNING; });
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  const std::string holder = job.placements(0).worker(), other = holder == "w1" ? "w2" : "w1";
  const std::string held_dir = cluster.dir() + "/" + holder + "/checkpoints/" + id;
  const std::string copy_dir = cluster.dir() + "/" + other + "/checkpoints/" + id;
  // Kill the holder right after the other worker has a copy of its newest checkpoint.
  int64_t copied = -1;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (copied < 0 && Clock::now() < deadline) {
    const std::vector<int64_t> held = format::CompleteSteps(held_dir), copies = format::CompleteSteps(copy_dir);
    if (!held.empty() && !copies.empty() && copies.back() == held.back()) copied = copies.back();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GT(copied, 0) << "no copy of " << held_dir << " reached " << other;
  const pid_t trainer = cluster.TrainerOf(id);
  cluster.worker(holder == "w1" ? 0 : 1).Kill(SIGKILL);
  if (trainer > 0) ::kill(trainer, SIGKILL);
  const auto killed = Clock::now();
  const int64_t newest_at_kill = format::CompleteSteps(held_dir).back();

  job = WaitFor(cluster, id, 60, [](const v1::Job& j) { return IsTerminal(j.state()) || ResumedStep(j, 1) >= 0; });
  const double back = SecondsSince(killed);
  job = WaitFor(cluster, id, 120, [](const v1::Job& j) { return IsTerminal(j.state()); });
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << " / " << job.error();
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.placements(0).worker(), other);
  EXPECT_EQ(ResumedStep(job, 1), copied) << "attempt 1 did not resume from the copy";
  EXPECT_EQ(ResumedStep(job, 1), newest_at_kill) << "the killed worker had a newer checkpoint than the copy";
  std::printf("recovery (one-rank job, worker killed, no shared storage): copy of step %lld on %s; resumed from "
              "step %lld %.1f s after the kill; final checkpoint %lld\n",
              static_cast<long long>(copied), other.c_str(), static_cast<long long>(ResumedStep(job, 1)), back,
              static_cast<long long>(job.checkpoint_step()));
}

// Data parallelism without shared storage: three one-slot workers, each with its own disk
// (w1 and w2 on hosts of their own, w3 beside the coordinator). An uninterrupted run
// first; then the same job with rank 1's trainer SIGKILLed, and later the whole worker of
// rank 0 (the daemon, and its trainer with it). Each time the job resumes from the newest
// checkpoint a surviving rank holds (every worker's first rank writes one; a new worker
// receives it over the process group), and it ends with the uninterrupted run's weights,
// bit for bit. A job larger than the cluster waits with its reason and blocks nobody.
TEST_F(PartitionE2eTest, DdpWithoutSharedStorageSurvivesARankKillAndTheLossOfRankZerosWorker) {
  Cluster cluster("ddp");
  cluster.UseHosts(hosts_.get(), kCoordinatorHost);
  cluster.UseOwnDisks();
  const std::string data = cluster.MakeData(150);
  // The default backoff (1 s): the restart after rank 0's worker died goes where it is
  // not, as the dead worker has been silent for more than two heartbeats by then.
  cluster.StartCoordinator({"--restart-backoff-seconds", "1"});
  const int host_of[3] = {1, 2, kCoordinatorHost};
  for (int i = 0; i < 3; ++i)  // Gloo binds where the peers can reach it: the host's eth0
    cluster.StartWorker("w" + std::to_string(i + 1), 1, {{"GLOO_SOCKET_IFNAME", "eth0"}}, {}, host_of[i]);
  const auto ddp = [&](int world_size) {
    return "name: e2e-ddp\n"
           "model: {arch: transformer_classifier, layers: 2, d_model: 64, heads: 2, ffn: 128, dropout: 0.1, max_len: 48}\n"
           "data: {format: text_dir, path: " + data + ", validation_fraction: 0.2, tokenizer: {vocab_size: 64}}\n"
           "train: {epochs: 200, max_steps: 120, lr: 0.003, warmup_steps: 5, seed: 7, batching: {batch_size: 16}, threads: 1}\n"
           "resources: {world_size: " + std::to_string(world_size) + ", timeout_seconds: 10, bucket_mb: 1}\n"
           "checkpoint: {every_steps: 10, keep_last: 2}\n"
           "restart: {max_restarts: 2}\n";
  };
  const std::string big = Submit(cluster, ddp(4));
  ASSERT_EQ(big.rfind("j-", 0), 0u) << big;
  const std::string reference_id = Submit(cluster, ddp(2));
  const v1::Job reference = WaitFor(cluster, reference_id, 300, [](const v1::Job& j) { return IsTerminal(j.state()); });
  ASSERT_EQ(reference.state(), v1::SUCCEEDED) << reference.reason() << " / " << reference.error();
  const std::string reference_weights = FinalWeights(cluster, reference);
  ASSERT_FALSE(reference_weights.empty());

  const std::string id = Submit(cluster, ddp(2));
  ASSERT_EQ(id.rfind("j-", 0), 0u) << id;
  // Running attempt `attempt` with a checkpoint of its own.
  const auto checkpointed = [](int attempt) {
    return [attempt](const v1::Job& j) {
      const int64_t past = attempt == 0 ? 0 : ResumedStep(j, attempt);
      return IsTerminal(j.state()) ||
             (j.state() == v1::RUNNING && j.attempt() == attempt && past >= 0 && j.checkpoint_step() > past);
    };
  };
  v1::Job job = WaitFor(cluster, id, 240, checkpointed(0));
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  ASSERT_EQ(job.placements_size(), 2) << "the 2 ranks should be on two workers";
  const std::string attempt0 = cluster.dir() + "/" + WorkerOfRank(job, 1) + "/jobs/" + id + "/attempt-0/";
  const pid_t victim = Cluster::FindProcess({"nightshift-trainer", attempt0});
  ASSERT_GT(victim, 0) << "no trainer under " << attempt0;
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const auto rank_killed = Clock::now();
  job = WaitFor(cluster, id, 60, [](const v1::Job& j) { return IsTerminal(j.state()) || ResumedStep(j, 1) >= 0; });
  const double to_resume1 = SecondsSince(rank_killed);
  ASSERT_GE(ResumedStep(job, 1), 10) << job.reason();  // its first checkpoint (every_steps 10)

  job = WaitFor(cluster, id, 240, checkpointed(1));
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  const int64_t checkpoint_at_kill = job.checkpoint_step();
  const std::string rank0 = WorkerOfRank(job, 0);
  const pid_t rank0_trainer = Cluster::FindProcess({"nightshift-trainer", cluster.dir() + "/" + rank0 + "/jobs/" + id});
  cluster.worker(static_cast<size_t>(rank0[1] - '1')).Kill(SIGKILL);
  if (rank0_trainer > 0) ::kill(rank0_trainer, SIGKILL);
  const auto worker_killed = Clock::now();
  job = WaitFor(cluster, id, 60, [](const v1::Job& j) { return IsTerminal(j.state()) || ResumedStep(j, 2) >= 0; });
  const double to_resume2 = SecondsSince(worker_killed);

  const v1::Job done = WaitFor(cluster, id, 300, [](const v1::Job& j) { return IsTerminal(j.state()); });
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << " / " << done.error();
  EXPECT_EQ(done.restarts(), 2) << "the restart after the worker loss went back to it";
  EXPECT_GE(ResumedStep(done, 2), checkpoint_at_kill) << "attempt 2 did not resume from the newest checkpoint";
  for (const auto& p : done.placements()) EXPECT_NE(p.worker(), rank0);
  EXPECT_EQ(done.checkpoint_step(), 120);
  const bool same = FinalWeights(cluster, done) == reference_weights;
  EXPECT_TRUE(same) << "the interrupted run's final weights differ from the uninterrupted run's";
  std::printf("recovery (DDP without shared storage): rank 1 killed -> attempt 1 resumed from step %lld %.1f s "
              "later; rank 0's worker %s killed at checkpoint %lld -> attempt 2 resumed from step %lld %.1f s later; "
              "SUCCEEDED with the uninterrupted run's weights: %s\n",
              static_cast<long long>(ResumedStep(done, 1)), to_resume1, rank0.c_str(),
              static_cast<long long>(checkpoint_at_kill), static_cast<long long>(ResumedStep(done, 2)), to_resume2,
              same ? "yes" : "no");

  v1::Job waiting;
  ASSERT_TRUE(Describe(cluster, big, &waiting));
  EXPECT_EQ(waiting.state(), v1::QUEUED);
  EXPECT_NE(waiting.reason().find("needs 4 slots; the cluster has"), std::string::npos) << waiting.reason();
}

// Data parallelism across a slow link: 200 ms added to everything host 2 sends, and 5%
// of it lost (netem, or the test hosts' user-space wire where the kernel has none). The
// worker there registers, heartbeats, streams its rank's log and joins the rendezvous
// over that link; the job succeeds as attempt 0 with no worker lost, and its weights are
// those of the same job on loopback, bit for bit.
TEST_F(PartitionE2eTest, DdpAcrossASlowLossyLinkEndsWithTheLoopbackWeights) {
  const std::string spec_text =
      "name: e2e-slow-link\n"
      "model: {arch: transformer_classifier, layers: 1, d_model: 16, heads: 2, ffn: 32, max_len: 32}\n"
      "data: {format: text_dir, path: DATA, validation_fraction: 0.2, tokenizer: {vocab_size: 64}}\n"
      "train: {epochs: 100, max_steps: 20, lr: 0.003, warmup_steps: 2, seed: 7, batching: {batch_size: 16}, threads: 1}\n"
      "resources: {world_size: 2, timeout_seconds: 60}\n"
      "checkpoint: {every_steps: 10, keep_last: 2}\n";
  const auto spec_for = [&](const std::string& data) {
    std::string yaml = spec_text;
    return yaml.replace(yaml.find("DATA"), 4, data);
  };
  std::string loopback_weights;
  {
    Cluster loopback("slow-link-reference");
    const std::string data = loopback.MakeData(60);
    loopback.StartCoordinator();
    loopback.UseOwnDisks();
    loopback.StartWorker("w1", 1);
    loopback.StartWorker("w2", 1);
    v1::Job job;
    ASSERT_TRUE(loopback.Submit(spec_for(data), &job).ok());
    job = loopback.WaitForEnd(job.id(), 120);
    ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << " / " << job.error();
    loopback_weights = FinalWeights(loopback, job);
    ASSERT_FALSE(loopback_weights.empty());
  }

  Cluster cluster("slow-link");
  cluster.UseHosts(hosts_.get(), kCoordinatorHost);
  cluster.UseOwnDisks();
  const std::string data = cluster.MakeData(60);
  ASSERT_TRUE(hosts_->Slow(2, 200, 5).ok());
  cluster.StartCoordinator();
  for (int i = 1; i <= 2; ++i) cluster.StartWorker("w" + std::to_string(i), 1, {{"GLOO_SOCKET_IFNAME", "eth0"}}, {}, i);
  const auto submitted = Clock::now();
  const std::string id = Submit(cluster, spec_for(data));
  ASSERT_EQ(id.rfind("j-", 0), 0u) << id;
  const v1::Job job = WaitFor(cluster, id, 300, [](const v1::Job& j) { return IsTerminal(j.state()); });
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << " / " << job.error();
  EXPECT_EQ(job.attempt(), 0);
  EXPECT_EQ(job.restarts(), 0);
  for (const auto& ev : job.events()) EXPECT_EQ(ev.reason().find("lost"), std::string::npos) << ev.reason();
  EXPECT_TRUE(FinalWeights(cluster, job) == loopback_weights) << "the weights differ from the loopback run's";

  // The slow host's rank log, relayed by the coordinator from its worker over that link.
  int slow_rank = -1;
  for (const auto& p : job.placements())
    if (p.worker() == "w2") slow_rank = p.first_rank();
  ASSERT_GE(slow_rank, 0);
  std::string log;
  EXPECT_EQ(cluster.Cli({"job", "logs", id, "--rank", std::to_string(slow_rank)}, &log, kCoordinatorHost), 0) << log;
  EXPECT_NE(log.find("done at step 20"), std::string::npos) << log;
  std::printf("slow link (200 ms, 5%% loss from w2's host): 20 DDP steps SUCCEEDED as attempt 0 in %.1f s after "
              "the submit, weights equal to the loopback run's\n",
              SecondsSince(submitted));
}

// Issue 18: a coordinator unreachable by every worker is not a partition of the workers.
// Its host is cut for 90 s mid-job (lease 5 s): the workers train on and keep what they
// would report (the job may finish meanwhile: its result waits for the heal), the
// coordinator declares nobody lost (--outage-grace-seconds, 600 by default), and the job
// ends SUCCEEDED as attempt 0, without a restart.
TEST_F(PartitionE2eTest, ACoordinatorCutFromEveryWorkerCostsTheJobNothing) {
  constexpr int kOutageSeconds = 90;
  Cluster cluster("coordinator-outage");
  cluster.UseHosts(hosts_.get(), kCoordinatorHost);
  const std::string data = cluster.MakeData(150);
  cluster.StartCoordinator();
  cluster.StartWorker("w1", 1, {}, {}, /*host=*/1);
  cluster.StartWorker("w2", 1, {}, {}, /*host=*/2);
  const std::string id = Submit(cluster, Spec(data));
  ASSERT_EQ(id.rfind("j-", 0), 0u) << id;

  v1::Job job = WaitFor(cluster, id, 60, [](const v1::Job& j) {
    return IsTerminal(j.state()) || (j.state() == v1::RUNNING && j.progress().step() > 0);
  });
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  const int64_t step_at_cut = job.progress().step();
  ASSERT_TRUE(hosts_->Cut(kCoordinatorHost).ok());
  const auto cut_at = Clock::now();
  std::this_thread::sleep_until(cut_at + std::chrono::seconds(kOutageSeconds * 2 / 3));
  ASSERT_TRUE(Describe(cluster, id, &job));  // the coordinator answers in its own host
  EXPECT_EQ(job.attempt(), 0) << "restarted during the coordinator's outage: " << job.reason();
  std::string workers;
  ASSERT_EQ(cluster.Cli({"worker", "list"}, &workers, kCoordinatorHost), 0) << workers;
  EXPECT_EQ(workers.find("LOST"), std::string::npos) << workers;
  std::this_thread::sleep_until(cut_at + std::chrono::seconds(kOutageSeconds));
  ASSERT_TRUE(hosts_->Heal(kCoordinatorHost).ok());
  const auto healed_at = Clock::now();

  job = WaitFor(cluster, id, 120, [](const v1::Job& j) { return IsTerminal(j.state()); });
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << " / " << job.error();
  EXPECT_EQ(job.attempt(), 0);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_EQ(job.progress().step(), kMaxSteps);
  std::printf("recovery (coordinator cut %d s): job at step %lld at the cut; SUCCEEDED as attempt %d %.1f s after "
              "the heal\n",
              kOutageSeconds, static_cast<long long>(step_at_cut), job.attempt(), SecondsSince(healed_at));
}

}  // namespace
}  // namespace nightshift::testing_e2e
