// SlurmCluster (coordinator/slurm.h) against real Slurm 22.05 daemons: munged, slurmctld
// and two slurmd on test hosts of their own (tests/support/slurm_cluster.py: network
// namespaces with 198.18.x.y addresses, torn down at the end, or by its watchdog when
// this process dies). An allocation of both nodes runs its node command once per node
// and completes; one that sleeps is seen running on both nodes and is gone after Cancel;
// a node command exiting 3 fails the allocation with exit code 3; an unknown partition
// is refused as the job's error, more nodes than there are waits with Slurm's reason.
// Then the coordinator itself with --cluster slurm, inside the controller's host: a
// two-rank job becomes one Slurm job of both nodes, whose workers register under it,
// train it (DDP across the two node hosts) to SUCCEEDED and exit, completing the
// allocation. With accounting (slurmdbd on MariaDB), ended allocations that left squeue
// are found in sacct. Needs root (skips otherwise, saying why).
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include <google/protobuf/util/json_util.h>

#include "common/command.h"
#include "common/crypto/sha256.h"
#include "coordinator/slurm.h"
#include "nightshift/v1/jobs.pb.h"
#include "tests/e2e/cluster.h"

namespace nightshift {
namespace {

namespace fs = std::filesystem;

const std::string kScript = std::string(NIGHTSHIFT_SOURCE_DIR) + "/tests/support/slurm_cluster.py";

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class SlurmE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root: the Slurm daemons run in network namespaces";
    dir_ = fs::temp_directory_path() / ("nightshift_slurm_e2e_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    std::vector<std::string> up_argv = {"python3", kScript, "up", "--dir", (dir_ / "cluster").string(),
                                        "--nodes", std::to_string(nodes_), "--slurmd-timeout",
                                        std::to_string(slurmd_timeout_), "--min-job-age", std::to_string(min_job_age_),
                                        "--lifetime", "600", "--watch-pid", std::to_string(::getpid())};
    if (accounting_) up_argv.push_back("--accounting");
    StatusOr<CommandResult> up = runner_.Run(up_argv, "", {}, 180);
    ASSERT_TRUE(up.ok()) << up.status().ToString();
    ASSERT_EQ(up->exit_code, 0) << up->out << up->err;
    state_ = nlohmann::json::parse(up->out);
    const nlohmann::json& state = state_;
    for (const auto& [k, v] : state.at("env").items()) options_.env[k] = v.get<std::string>();
    options_.log_dir = dir_.string();
    cluster_ = std::make_unique<SlurmCluster>(options_, &runner_);
    fs::create_directories(dir_ / "out");
  }
  void TearDown() override {
    cluster_.reset();
    if (dir_.empty()) return;
    if (HasFailure())  // the controller's view of what went wrong
      std::fprintf(stderr, "slurmctld.log:\n%s\n", Read(dir_ / "cluster" / "ctld" / "slurmctld.log").c_str());
    StatusOr<CommandResult> down = runner_.Run({"python3", kScript, "down", "--dir", (dir_ / "cluster").string()}, "", {}, 60);
    EXPECT_TRUE(down.ok() && down->exit_code == 0) << (down.ok() ? down->out + down->err : down.status().ToString());
    fs::remove_all(dir_);
  }

  AllocationRequest Request(const std::string& job, std::vector<std::string> command, int nodes = 2) {
    AllocationRequest r;
    r.job_id = job;
    r.nodes = nodes;
    r.time_limit_minutes = 5;
    r.node_command = std::move(command);
    return r;
  }

  // Polls until `done` holds for the allocation (as squeue lists it), within `seconds`.
  SlurmJob WaitFor(const std::string& id, const std::function<bool(const SlurmJob&)>& done, const std::string& what,
                   int seconds = 60) {
    SlurmJob last;
    for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
         std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(std::chrono::milliseconds(200))) {
      StatusOr<std::map<std::string, SlurmJob>> jobs = cluster_->Poll();
      EXPECT_TRUE(jobs.ok()) << jobs.status().ToString();
      if (!jobs.ok() || !jobs->count(id)) continue;
      last = jobs->at(id);
      if (done(last)) return last;
    }
    ADD_FAILURE() << "allocation " << id << " never " << what << "; last seen " << last.slurm_state << " ("
                  << last.reason << ")";
    return last;
  }

  // argv run inside the controller's host (its network namespace).
  std::vector<std::string> InController(std::vector<std::string> argv) const {
    std::vector<std::string> prefix = state_.at("exec_prefix").get<std::vector<std::string>>();
    if (prefix[0][0] != '/') prefix[0] = "/usr/bin/" + prefix[0];  // for execv
    argv.insert(argv.begin(), prefix.begin(), prefix.end());
    return argv;
  }

  int nodes_ = 2;
  int slurmd_timeout_ = 30;  // a silent node is DOWN after this
  int min_job_age_ = 300;    // seconds an ended job stays in squeue
  bool accounting_ = false;  // MariaDB and slurmdbd too: sacct answers
  SubprocessRunner runner_;
  nlohmann::json state_;  // slurm_cluster.py up's answer
  SlurmOptions options_;  // the cluster's client environment
  fs::path dir_;
  std::unique_ptr<SlurmCluster> cluster_;
};

