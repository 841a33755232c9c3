// SlurmCluster (coordinator/slurm.h) against real Slurm 22.05 daemons: munged, slurmctld
// and two slurmd on test hosts of their own (tests/support/slurm_cluster.py: network
// namespaces with 198.18.x.y addresses, torn down at the end, or by its watchdog when
// this process dies). An allocation of both nodes runs its node command once per node
// and completes; one that sleeps is seen running on both nodes and is gone after Cancel;
// a node command exiting 3 fails the allocation with exit code 3; an unknown partition
// is refused as the job's error, more nodes than there are waits with Slurm's reason.
// Needs root (skips otherwise, saying why).
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "common/command.h"
#include "coordinator/slurm.h"

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
    StatusOr<CommandResult> up =
        runner_.Run({"python3", kScript, "up", "--dir", (dir_ / "cluster").string(), "--nodes", "2", "--min-job-age",
                     "300", "--lifetime", "600", "--watch-pid", std::to_string(::getpid())},
                    "", {}, 120);
    ASSERT_TRUE(up.ok()) << up.status().ToString();
    ASSERT_EQ(up->exit_code, 0) << up->out << up->err;
    const nlohmann::json state = nlohmann::json::parse(up->out);
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

  SlurmAllocationRequest Request(const std::string& job, std::vector<std::string> command, int nodes = 2) {
    SlurmAllocationRequest r;
    r.job_id = job;
    r.nodes = nodes;
    r.time_limit_minutes = 5;
    r.node_command = std::move(command);
    return r;
  }

  // Polls until `done` holds for the allocation (as squeue lists it), within 60 s.
  SlurmJob WaitFor(const std::string& id, const std::function<bool(const SlurmJob&)>& done, const std::string& what) {
    SlurmJob last;
    for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
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

  SubprocessRunner runner_;
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

}  // namespace
}  // namespace nightshift
