// A job's processes run the user's code, contained (worker/launcher.h): within the host
// memory its spec allows (resources.memory_gb), failing the job naming that limit, not
// retried as a machine fault; without the worker's token in their environment; and out of
// reach of the worker's secrets and other jobs' folders (worker/confinement.h), whether
// the worker runs as root or as another user.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "tests/e2e/cluster.h"

namespace nightshift::testing_e2e {
namespace {

// A model whose weights and AdamW state (about 1.5 GiB) do not fit in 1 GiB: the rank
// fails allocating, at once, with the limit named; max_restarts 2 is not used.
TEST(ContainmentE2E, AJobOverItsMemoryLimitFailsNamingItWithoutRetries) {
  Cluster cluster("memory-limit");
  const std::string data = cluster.MakeData(8);
  cluster.StartCoordinator();
  cluster.StartWorker("w1", 1);
  v1::Job job;
  ASSERT_TRUE(cluster.Submit("model: {arch: transformer_classifier, layers: 4, d_model: 1024, heads: 8, ffn: 16384, "
                             "max_len: 32}\n"
                             "data: {path: " + data + ", tokenizer: {vocab_size: 64}}\n"
                             "train: {epochs: 1, batching: {batch_size: 4}, threads: 1}\n"
                             "resources: {memory_gb: 1}\nrestart: {max_restarts: 2}\n", &job).ok());
  job = cluster.WaitForEnd(job.id(), 240);
  EXPECT_EQ(job.state(), v1::FAILED) << job.error();
  EXPECT_EQ(job.restarts(), 0) << job.error();
  EXPECT_NE(job.error().find("exceeded its memory limit, resources.memory_gb = 1"), std::string::npos) << job.error();
  EXPECT_NE(job.error().find("can't allocate memory"), std::string::npos) << job.error();
  // The same limit leaves room for a small model: the limit is what failed the first.
  ASSERT_TRUE(cluster.Submit("model: {arch: transformer_classifier, layers: 1, d_model: 16, heads: 2, ffn: 32, max_len: 32}\n"
                             "data: {path: " + data + ", tokenizer: {vocab_size: 64}}\n"
                             "train: {epochs: 1, batching: {batch_size: 4}, threads: 1}\n"
                             "resources: {memory_gb: 1}\n", &job).ok());
  job = cluster.WaitForEnd(job.id(), 240);
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.error();
}

// The worker got its token through NIGHTSHIFT_TOKEN (as a container would): a rank does
// not see it. The rank's environment is read from /proc while it runs.
TEST(ContainmentE2E, ARankDoesNotSeeTheWorkersToken) {
  Cluster cluster("token-env");
  const std::string data = cluster.MakeData(60);
  cluster.StartCoordinator();
  cluster.StartWorker("w1", 1, {{"NIGHTSHIFT_TOKEN", "worker-secret-in-env"}});
  v1::Job job;
  ASSERT_TRUE(cluster.Submit("model: {arch: transformer_classifier, layers: 1, d_model: 16, heads: 2, ffn: 32, max_len: 48}\n"
                             "data: {path: " + data + ", tokenizer: {vocab_size: 64}}\n"
                             "train: {epochs: 300, batching: {batch_size: 8}, threads: 1}\n", &job).ok());
  v1::Job now;
  for (int i = 0; i < 600 && now.state() != v1::RUNNING; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cluster.Get(job.id(), &now);
  }
  ASSERT_EQ(now.state(), v1::RUNNING);
  // The trainer's pid: the process whose command line names this job's config.
  std::string environ_text;
  for (int i = 0; i < 100 && environ_text.empty(); ++i) {
    for (const auto& p : fs::directory_iterator("/proc")) {
      std::ifstream cmdline(p.path() / "cmdline");
      std::string cmd((std::istreambuf_iterator<char>(cmdline)), {});
      if (cmd.find("nightshift-trainer") == std::string::npos || cmd.find(job.id()) == std::string::npos) continue;
      std::ifstream env(p.path() / "environ");
      environ_text.assign((std::istreambuf_iterator<char>(env)), {});
    }
    if (environ_text.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_FALSE(environ_text.empty()) << "no trainer of " << job.id() << " found in /proc";
  EXPECT_NE(environ_text.find("NIGHTSHIFT_JOB_ID=" + job.id()), std::string::npos);
  EXPECT_EQ(environ_text.find("worker-secret-in-env"), std::string::npos);
  EXPECT_EQ(environ_text.find("NIGHTSHIFT_TOKEN"), std::string::npos);
  v1::CancelJobRequest cancel;
  cancel.set_id(job.id());
  grpc::ClientContext ctx;
  v1::Job out;
  cluster.jobs()->CancelJob(&ctx, cancel, &out);
  cluster.WaitForEnd(job.id(), 60);
}

// The worker's secrets and another job's folders, and a probe that plays the job: run by
// the worker as its trainer (--trainer), so the real launcher starts it with all its
// containment, it tries every way at them and prints what it read into its rank log.
class Attack {
 public:
  explicit Attack(const Cluster& cluster)
      : dir_(cluster.dir()), work_(dir_ + "/w1"), token_file_(dir_ + "/worker-token"), probe_(dir_ + "/probe.sh") {
    fs::create_directories(work_ + "/jobs/j-999999/attempt-0");
    fs::create_directories(dir_ + "/checkpoints/j-999999");
    std::ofstream(work_ + "/jobs/j-999999/attempt-0/trainer-config.json") << "config-of-another-job\n";
    std::ofstream(dir_ + "/checkpoints/j-999999/step-1") << "checkpoint-of-another-job\n";
    std::ofstream(token_file_) << "file-secret-of-the-worker\n";  // world-readable: only hiding protects it
    std::ofstream probe(probe_);
    probe << "#!/bin/sh\necho \"probe: uid $(id -u)\"\n"
          << "for f in /proc/$PPID/environ /proc/$PPID/cmdline " << token_file_ << " /proc/$PPID/root" << token_file_
          << " " << work_ << "/jobs/j-999999/attempt-0/trainer-config.json " << dir_ << "/checkpoints/j-999999/step-1"
          << " /proc/$PPID/root" << dir_ << "/checkpoints/j-999999/step-1; do\n"
          << "  echo \"probe: reading $f\"; cat \"$f\" | tr '\\0' ' '; echo\ndone\n"
          << "umount " << token_file_ << "; umount " << work_ << "; cat " << token_file_ << "\n"
          << "grep -q checkpoint_dir \"$2\" && echo 'probe: read its own config'\n"
          << "dir=$(sed -n 's/.*\"checkpoint_dir\": *\"\\([^\"]*\\)\".*/\\1/p' \"$2\")\n"
          << "echo probe > \"$dir/probe-was-here\" && echo 'probe: wrote its own checkpoint folder'\nexit 0\n";
    probe.close();
    fs::permissions(probe_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                fs::perms::others_read | fs::perms::others_exec);
  }
  const std::string& work() const { return work_; }
  // The worker's flags: the token file, and the probe as the trainer.
  std::vector<std::string> WorkerArgs() const { return {"--token-file", token_file_, "--trainer", probe_}; }

  // Runs one job (its rank is the probe) to its end; the probe's rank log.
  std::string Play(Cluster& cluster, const std::string& data) const {
    v1::Job job;
    EXPECT_TRUE(cluster.Submit("model: {arch: transformer_classifier, layers: 1, d_model: 16, heads: 2, ffn: 32, "
                               "max_len: 32}\ndata: {path: " + data + ", tokenizer: {vocab_size: 64}}\n"
                               "train: {epochs: 1, threads: 1}\nrestart: {max_restarts: 0}\n", &job).ok());
    job = cluster.WaitForEnd(job.id(), 180);
    EXPECT_TRUE(IsTerminal(job.state())) << job.DebugString();
    EXPECT_TRUE(fs::exists(dir_ + "/checkpoints/" + job.id() + "/probe-was-here")) << job.error();
    return ReadAll(work_ + "/jobs/" + job.id() + "/attempt-0/rank-0.log");
  }

  // What the probe must not have read, and must have done.
  static void Check(const std::string& log) {
    ASSERT_NE(log.find("probe: uid"), std::string::npos) << log;
    EXPECT_EQ(log.find("probe: uid 0\n"), std::string::npos) << "the job ran as root:\n" << log;
    for (const char* secret : {"env-secret-of-the-worker", "file-secret-of-the-worker", "config-of-another-job",
                               "checkpoint-of-another-job"})
      EXPECT_EQ(log.find(secret), std::string::npos) << "the job read " << secret << ":\n" << log;
    EXPECT_NE(log.find("probe: reading /proc/"), std::string::npos) << log;
    EXPECT_NE(log.find("probe: read its own config"), std::string::npos) << log;
    EXPECT_NE(log.find("probe: wrote its own checkpoint folder"), std::string::npos) << log;
  }

 private:
  std::string dir_, work_, token_file_, probe_;
};

// A worker run as root (as in CI), with its token in its environment and in a file: the
// job runs as the job user and reads neither the worker's environment, nor its command
// line's secrets, nor the token file (also through /proc/<worker>/root, also after trying
// to unmount what covers it), nor another job's config or checkpoints.
TEST(ContainmentE2E, AJobOfARootWorkerReachesNoneOfItsSecretsNorOtherJobsFolders) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  Cluster cluster("attack-root");
  const std::string data = cluster.MakeData(8);
  const Attack attack(cluster);
  cluster.StartCoordinator();
  cluster.StartWorker("w1", 1, {{"NIGHTSHIFT_TOKEN", "env-secret-of-the-worker"}}, attack.WorkerArgs());
  Attack::Check(attack.Play(cluster, data));
}

// The same attacks on a worker that is not root (started here as nobody): the job runs as
// the worker's own user, in a user and mount namespace of its own.
TEST(ContainmentE2E, AJobOfAWorkerThatIsNotRootReachesNoneOfItsSecretsNorOtherJobsFolders) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (to start the worker as another user)";
  Cluster cluster("attack-user");
  const std::string as_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups -- ";
  std::string out;
  if (Cluster::Shell(as_nobody + "test -x " + cluster.Bin("nightshift-worker"), &out) != 0)
    GTEST_SKIP() << "nobody cannot run " << cluster.Bin("nightshift-worker") << ": " << out;
  if (Cluster::Shell(as_nobody + "unshare --user --mount true", &out) != 0)
    GTEST_SKIP() << "no unprivileged user namespaces here: " << out;
  const std::string data = cluster.MakeData(8);
  const Attack attack(cluster);
  ASSERT_EQ(Cluster::Shell("chown -R 65534:65534 " + attack.work() + " " + cluster.dir() + "/checkpoints", &out), 0)
      << out;
  cluster.StartCoordinator();
  std::vector<std::string> argv = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                                   cluster.Bin("nightshift-worker"), "--coordinator", cluster.address(), "--name",
                                   "w1", "--work-dir", attack.work(), "--cpu-slots", "1", "--checkpoint-root",
                                   cluster.dir() + "/checkpoints", "--allow-any-path"};
  for (const std::string& a : attack.WorkerArgs()) argv.push_back(a);
  Process worker(argv, cluster.dir() + "/w1.log", {{"NIGHTSHIFT_TOKEN", "env-secret-of-the-worker"}});
  Attack::Check(attack.Play(cluster, data));
}

// A token on a daemon's command line is readable by every local user: refused, pointing
// to --token-file.
TEST(ContainmentE2E, TheWorkerRefusesATokenOnItsCommandLine) {
  Cluster cluster("token-flag");
  std::string out;
  const int code = Cluster::Shell("timeout 20 " + cluster.Bin("nightshift-worker") +
                                      " --coordinator 127.0.0.1:1 --name w1 --work-dir " + cluster.dir() +
                                      "/w1 --allow-any-path --token cmdline-secret",
                                  &out);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--token-file"), std::string::npos) << out;
}

}  // namespace
}  // namespace nightshift::testing_e2e