TEST_F(SlurmE2eTest, AnAllocationRunsItsCommandOncePerNodeAndCompletes) {
  const std::string out = (dir_ / "out").string();
  StatusOr<std::string> id = cluster_->Submit(
      Request("j-e2e", {"sh", "-c", "echo \"$(hostname) $SLURM_JOB_NAME\" > " + out + "/node-$SLURM_NODEID"}));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  const SlurmJob done = WaitFor(*id, [](const SlurmJob& j) { return j.state == SlurmState::kCompleted; }, "completed");
  EXPECT_EQ(done.exit_code, 0);
  EXPECT_EQ(done.nodes, "n[1-2]");
  EXPECT_EQ(Read(dir_ / "out" / "node-0") + Read(dir_ / "out" / "node-1"),
            "n1 nightshift-j-e2e-a0\nn2 nightshift-j-e2e-a0\n");
}

// --slurm-submit-as-owner on the real daemons: sbatch runs through sudo as the job's owner
// (a Unix user this test makes and removes), so the allocation's commands run as that user
// on every node, not as the coordinator's (root here). sudo is reached through a wrapper
// that enters the controller's network namespace first (a coordinator on the
// controller's host, as in the tests below, runs sudo itself); sudo and sbatch are real.
TEST_F(SlurmE2eTest, AnAllocationSubmittedAsItsOwnerRunsAsThatUserOnEveryNode) {
  const std::string user = "nsowner" + std::to_string(::getpid() % 100000);
  StatusOr<CommandResult> made =
      runner_.Run({"useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user}, "", {}, 30);
  ASSERT_TRUE(made.ok() && made->exit_code == 0) << (made.ok() ? made->err : made.status().ToString());
  struct Removed {
    SubprocessRunner* runner;
    std::string user;
    ~Removed() { runner->Run({"userdel", user}, "", {}, 30); }
  } removed{&runner_, user};
  const fs::path out = dir_ / "out";
  fs::permissions(out, fs::perms::all);  // the owner's commands and Slurm's log write here
  const fs::path sudo = dir_ / "sudo-in-controller";
  {
    std::ofstream f(sudo);
    f << "#!/bin/sh\nexec";
    for (const std::string& a : InController({"/usr/bin/sudo"})) f << " '" << a << "'";
    f << " \"$@\"\n";
  }
  fs::permissions(sudo, fs::perms::owner_all);
  SlurmOptions o = options_;
  o.submit_as_owner = true;
  o.sudo = sudo.string();
  o.sbatch = "/usr/bin/sbatch";
  o.log_dir = out.string();
  SlurmCluster as_owner(o, &runner_);
  AllocationRequest r = Request("j-owner", {"sh", "-c", "id -un > " + out.string() + "/user-$SLURM_NODEID"});
  r.owner = user;
  StatusOr<std::string> id = as_owner.Submit(r);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  const SlurmJob done = WaitFor(*id, [](const SlurmJob& j) { return j.state == SlurmState::kCompleted; }, "completed");
  EXPECT_EQ(done.exit_code, 0) << "the allocation's output:\n" << Read(out / ("slurm-" + *id + ".out"));
  EXPECT_EQ(Read(out / "user-0"), user + "\n");
  EXPECT_EQ(Read(out / "user-1"), user + "\n");
  // squeue names the owner as its user: what the provisioner takes for ours (RunsAs).
  EXPECT_EQ(done.user, user);
  EXPECT_EQ(as_owner.RunsAs(user), user);
  EXPECT_EQ(cluster_->RunsAs(user), "root");  // not as the owner: the coordinator's user
}

TEST_F(SlurmE2eTest, ARunningAllocationIsCancelledAndANodeCommandsExitCodeFailsIt) {
  StatusOr<std::string> sleeping = cluster_->Submit(Request("j-sleep", {"sleep", "120"}));
  ASSERT_TRUE(sleeping.ok()) << sleeping.status().ToString();
  const SlurmJob running = WaitFor(*sleeping, [](const SlurmJob& j) { return j.state == SlurmState::kRunning; }, "ran");
  EXPECT_EQ(running.nodes, "n[1-2]");
  ASSERT_TRUE(cluster_->Cancel(*sleeping).ok());
  WaitFor(*sleeping, [](const SlurmJob& j) { return j.state == SlurmState::kCancelled; }, "was cancelled");
  EXPECT_TRUE(cluster_->Cancel(*sleeping).ok()) << "cancelling an ended allocation is not an error";

  StatusOr<std::string> failing = cluster_->Submit(Request("j-fail", {"sh", "-c", "exit 3"}, 1));
  ASSERT_TRUE(failing.ok()) << failing.status().ToString();
  const SlurmJob failed = WaitFor(*failing, [](const SlurmJob& j) { return j.state == SlurmState::kFailed; }, "failed");
  EXPECT_EQ(failed.exit_code, 3);
}

// A real time limit (resources.time_limit_minutes: sbatch --time): Slurm sends SIGTERM to
// every node's command --signal's seconds before it (each writes a file when it gets it).
// Two allocations side by side (each node has a CPU for both): one whose commands go on
// ends TIMEOUT; one whose commands exit 143 on the warning, as the worker does once its
// ranks checkpointed, ends FAILED with exit code 143 before the limit. The coordinator
// reads both as the time limit (a new attempt; a restart counted only when the slice
// committed no new checkpoint). Slurm's one-minute minimum and its time-limit checks make
// this take 60-100 s.
TEST_F(SlurmE2eTest, ATimeLimitSignalsEveryNodeFirstThenEndsTheAllocationAsItsTimeLimit) {
  SlurmOptions options = options_;
  options.signal_before_end_seconds = 30;
  SlurmCluster cluster(options, &runner_);
  const std::string out = (dir_ / "out").string();
  const auto command = [&](const std::string& name, const std::string& then) {
    return std::vector<std::string>{
        "sh", "-c", "trap 'echo term >> " + out + "/" + name + "-$SLURM_NODEID" + then + "' TERM; while :; do sleep 1; done"};
  };
  AllocationRequest timed = Request("j-timed", command("timed", "")), warned = Request("j-warned", command("warned", "; exit 143"));
  timed.time_limit_minutes = warned.time_limit_minutes = 1;
  StatusOr<std::string> timed_id = cluster.Submit(timed), warned_id = cluster.Submit(warned);
  ASSERT_TRUE(timed_id.ok()) << timed_id.status().ToString();
  ASSERT_TRUE(warned_id.ok()) << warned_id.status().ToString();
  const auto started = std::chrono::steady_clock::now();
  const SlurmJob stopped = WaitFor(*warned_id, [](const SlurmJob& j) { return j.state == SlurmState::kFailed; },
                                   "ended on the warning", 180);
  EXPECT_EQ(stopped.exit_code, 143);
  const SlurmJob ended =
      WaitFor(*timed_id, [](const SlurmJob& j) { return j.state == SlurmState::kTimeout; }, "timed out", 180);
  EXPECT_EQ(ended.slurm_state, "TIMEOUT");
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::seconds(50));  // not the partition's limit
  for (const char* node : {"timed-0", "timed-1", "warned-0", "warned-1"})
    EXPECT_TRUE(fs::exists(dir_ / "out" / node)) << node << ": the node's command never got SIGTERM";
  StatusOr<std::vector<Allocation>> listed = cluster.List();
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  int seen = 0;
  for (const Allocation& a : *listed)
    if (a.id == *timed_id || a.id == *warned_id) {
      ++seen;
      EXPECT_EQ(a.phase, Allocation::Phase::kEnded) << a.job_id;
      EXPECT_EQ(a.end, Allocation::End::kTimeLimit) << a.job_id << " " << a.state << " exit " << a.exit_code;
    }
  EXPECT_EQ(seen, 2);
}

// An unknown partition (from the operator's priority table) is refused at submission: the
// job's error, not a retry. More nodes than the partition has is accepted by Slurm and
// waits, with Slurm's reason (for job describe).
TEST_F(SlurmE2eTest, AnImpossibleRequestIsRefusedOrWaitsWithSlurmsReason) {
  SlurmOptions options = options_;
  options.priorities = {{0, "nosuch", "", ""}};
  SlurmCluster misconfigured(options, &runner_);
  const Status refused = misconfigured.Submit(Request("j-nowhere", {"true"}, 1)).status();
  EXPECT_EQ(refused.code(), Status::kInvalidArgument) << refused.ToString();
  EXPECT_NE(refused.message().find("nightshift-j-nowhere-a0"), std::string::npos) << refused.ToString();
  EXPECT_NE(refused.message().find("Invalid partition"), std::string::npos) << refused.ToString();

  StatusOr<std::string> big = cluster_->Submit(Request("j-big", {"true"}, 3));
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  // (PartitionConfig for a moment after submission, then the node limit)
  WaitFor(*big, [](const SlurmJob& j) { return j.state == SlurmState::kPending && j.reason == "PartitionNodeLimit"; },
          "waited for the partition's node limit");
  EXPECT_TRUE(cluster_->Cancel(*big).ok());
}

// A small classifier of `world_size` ranks, `steps` steps, checkpointed every 10; ranks
// wait 300 s for a silent peer.
std::string SpecYaml(const std::string& name, const std::string& data, int world_size, int steps, int priority = 0,
                     int max_restarts = 2, int time_limit_minutes = 0, int checkpoint_every = 10) {
  return "name: " + name + "\n"
         "model: {arch: transformer_classifier, layers: 1, d_model: 32, heads: 2, ffn: 64, max_len: 32}\n"
         "data: {format: text_dir, path: " + data + ", validation_fraction: 0.2, tokenizer: {vocab_size: 64}}\n"
         "train: {epochs: 1000, max_steps: " + std::to_string(steps) +
         ", lr: 0.003, seed: 7, batching: {batch_size: 8}, threads: 1}\n"
         "resources: {world_size: " + std::to_string(world_size) + ", device: cpu, timeout_seconds: 300" +
         (time_limit_minutes > 0 ? ", time_limit_minutes: " + std::to_string(time_limit_minutes) : "") + "}\n"
         "checkpoint: {every_steps: " + std::to_string(checkpoint_every) + ", keep_last: 2}\n"
         "priority: " + std::to_string(priority) + "\n"
         "restart: {max_restarts: " + std::to_string(max_restarts) + "}\n";
}

// nightshift-coordinator --cluster slurm inside the controller's host (a folder of its own,
// killed with this), and the CLI run there against it. With tokens: the CLI is an admin,
// and the allocations' workers have no token but the one each attempt's script gives them
// (coordinator/allocation_tokens.h).
class CoordinatorOnSlurm {
 public:
  CoordinatorOnSlurm(const std::vector<std::string>& in_controller,
                     const std::map<std::string, std::string>& env, const std::string& ctl_address, int ranks_per_node,
                     const std::vector<std::string>& extra_args = {})
      : files_("slurm"), prefix_(in_controller) {
    data_ = files_.MakeData(60);
    const std::string dir = files_.dir(), port_file = dir + "/coordinator.port";
    std::ofstream(dir + "/tokens") << crypto::Sha256Hex("e2e-admin-token") << " admin e2e\n";
    std::ofstream(dir + "/admin-token") << "e2e-admin-token\n";
    std::vector<std::string> argv = prefix_;
    argv.insert(argv.end(),
                {files_.Bin("nightshift-coordinator"), "--listen", ctl_address + ":0", "--data-dir", dir + "/db",
                 "--port-file", port_file, "--cluster", "slurm", "--ranks-per-node",
                 std::to_string(ranks_per_node), "--allocation-worker-arg=--work-dir=" + dir + "/work",
                 "--allocation-worker-arg=--checkpoint-root=" + dir + "/checkpoints",
                 "--allocation-worker-arg=--allow-any-path", "--slurm-log-dir", dir, "--token-file", dir + "/tokens"});
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    if (std::find(extra_args.begin(), extra_args.end(), "--lease-seconds") == extra_args.end())
      argv.insert(argv.end(), {"--lease-seconds", "5"});
    argv_ = argv;
    env_ = env;
    ctl_address_ = ctl_address;
    Start();
  }
  ~CoordinatorOnSlurm() { process_.Kill(SIGTERM); }

  // A crash (SIGKILL: nothing cancelled, nothing written) and, with Start(), a restart on
  // the same store, on a port of its own.
  void Crash() { process_.Kill(SIGKILL); }
  void Start() {
    const std::string port_file = files_.dir() + "/coordinator.port";
    fs::remove(port_file);
    process_ = testing_e2e::Process(argv_, files_.dir() + "/coordinator.log", env_);
    for (int i = 0; i < 300 && !fs::exists(port_file); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    address_ = ctl_address_ + ":" + std::to_string(std::atoi(testing_e2e::ReadAll(port_file).c_str()));
  }

  std::string dir() const { return files_.dir(); }
  const std::string& data() const { return data_; }
  std::string log() const { return testing_e2e::ReadAll(files_.dir() + "/coordinator.log"); }

  StatusOr<CommandResult> Cli(const std::vector<std::string>& args) {
    std::vector<std::string> argv = prefix_;
    argv.insert(argv.end(), {files_.Bin("nightshift"), "--coordinator", address_, "--token-file",
                             files_.dir() + "/admin-token"});
    argv.insert(argv.end(), args.begin(), args.end());
    return runner_.Run(argv, "", {}, 30);
  }
  // Submits SpecYaml (on `data`, else the folder's own); its id ("" after ADD_FAILURE).
  std::string Submit(const std::string& name, int world_size, int steps, int priority = 0, int max_restarts = 2,
                     const std::string& data = "", int time_limit_minutes = 0, int checkpoint_every = 10) {
    const std::string spec = files_.dir() + "/" + name + ".yaml";
    std::ofstream(spec) << SpecYaml(name, data.empty() ? data_ : data, world_size, steps, priority, max_restarts,
                                    time_limit_minutes, checkpoint_every);
    StatusOr<CommandResult> r = Cli({"job", "submit", spec});
    if (!r.ok() || r->exit_code != 0) {
      ADD_FAILURE() << (r.ok() ? r->out + r->err : r.status().ToString()) << log();
      return "";
    }
    std::string id;
    std::istringstream lines(r->out);
    for (std::string line; std::getline(lines, line);)
      if (!line.empty()) id = line;  // the last line is the id
    return id;
  }
  bool Describe(const std::string& id, v1::Job* job) {
    StatusOr<CommandResult> r = Cli({"job", "describe", id, "-o", "json"});
    if (!r.ok() || r->exit_code != 0) return false;
    google::protobuf::util::JsonParseOptions o;
    o.ignore_unknown_fields = true;
    return google::protobuf::util::JsonStringToMessage(r->out, job, o).ok();
  }
  // Polls the job until `done` holds, for at most `seconds`; the last view.
  v1::Job WaitFor(const std::string& id, int seconds, const std::function<bool(const v1::Job&)>& done) {
    v1::Job job;
    for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
         std::chrono::steady_clock::now() < deadline && !(Describe(id, &job) && done(job));)
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    return job;
  }
  v1::Job WaitForEnd(const std::string& id, int seconds) {
    return WaitFor(id, seconds, [](const v1::Job& j) { return IsTerminal(j.state()); });
  }

 private:
  testing_e2e::Cluster files_;  // the folder and data (its processes are started here)
  std::vector<std::string> prefix_, argv_;
  std::map<std::string, std::string> env_;
  std::string data_, address_, ctl_address_;
  SubprocessRunner runner_;
  testing_e2e::Process process_;
};

bool HasEvent(const v1::Job& job, const std::string& text) {
  for (const auto& e : job.events())
    if (e.reason().find(text) != std::string::npos) return true;
  return false;
}

TEST_F(SlurmE2eTest, ACoordinatorOnSlurmRunsATwoNodeJobInOneAllocationOfItsOwnWorkers) {
  CoordinatorOnSlurm c(InController({}), options_.env, state_.at("ctl").at("addr"), /*ranks_per_node=*/1);
  // 200 steps: a few seconds, so a pass (every 2 s) sees the allocation running.
  const std::string id = c.Submit("on-slurm", 2, 200);
  const v1::Job job = c.WaitForEnd(id, 300);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason() << "\n" << job.error() << "\ncoordinator:\n" << c.log();
  // One attempt, in one Slurm job of both nodes, on the two workers started in it.
  EXPECT_EQ(job.attempt(), 0);
  EXPECT_EQ(job.allocation().cluster(), "slurm");
  EXPECT_EQ(job.allocation().attempt(), 0);
  EXPECT_EQ(job.allocation().nodes(), "n[1-2]");
  ASSERT_EQ(job.placements_size(), 2);
  EXPECT_EQ(job.placements(0).worker() + " " + job.placements(1).worker(), id + "-a0-n1 " + id + "-a0-n2");
  EXPECT_TRUE(HasEvent(job, "slurm job " + job.allocation().id() + " RUNNING on n[1-2]")) << job.DebugString();
  EXPECT_GT(job.checkpoint_step(), 0);
  // Released once the job ended, the workers exit 0 and the allocation completes.
  const SlurmJob done = WaitFor(job.allocation().id(), [](const SlurmJob& j) { return j.state == SlurmState::kCompleted; },
                                "completed");
  EXPECT_EQ(done.exit_code, 0) << Read(fs::path(c.dir()) / ("slurm-" + job.allocation().id() + ".out"));
  // The workers registered by the attempt's token (they have no other), which neither the
  // coordinator's log nor the allocation's output shows.
  EXPECT_EQ(c.log().find("allocation:" + id), std::string::npos);
  EXPECT_EQ(Read(fs::path(c.dir()) / ("slurm-" + job.allocation().id() + ".out")).find("allocation:" + id),
            std::string::npos);
  StatusOr<CommandResult> described = c.Cli({"job", "describe", id});
  ASSERT_TRUE(described.ok());
  EXPECT_NE(described->out.find("Allocation: slurm job " + job.allocation().id() + " for attempt 0, last seen RUNNING on n[1-2]"),
            std::string::npos)
      << described->out;

  // The same job on one host over the loopback (our own coordinator and worker, two
  // ranks on it) ends with the same weights, byte for byte.
  testing_e2e::Cluster loopback("slurm-loopback");
  loopback.StartCoordinator();
  loopback.StartWorker("w1", 2);
  v1::Job local;
  ASSERT_TRUE(loopback.Submit(SpecYaml("on-loopback", c.data(), 2, 200), &local).ok());
  local = loopback.WaitForEnd(local.id(), 300);
  ASSERT_EQ(local.state(), v1::SUCCEEDED) << local.DebugString();
  const std::string weights = "/model/model.safetensors";
  const std::string on_slurm = Read(fs::path(c.dir()) / "checkpoints" / (id + weights));
  ASSERT_FALSE(on_slurm.empty());
  EXPECT_TRUE(on_slurm == Read(fs::path(loopback.dir()) / "checkpoints" / (local.id() + weights)))
      << "the weights trained on Slurm differ from the loopback run's";
}

// A spec its trainer refuses (the data folder is not there) FAILS at once, with no retry,
// and its allocation ends; a cancelled job leaves no allocation queued or running.
TEST_F(SlurmE2eTest, ABadSpecFailsWithoutRetryAndACancelLeavesNothingInTheQueue) {
  CoordinatorOnSlurm c(InController({}), options_.env, state_.at("ctl").at("addr"), /*ranks_per_node=*/1);
  const std::string bad = c.Submit("bad", 2, 30, 0, /*max_restarts=*/3, c.dir() + "/no-such-folder");
  const v1::Job failed = c.WaitForEnd(bad, 240);
  ASSERT_EQ(failed.state(), v1::FAILED) << failed.DebugString() << c.log();
  EXPECT_EQ(failed.restarts(), 0);
  EXPECT_EQ(failed.attempt(), 0);
  EXPECT_NE(failed.error().find("no-such-folder"), std::string::npos) << failed.error();
  // Ended: the workers released exit 0 (COMPLETED), unless the provisioner's next pass
  // cancelled the allocation of the finished attempt first (CANCELLED): whichever comes
  // first (a CI run under load saw the second).
  WaitFor(failed.allocation().id(),
          [](const SlurmJob& j) { return j.state == SlurmState::kCompleted || j.state == SlurmState::kCancelled; },
          "ended");

  const std::string cancelled = c.Submit("cancelled", 2, 100000);
  c.WaitFor(cancelled, 240, [](const v1::Job& j) { return j.state() == v1::RUNNING || IsTerminal(j.state()); });
  ASSERT_TRUE(c.Cli({"job", "cancel", cancelled}).ok());
  EXPECT_EQ(c.WaitForEnd(cancelled, 60).state(), v1::CANCELLED);
  bool any_left = true;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
       any_left && std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(std::chrono::milliseconds(500))) {
    StatusOr<std::map<std::string, SlurmJob>> ours = cluster_->Poll();
    ASSERT_TRUE(ours.ok()) << ours.status().ToString();
    any_left = false;
    for (const auto& [slurm_id, j] : *ours)
      any_left |= j.state == SlurmState::kPending || j.state == SlurmState::kRunning;
  }
  EXPECT_FALSE(any_left) << "an allocation is still queued or running after the cancel";
}

