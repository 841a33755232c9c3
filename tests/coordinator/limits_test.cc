// The size limits on what clients and workers send (coordinator/limits.h), alone.
#include "coordinator/limits.h"

#include <gtest/gtest.h>

#include <functional>

namespace nightshift {
namespace {

// Whether `s` is INVALID_ARGUMENT with a message that starts with `field: `.
void ExpectRefused(const Status& s, const std::string& field) {
  EXPECT_EQ(s.code(), Status::kInvalidArgument) << s.ToString();
  EXPECT_EQ(s.message().rfind(field + ": ", 0), 0u) << s.message();
}

TEST(LimitsTest, ACancelReasonOfThreeMiBIsRefusedNamingTheField) {
  EXPECT_TRUE(CheckCancelReason(std::string(limits::kCancelReasonBytes, 'x')).ok());
  ExpectRefused(CheckCancelReason(std::string(3 << 20, 'x')), "reason");
  ExpectRefused(CheckJobId(std::string(1 << 20, 'j')), "id");
}

TEST(LimitsTest, ALongTaskErrorIsTruncatedWithAMarkerOnACharacterBoundary) {
  const std::string fits(limits::kTaskErrorBytes, 'e');
  EXPECT_EQ(TruncateTaskError(fits), fits);
  // 3 MiB of a two-byte character: the cut must not split one.
  std::string long_error;
  while (long_error.size() < (3u << 20)) long_error += "\xc3\xa9";  // é
  const std::string cut = TruncateTaskError(long_error);
  EXPECT_LE(cut.size(), limits::kTaskErrorBytes);
  const size_t marker = cut.find(limits::kTruncatedMarker);
  ASSERT_NE(marker, std::string::npos) << cut.substr(cut.size() - 64);
  EXPECT_EQ(marker % 2, 0u);  // whole characters before it
  EXPECT_EQ(cut.substr(marker), std::string(limits::kTruncatedMarker) + std::to_string(long_error.size() - marker) +
                                    " bytes]");
}

TEST(LimitsTest, EveryStringAndListOfATaskStatusIsBounded) {
  v1::TaskStatus s;
  s.mutable_task()->set_job_id("j-000001");
  s.set_error(std::string(1 << 20, 'e'));
  ASSERT_TRUE(LimitTaskStatus("status", &s).ok());
  EXPECT_LE(s.error().size(), limits::kTaskErrorBytes);  // truncated, not refused

  const auto refused = [](const std::function<void(v1::TaskStatus*)>& poison, const std::string& field) {
    v1::TaskStatus t;
    poison(&t);
    ExpectRefused(LimitTaskStatus("status", &t), field);
  };
  const std::string huge(1 << 20, 'x');
  refused([&](v1::TaskStatus* t) { t->mutable_task()->set_job_id(huge); }, "status.task.job_id");
  refused([&](v1::TaskStatus* t) { t->set_checkpoint_path(huge); }, "status.checkpoint_path");
  refused([&](v1::TaskStatus* t) { t->set_model_path(huge); }, "status.model_path");
  refused([&](v1::TaskStatus* t) { t->set_master_addr(huge); }, "status.master_addr");
  refused([&](v1::TaskStatus* t) { t->set_cache_key(huge); }, "status.cache_key");
  refused([&](v1::TaskStatus* t) { (*t->mutable_metrics())[huge] = 1; }, "status.metrics name");
  refused(
      [&](v1::TaskStatus* t) {
        for (int i = 0; i <= limits::kMetricsPerReport; ++i) (*t->mutable_metrics())["m" + std::to_string(i)] = i;
      },
      "status.metrics");
  refused(
      [&](v1::TaskStatus* t) {
        for (int i = 0; i <= limits::kEvalsPerReport; ++i) t->add_evals()->set_step(i);
      },
      "status.evals");
  refused([&](v1::TaskStatus* t) { (*t->add_evals()->mutable_metrics())[huge] = 1; }, "status.evals.metrics name");
}

TEST(LimitsTest, AWorkersNameAddressGpusAndHeartbeatListsAreBounded) {
  v1::WorkerInfo w;
  w.set_name("w1");
  w.set_log_address("10.0.0.1:7071");
  EXPECT_TRUE(CheckWorkerInfo(w).ok());
  w.set_log_address(std::string(1 << 20, 'a'));
  ExpectRefused(CheckWorkerInfo(w), "log_address");
  w.set_log_address("");
  w.set_name(std::string(limits::kWorkerNameBytes + 1, 'w'));
  ExpectRefused(CheckWorkerInfo(w), "name");
  w.set_name("w1");
  w.add_gpus()->set_name(std::string(1 << 20, 'g'));
  ExpectRefused(CheckWorkerInfo(w), "gpus.name");

  std::vector<v1::TaskStatus> tasks(2);
  tasks[1].set_checkpoint_path(std::string(1 << 20, 'p'));
  ExpectRefused(LimitHeartbeat("w1", &tasks, nullptr, {}), "tasks[1].checkpoint_path");
  tasks.assign(limits::kTasksPerWorker + 1, v1::TaskStatus());
  ExpectRefused(LimitHeartbeat("w1", &tasks, nullptr, {}), "tasks");
  tasks.clear();
  v1::CacheReport cache;
  cache.add_entries()->set_key(std::string(1 << 20, 'k'));
  ExpectRefused(LimitHeartbeat("w1", &tasks, &cache, {}), "cache.entries.key");
  std::vector<v1::HeldCheckpoint> held(1);
  held[0].set_job_id(std::string(1 << 20, 'j'));
  ExpectRefused(LimitHeartbeat("w1", &tasks, nullptr, held), "checkpoints.job_id");
  EXPECT_TRUE(LimitHeartbeat("w1", &tasks, nullptr, {}).ok());
}

}  // namespace
}  // namespace nightshift
