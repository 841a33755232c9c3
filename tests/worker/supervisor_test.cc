// The supervisor with real children: /bin/sh scripts that write progress lines to fd 3,
// sleep at most 30 s and are stopped by the tests well before.
#include "worker/supervisor.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/worker/test_dirs.h"

namespace nightshift {
namespace {

namespace fs = std::filesystem;

class SupervisorTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = testdirs::FreshTestDir("supervisor");
  }
  void TearDown() override { fs::remove_all(dir_); }

  Supervisor::Child Shell(int id, const std::string& script) {
    return {id, {"/bin/sh", "-c", script}, {{"CHILD_ID", std::to_string(id)}}, Log(id)};
  }
  std::string Log(int id) const { return dir_ + "/child-" + std::to_string(id) + ".log"; }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static double Since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }

  std::string dir_;
};

TEST_F(SupervisorTest, LinesArriveWholeAndOutputGoesToTheLog) {
  Supervisor supervisor({"test", 10, 1 << 20, 1});
  // One line written in two pieces; stdout and stderr both go to the log.
  ASSERT_TRUE(supervisor
                  .Start({Shell(5, "printf 'one\\ntw' >&3; sleep 0.2; printf 'o\\n' >&3; "
                                   "echo out $CHILD_ID; echo err >&2")})
                  .ok());
  std::vector<std::pair<int, std::string>> lines;
  Supervisor::Result result = supervisor.Wait([&](int id, const std::string& line) { lines.push_back({id, line}); });
  EXPECT_EQ(lines, (std::vector<std::pair<int, std::string>>{{5, "one"}, {5, "two"}}));
  EXPECT_EQ(Read(Log(5)), "out 5\nerr\n");
  ASSERT_EQ(result.exits.size(), 1u);
  EXPECT_TRUE(result.exits[0].ok());
  EXPECT_EQ(result.failed(), nullptr);
  EXPECT_FALSE(supervisor.stopping());

  // The next run (the ranks, after data preparation) reports its own exits.
  ASSERT_TRUE(supervisor.Start({Shell(0, "exit 0"), Shell(1, "exit 0")}).ok());
  result = supervisor.Wait([](int, const std::string&) {});
  ASSERT_EQ(result.exits.size(), 2u);
  EXPECT_EQ(result.exits[1].id, 1);
  EXPECT_EQ(result.failed(), nullptr);
}

// Rank 1 fails; rank 0 would wait for it forever, so it is stopped. Rank 1 is the
// cause, although rank 0 (killed by SIGTERM) did not exit 0 either and comes first.
TEST_F(SupervisorTest, AFailureStopsThePeersAndIsTheOneToBlame) {
  Supervisor supervisor({"test", 10, 1 << 20, 1});
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(supervisor.Start({Shell(0, "exec sleep 30"), Shell(1, "sleep 0.2; exit 3")}).ok());
  Supervisor::Result result = supervisor.Wait([](int, const std::string&) {});
  EXPECT_LT(Since(t0), 10);
  EXPECT_TRUE(supervisor.stopping());
  ASSERT_EQ(result.exits.size(), 2u);
  EXPECT_TRUE(WIFSIGNALED(result.exits[0].wait_status) && WTERMSIG(result.exits[0].wait_status) == SIGTERM);
  ASSERT_TRUE(result.first_failure.has_value());
  EXPECT_EQ(*result.first_failure, 1);
  ASSERT_NE(result.failed(), nullptr);
  EXPECT_EQ(result.failed()->id, 1);
  EXPECT_EQ(WEXITSTATUS(result.failed()->wait_status), 3);
  EXPECT_EQ(result.failed()->log_path, Log(1));
}

// A stop is SIGTERM; a child that ignores it is killed when the grace is over.
TEST_F(SupervisorTest, StopTermsThenKillsAfterTheGrace) {
  Supervisor supervisor({"test", /*stop_grace_seconds=*/0.5, 1 << 20, 1});
  ASSERT_TRUE(supervisor
                  .Start({Shell(0, "echo ready >&3; exec sleep 30"),
                          Shell(1, "trap '' TERM; echo ready >&3; sleep 30")})
                  .ok());
  int ready = 0;
  auto t0 = std::chrono::steady_clock::now();
  Supervisor::Result result = supervisor.Wait([&](int, const std::string& line) {
    if (line == "ready" && ++ready == 2) {
      t0 = std::chrono::steady_clock::now();
      supervisor.Stop();  // as the agent does, from another thread
    }
  });
  const double seconds = Since(t0);
  EXPECT_GE(seconds, 0.5);
  EXPECT_LT(seconds, 5);
  ASSERT_EQ(result.exits.size(), 2u);
  EXPECT_EQ(WTERMSIG(result.exits[0].wait_status), SIGTERM);
  EXPECT_EQ(WTERMSIG(result.exits[1].wait_status), SIGKILL);
  EXPECT_FALSE(result.first_failure.has_value());  // stopped, not failed
  ASSERT_NE(result.failed(), nullptr);              // but it did not succeed either
  EXPECT_EQ(result.failed()->id, 0);
}

// Hung children get no SIGTERM (they would not act on it): their thread stacks go to
// their logs and they are killed.
TEST_F(SupervisorTest, DumpStacksWritesThemToTheLogThenKills) {
  Supervisor supervisor({"test", 10, 1 << 20, 1});
  ASSERT_TRUE(supervisor.Start({Shell(0, "echo ready >&3; exec sleep 30")}).ok());
  const auto t0 = std::chrono::steady_clock::now();
  Supervisor::Result result = supervisor.Wait([&](int, const std::string&) { supervisor.Stop(/*dump_stacks=*/true); });
  EXPECT_LT(Since(t0), 40);  // gdb gets at most 30 s
  ASSERT_EQ(result.exits.size(), 1u);
  EXPECT_EQ(WTERMSIG(result.exits[0].wait_status), SIGKILL);
  const std::string log = Read(Log(0));
  EXPECT_NE(log.find("thread stacks of pid"), std::string::npos) << log;
  EXPECT_NE(log.find("==== end of stacks ===="), std::string::npos) << log;
}

// A stopped child (SIGSTOP) stops on SIGTERM at once, not at the SIGKILL after the grace.
TEST_F(SupervisorTest, AStoppedChildActsOnTheStopWithoutWaitingForTheGrace) {
  Supervisor supervisor({"test", 20, 1 << 20, 1});
  ASSERT_TRUE(supervisor.Start({Shell(0, "echo ready >&3; exec sleep 30")}).ok());
  std::chrono::steady_clock::time_point t0;
  Supervisor::Result result = supervisor.Wait([&](int, const std::string&) {
    supervisor.Signal(0, SIGSTOP);
    t0 = std::chrono::steady_clock::now();
    supervisor.Stop();
  });
  EXPECT_LT(Since(t0), 10);  // the grace is 20 s
  EXPECT_EQ(WTERMSIG(result.exits.at(0).wait_status), SIGTERM);
}

// A stop that comes before the children do reaches them as they start.
TEST_F(SupervisorTest, StopBeforeStartStopsTheChildrenAtOnce) {
  Supervisor supervisor({"test", 10, 1 << 20, 1});
  supervisor.Stop();
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(supervisor.Start({Shell(0, "exec sleep 30")}).ok());
  Supervisor::Result result = supervisor.Wait([](int, const std::string&) {});
  EXPECT_LT(Since(t0), 5);
  EXPECT_EQ(WTERMSIG(result.exits.at(0).wait_status), SIGTERM);
}

}  // namespace
}  // namespace nightshift