// Slurm preempts: job A (priority 0: partition low, PreemptMode REQUEUE) holds both
// nodes' CPUs (4 ranks, 2 per node); B (priority 50: partition high, a higher tier) needs
// one whole node. Slurm signals A's workers (SIGTERM: the ranks checkpoint, the workers
// exit 143) and ends A's allocation PREEMPTED; the coordinator starts A's next attempt
// without counting a restart, its allocation waits while B runs, and then resumes A from
// the checkpoint to the end.
TEST_F(SlurmE2eTest, ASlurmPreemptionCheckpointsAndTheNextAttemptResumesWithoutARestartCounted) {
  CoordinatorOnSlurm c(InController({}), options_.env, state_.at("ctl").at("addr"), /*ranks_per_node=*/2,
                       {"--slurm-priority", "0:low", "--slurm-priority", "50:high"});
  const std::string a = c.Submit("low", 4, 100000);
  v1::Job job = c.WaitFor(a, 240, [](const v1::Job& j) { return j.checkpoint_step() >= 20 || IsTerminal(j.state()); });
  ASSERT_GE(job.checkpoint_step(), 20) << job.DebugString() << c.log();
  const std::string b = c.Submit("high", 2, 20, /*priority=*/50);
  job = c.WaitFor(a, 120, [](const v1::Job& j) { return j.attempt() >= 1 || IsTerminal(j.state()); });
  ASSERT_EQ(job.attempt(), 1) << job.DebugString() << c.log();
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_TRUE(HasEvent(job, "the cluster took the allocation back (slurm job")) << job.DebugString();
  const v1::Job high = c.WaitForEnd(b, 240);
  EXPECT_EQ(high.state(), v1::SUCCEEDED) << high.DebugString() << c.log();
  EXPECT_EQ(high.allocation().attempt(), 0);
  // A runs again once B is done, from its checkpoint; then it is cancelled (its steps are
  // many) and its allocation with it.
  job = c.WaitFor(a, 240, [](const v1::Job& j) { return j.state() == v1::RUNNING && j.attempt() == 1; });
  ASSERT_EQ(job.state(), v1::RUNNING) << job.DebugString() << c.log();
  job = c.WaitFor(a, 60, [](const v1::Job& j) { return HasEvent(j, "resumed from step"); });
  EXPECT_TRUE(HasEvent(job, "attempt 1 resumed from step")) << job.DebugString();
  EXPECT_EQ(job.restarts(), 0);
  ASSERT_TRUE(c.Cli({"job", "cancel", a}).ok());
  EXPECT_EQ(c.WaitForEnd(a, 60).state(), v1::CANCELLED);
  WaitFor(job.allocation().id(), [](const SlurmJob& j) { return j.state != SlurmState::kRunning && j.state != SlurmState::kPending; },
          "ended after the cancel");
}

