// nightshift sweep ...: requests and exit codes against a fake coordinator.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "tests/cli/fake_coordinator.h"

namespace nightshift::cli {
namespace {

using testing::FakeCoordinator;
using testing::RunCli;

// As `job submit`: a submit whose calls fail UNAVAILABLE is sent again with the same
// request id until one succeeds (the coordinator gives a retry the sweep the first call
// made: SweepsTest.ARetriedSubmissionGetsTheSweepTheFirstMade); a refusal is not retried.
TEST(SweepVerbsTest, SubmitRetriesUnreachableWithOneRequestIdUntilAccepted) {
  FakeCoordinator fake;
  const std::string path = ::testing::TempDir() + "/sweep_verbs_" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(path) << "base: {model: {arch: transformer_classifier}, data: {path: /data}}\n"
                         "search: {train.lr: {choices: [0.001, 0.01]}}\nmetric: val_loss\nmethod: grid\n";
  fake.jobs.submit_failures = 2;
  auto r = RunCli({"sweep", "submit", path}, fake.Channel());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "s-000001\n");
  ASSERT_EQ(fake.jobs.sweep_submits.size(), 3u);
  const std::string id = fake.jobs.sweep_submits[0].request_id();
  EXPECT_EQ(id.size(), 32u) << id;
  for (const auto& req : fake.jobs.sweep_submits) EXPECT_EQ(req.request_id(), id);

  fake.jobs.sweep_submits.clear();
  fake.jobs.submit_failures = 0;
  fake.jobs.fail = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "metric: unknown");
  EXPECT_EQ(RunCli({"sweep", "submit", path}, fake.Channel()).code, 3);
  EXPECT_EQ(fake.jobs.sweep_submits.size(), 1u);
  std::remove(path.c_str());
}

// `sweep list` asks for every page and lists them all, in the order given.
TEST(SweepVerbsTest, ListReadsEveryPage) {
  FakeCoordinator fake;
  fake.jobs.sweep_pages.resize(2);
  for (int i = 1; i <= 3; ++i) {
    v1::Sweep w;
    w.set_id("s-00000" + std::to_string(i));
    w.set_state(v1::RUNNING);
    w.mutable_spec()->set_method("asha");
    fake.jobs.sweep_pages[i <= 2 ? 0 : 1].push_back(w);
  }
  auto r = RunCli({"sweep", "list"}, fake.Channel());
  EXPECT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(fake.jobs.sweep_lists.size(), 2u);
  EXPECT_EQ(fake.jobs.sweep_lists[1].page_token(), "1");
  const size_t one = r.out.find("s-000001"), two = r.out.find("s-000002"), three = r.out.find("s-000003");
  EXPECT_TRUE(one < two && two < three && three != std::string::npos) << r.out;
}

}  // namespace
}  // namespace nightshift::cli
