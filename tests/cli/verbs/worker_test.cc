// nightshift worker ...: requests, output and exit codes against a fake coordinator.
#include <gtest/gtest.h>

#include "tests/cli/fake_coordinator.h"

namespace nightshift::cli {
namespace {

using testing::FakeCoordinator;
using testing::RunCli;

TEST(WorkerVerbsTest, ListHasOneRowPerWorkerWithItsStateAndTasks) {
  FakeCoordinator fake;
  auto r = RunCli({"worker", "list"}, fake.Channel());
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out,
            "NAME             STATE          SLOTS  USED   MEMORY  TASKS\n"
            "w1               WORKER_READY   4      2      48.0G   j1\n"
            "w2               WORKER_READY,CORDONED 2      0      -       \n"
            "w3               WORKER_LOST    8      0      -       \n"
            "w4               WORKER_READY,DRAINING 2      2      -       j6,j7\n");
  r = RunCli({"worker", "list", "-o", "json"}, fake.Channel());
  EXPECT_NE(r.out.find("\"draining\": true"), std::string::npos) << r.out;
}

TEST(WorkerVerbsTest, CordonUncordonAndDrainSayWhatTheWorkerIsNow) {
  FakeCoordinator fake;
  auto r = RunCli({"worker", "cordon", "w1"}, fake.Channel());
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "worker w1: WORKER_READY,CORDONED\n");
  r = RunCli({"worker", "uncordon", "w1"}, fake.Channel());
  EXPECT_EQ(r.out, "worker w1: WORKER_READY\n");
  ASSERT_EQ(fake.admin.cordons.size(), 2u);
  EXPECT_FALSE(fake.admin.cordons[0].uncordon());
  EXPECT_TRUE(fake.admin.cordons[1].uncordon());
  EXPECT_EQ(fake.admin.cordons[1].name(), "w1");

  r = RunCli({"worker", "drain", "w2"}, fake.Channel());
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "worker w2: WORKER_READY,DRAINING\n");
  ASSERT_EQ(fake.admin.drains.size(), 1u);
  EXPECT_EQ(fake.admin.drains[0].name(), "w2");

  r = RunCli({"worker", "drain", "w2", "-o", "json"}, fake.Channel());
  EXPECT_EQ(r.out.rfind("{", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\"name\": \"w2\""), std::string::npos) << r.out;
}

TEST(WorkerVerbsTest, RemoveAsksTheCoordinatorToForgetTheWorker) {
  FakeCoordinator fake;
  auto r = RunCli({"worker", "remove", "w3"}, fake.Channel());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "worker w3 removed\n");
  ASSERT_EQ(fake.admin.removals.size(), 1u);
  EXPECT_EQ(fake.admin.removals[0].name(), "w3");
  r = RunCli({"worker", "remove", "w3"}, fake.Channel());
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.err, "error: NOT_FOUND: no worker w3\n");
}

TEST(WorkerVerbsTest, AnUnknownWorkerOrARefusalExits3) {
  FakeCoordinator fake;
  auto r = RunCli({"worker", "cordon", "nope"}, fake.Channel());
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.err, "error: NOT_FOUND: worker nope not found\n");
  fake.admin.fail = grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "admin only");
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"worker", "list"}, {"worker", "drain", "w1"}, {"worker", "uncordon", "w1"}}) {
    r = RunCli(args, fake.Channel());
    EXPECT_EQ(r.code, 3) << args[1];
    EXPECT_EQ(r.err, "error: PERMISSION_DENIED: admin only\n") << args[1];
    EXPECT_EQ(r.out, "") << args[1];
  }
}

}  // namespace
}  // namespace nightshift::cli