// A job longer than its time slice (resources.time_limit_minutes: 1; the coordinator's
// --slurm-signal-seconds 30): Slurm's warning stops the workers, whose ranks checkpoint on
// the SIGTERM, and the allocation ends (FAILED 143, or TIMEOUT). The checkpoint moved past
// the step the attempt started from, so the next attempt goes on in a new allocation
// without a restart counted (with max_restarts 0 a counted one would fail the job) and
// resumes from the newest checkpoint, the one written while stopping.
TEST_F(SlurmE2eTest, ATimeSliceThatCheckpointedGoesOnInTheNextWithoutARestartCounted) {
  CoordinatorOnSlurm c(InController({}), options_.env, state_.at("ctl").at("addr"), /*ranks_per_node=*/1,
                       {"--slurm-signal-seconds", "30"});
  // No periodic checkpoint: the only one is the one the ranks write on the warning.
  const std::string id = c.Submit("sliced", 2, 100000, 0, /*max_restarts=*/0, "", /*time_limit_minutes=*/1,
                                  /*checkpoint_every=*/1000000);
  v1::Job job = c.WaitFor(id, 240, [](const v1::Job& j) { return j.attempt() >= 1 || IsTerminal(j.state()); });
  ASSERT_EQ(job.attempt(), 1) << job.DebugString() << c.log();
  EXPECT_FALSE(IsTerminal(job.state())) << job.DebugString();
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_TRUE(HasEvent(job, "the allocation's time limit ended it (slurm job")) << job.DebugString();
  const int64_t slice_end = job.checkpoint_step();
  EXPECT_GT(slice_end, 0);
  job = c.WaitFor(id, 240, [](const v1::Job& j) { return HasEvent(j, "attempt 1 resumed from step") || IsTerminal(j.state()); });
  EXPECT_TRUE(HasEvent(job, "attempt 1 resumed from step " + std::to_string(slice_end))) << job.DebugString() << c.log();
  EXPECT_FALSE(HasEvent(job, "the newest checkpoint reported was")) << job.DebugString();
  EXPECT_EQ(job.restarts(), 0);
  ASSERT_TRUE(c.Cli({"job", "cancel", id}).ok());
  EXPECT_EQ(c.WaitForEnd(id, 60).state(), v1::CANCELLED);
}

