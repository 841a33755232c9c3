// nightshift cluster status against a fake coordinator.
#include <gtest/gtest.h>

#include "tests/cli/fake_coordinator.h"

namespace nightshift::cli {
namespace {

using testing::FakeCoordinator;
using testing::RunCli;

TEST(ClusterVerbsTest, StatusShowsWorkersSlotsUnfinishedJobsAndTheQueue) {
  FakeCoordinator fake;
  auto r = RunCli({"cluster", "status"}, fake.Channel());
  EXPECT_EQ(r.code, 0) << r.err;
  // Schedulable slots: READY and not cordoned (w1's 4); used: every worker's (w1 2 + w4 2).
  EXPECT_EQ(r.out,
            "WORKER           STATE              SLOTS  USED   MEMORY  JOBS\n"
            "w1               WORKER_READY       4      2      48.0G   j1\n"
            "w2               WORKER_READY,CORDONED 2      0      -       \n"
            "w3               WORKER_LOST        8      0      -       \n"
            "w4               WORKER_READY,DRAINING 2      2      -       j6,j7\n"
            "\n"
            "3 workers ready, 4 of 4 schedulable slots in use\n"
            "PREEMPTED: 1  QUEUED: 1  RUNNING: 1  \n"
            "\n"
            "QUEUE      PRIORITY  SIZE  OWNER  REASON\n"
            "j3         5         4     -      waiting for 4 slots\n"
            "j5         -1        1     bob    preempted by j3\n");
  // One page of the unfinished states only.
  ASSERT_EQ(fake.jobs.lists.size(), 1u);
  EXPECT_EQ(fake.jobs.lists[0].page_size(), 1000);
  EXPECT_EQ(fake.jobs.lists[0].states_size(), 5);
}

TEST(ClusterVerbsTest, JsonHasBothAnswers) {
  FakeCoordinator fake;
  auto r = RunCli({"cluster", "status", "-o", "json"}, fake.Channel());
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out.rfind("{\"workers\": {", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("}\n, \"jobs\": {"), std::string::npos) << r.out;  // ToJson ends its text with a newline
  EXPECT_NE(r.out.find("\"owner\": \"bob\""), std::string::npos) << r.out;
}

TEST(ClusterVerbsTest, EitherCallRefusedExits3) {
  FakeCoordinator fake;
  fake.admin.fail = grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "admin only");
  auto r = RunCli({"cluster", "status"}, fake.Channel());
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "error: PERMISSION_DENIED: admin only\n");
  EXPECT_TRUE(fake.jobs.lists.empty());
  fake.admin.fail = grpc::Status::OK;
  fake.jobs.fail = grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no token");
  r = RunCli({"cluster", "status"}, fake.Channel());
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "");
}

}  // namespace
}  // namespace nightshift::cli