// Three nodes, and a node is DOWN 10 s after it falls silent.
// With Slurm's accounting (MariaDB and slurmdbd on the controller's host) and ended jobs
// leaving squeue after 2 s: allocations that ended and left squeue (as while a
// coordinator is down) are looked up in sacct: one failed with its node command's exit
// code 3 (22.05's sacct --json says 0: the text format has it), one completed.
class SlurmE2eAccountingTest : public SlurmE2eTest {
 protected:
  void SetUp() override {
    accounting_ = true;
    min_job_age_ = 2;
    SlurmE2eTest::SetUp();
  }
};

TEST_F(SlurmE2eAccountingTest, AnAllocationThatLeftSqueueEndsAsTheAccountingRecordedIt) {
  StatusOr<std::string> failed = cluster_->Submit(Request("j-acct", {"sh", "-c", "exit 3"}, 1));
  StatusOr<std::string> done = cluster_->Submit(Request("j-acct2", {"true"}, 1));
  ASSERT_TRUE(failed.ok() && done.ok()) << failed.status().ToString() << done.status().ToString();
  bool gone = false;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
       !gone && std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(std::chrono::milliseconds(500))) {
    StatusOr<std::map<std::string, SlurmJob>> jobs = cluster_->Poll();
    gone = jobs.ok() && !jobs->count(*failed) && !jobs->count(*done);
  }
  ASSERT_TRUE(gone) << "the ended allocations never left squeue";
  StatusOr<Allocation> f = Status::NotFound("not looked up");
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       !f.ok() && std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(std::chrono::milliseconds(500)))
    f = cluster_->Lookup(*failed);  // slurmctld sends the records a moment after the end
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->phase, Allocation::Phase::kEnded);
  EXPECT_EQ(f->end, Allocation::End::kDone);
  EXPECT_EQ(f->state, "FAILED");
  EXPECT_EQ(f->exit_code, 3);
  EXPECT_EQ(f->job_id, "j-acct");
  EXPECT_EQ(f->attempt, 0);
  StatusOr<Allocation> d = cluster_->Lookup(*done);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->state, "COMPLETED");
  EXPECT_EQ(d->exit_code, 0);
  EXPECT_EQ(d->job_id, "j-acct2");
  EXPECT_EQ(cluster_->Lookup("999999").status().code(), Status::kNotFound);
  // slurmdbd stopped: the records cannot be read now but may be later (Unavailable: the
  // provisioner waits a while), unlike a job with no record (NotFound, above).
  ASSERT_EQ(::kill(-state_["pids"]["slurmdbd"].get<int>(), SIGTERM), 0);
  StatusOr<Allocation> down = *f;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       down.ok() && std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(std::chrono::milliseconds(500)))
    down = cluster_->Lookup(*failed);
  EXPECT_EQ(down.status().code(), Status::kUnavailable) << down.status().ToString();
}

// The coordinator crashes while its job runs; Slurm preempts the job's allocation (an
// outsider's job in the higher partition) and, its accounting kept, drops it from squeue
// 2 s after. Restarted, the coordinator finds the allocation unlisted and reads how it
// ended from sacct: a preemption, so the next attempt starts without a restart counted
// (as ProvisionerTest's fake showed; here with Slurm's own records).
TEST_F(SlurmE2eAccountingTest, APreemptionWhileTheCoordinatorWasDownIsReadFromTheAccountingAfterItsRestart) {
  CoordinatorOnSlurm c(InController({}), options_.env, state_.at("ctl").at("addr"), /*ranks_per_node=*/2,
                       {"--slurm-priority", "0:low", "--slurm-priority", "50:high"});
  const std::string a = c.Submit("low", 4, 100000);
  v1::Job job = c.WaitFor(a, 240, [](const v1::Job& j) { return j.checkpoint_step() >= 10 || IsTerminal(j.state()); });
  ASSERT_GE(job.checkpoint_step(), 10) << job.DebugString() << c.log();
  const std::string allocation = job.allocation().id();
  ASSERT_FALSE(allocation.empty()) << job.DebugString();
  c.Crash();
  SlurmOptions high = options_;
  high.priorities = {{50, "high", "", ""}};
  SlurmCluster outsider(high, &runner_);
  AllocationRequest r = Request("outsider", {"sleep", "5"}, 1);
  r.priority = 50;
  ASSERT_TRUE(outsider.Submit(r).ok());
  bool gone = false;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
       !gone && std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(std::chrono::milliseconds(500))) {
    StatusOr<std::map<std::string, SlurmJob>> jobs = cluster_->Poll();
    gone = jobs.ok() && !jobs->count(allocation);
  }
  ASSERT_TRUE(gone) << "the preempted allocation never left squeue";
  // Its record first (slurmctld sends it a moment after the end): a coordinator back while
  // the record still says RUNNING would take the workers' lost leases for a failure.
  StatusOr<Allocation> record = Status::NotFound("not looked up");
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
       !(record.ok() && record->phase == Allocation::Phase::kEnded) && std::chrono::steady_clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(500)))
    record = cluster_->Lookup(allocation);
  ASSERT_TRUE(record.ok() && record->phase == Allocation::Phase::kEnded) << record.status().ToString();
  EXPECT_EQ(record->state, "PREEMPTED");
  c.Start();
  job = c.WaitFor(a, 120, [](const v1::Job& j) { return j.attempt() >= 1 || IsTerminal(j.state()); });
  ASSERT_EQ(job.attempt(), 1) << job.DebugString() << c.log();
  EXPECT_EQ(job.restarts(), 0) << job.DebugString();
  EXPECT_TRUE(HasEvent(job, "the cluster took the allocation back (slurm job " + allocation)) << job.DebugString();
  ASSERT_TRUE(c.Cli({"job", "cancel", a}).ok());
  EXPECT_EQ(c.WaitForEnd(a, 60).state(), v1::CANCELLED);
}

class SlurmE2eThreeNodesTest : public SlurmE2eTest {
 protected:
  SlurmE2eThreeNodesTest() {
    nodes_ = 3;
    slurmd_timeout_ = 10;
  }

  // Runs a 2-rank job, one rank per node, until it has a checkpoint; then `verb`
  // (slurm_cluster.py fail-node or cut-node) strikes the node of rank 1; then the job
  // must end SUCCEEDED on the other nodes, resumed from the newest checkpoint the lost
  // attempt committed (no finished step lost). The job as it ended.
  v1::Job StrikeANodeMidJob(CoordinatorOnSlurm& c, const std::string& verb) {
    const std::string id = c.Submit(verb, 2, 200, 0, /*max_restarts=*/5);
    v1::Job job = c.WaitFor(id, 240, [](const v1::Job& j) {
      return (j.state() == v1::RUNNING && j.checkpoint_step() >= 10) || IsTerminal(j.state());
    });
    EXPECT_EQ(job.state(), v1::RUNNING) << job.DebugString() << c.log();
    if (job.state() != v1::RUNNING || job.placements_size() != 2) return job;
    const std::string rank1 = job.placements(1).worker(), node = rank1.substr(rank1.rfind('-') + 1);
    StatusOr<CommandResult> struck =
        runner_.Run({"python3", kScript, verb, "--dir", (dir_ / "cluster").string(), "--node", node}, "", {}, 60);
    EXPECT_TRUE(struck.ok() && struck->exit_code == 0) << (struck.ok() ? struck->out + struck->err : "");
    job = c.WaitForEnd(id, 420);
    EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.DebugString() << c.log();
    for (const auto& p : job.placements()) EXPECT_NE(p.worker().substr(p.worker().rfind('-') + 1), node) << p.worker();
    EXPECT_TRUE(HasEvent(job, "resumed from step")) << job.DebugString();
    EXPECT_FALSE(HasEvent(job, "the newest checkpoint reported was")) << job.DebugString();
    return job;
  }
};

// A node dies mid-job: every process of its host killed at once (slurmd, the step, the
// worker, the rank). The surviving rank fails on its lost peer (before slurmctld calls
// the node down): the attempt ends with a restart counted, and the next allocation is
// of nodes that are up.
TEST_F(SlurmE2eThreeNodesTest, ANodeThatDiesMidJobCostsARestartAndTheJobFinishesOnTheOthers) {
  CoordinatorOnSlurm c(InController({}), options_.env, state_.at("ctl").at("addr"), /*ranks_per_node=*/1);
  const v1::Job job = StrikeANodeMidJob(c, "fail-node");
  EXPECT_GE(job.attempt(), 1);
  EXPECT_GE(job.restarts(), 1);
}

// A node cut off (its cable pulled: its processes live on, unreachable) while the
// coordinator's lease is longer than slurmctld's node timeout and the ranks wait 300 s
// for a peer: Slurm ends the allocation NODE_FAIL, which costs one counted restart, and
// the next allocation excludes the node.
TEST_F(SlurmE2eThreeNodesTest, ANodeCutOffEndsInNodeFailAndANewAttemptOnTheOtherNodes) {
  CoordinatorOnSlurm c(InController({}), options_.env, state_.at("ctl").at("addr"), /*ranks_per_node=*/1,
                       {"--lease-seconds", "120"});
  const v1::Job job = StrikeANodeMidJob(c, "cut-node");
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_TRUE(HasEvent(job, "a node of the allocation failed (slurm job")) << job.DebugString();
  EXPECT_TRUE(HasEvent(job, "NODE_FAIL")) << job.DebugString();
}

}  // namespace
}  // namespace nightshift
