// The records that decide which workers' checkpoint claims count (issue 40): kept in step
// order, the newest kCommittedCheckpointsKept steps, one digest per holder.
#include "coordinator/checkpoint_records.h"

#include <gtest/gtest.h>

namespace nightshift {
namespace {

TEST(CheckpointRecordsTest, AClaimIsVouchedForOnlyWithTheRecordedWorkerStepAndDigest) {
  v1::Job job;
  job.set_id("j-1");
  EXPECT_FALSE(Vouched(job, "w1", 10, "aa"));
  EXPECT_TRUE(RecordHolder(&job, "w1", 10, "aa"));
  EXPECT_FALSE(RecordHolder(&job, "w1", 10, "aa"));  // nothing new
  EXPECT_TRUE(Vouched(job, "w1", 10, "aa"));
  EXPECT_FALSE(Vouched(job, "w1", 10, "bb"));  // another manifest
  EXPECT_FALSE(Vouched(job, "w1", 11, "aa"));  // another step
  EXPECT_FALSE(Vouched(job, "w2", 10, "aa"));  // another worker
  EXPECT_FALSE(RecordHolder(&job, "w1", 0, "aa"));
  EXPECT_FALSE(RecordHolder(&job, "w1", 12, ""));  // a report without a digest vouches for nothing
  EXPECT_FALSE(Vouched(job, "w1", 12, ""));
  EXPECT_TRUE(RecordHolder(&job, "w1", 10, "cc"));  // the step rewritten there: its new manifest
  EXPECT_FALSE(Vouched(job, "w1", 10, "aa"));
  EXPECT_TRUE(Vouched(job, "w1", 10, "cc"));
}

TEST(CheckpointRecordsTest, StepsStayInOrderAndOnlyTheNewestAreKept) {
  v1::Job job;
  job.set_id("j-1");
  for (int64_t step : {30, 10, 20}) RecordHolder(&job, "w1", step, "d" + std::to_string(step));
  RecordHolder(&job, "w2", 20, "e20");
  ASSERT_EQ(job.committed_checkpoints_size(), 3);
  EXPECT_EQ(job.committed_checkpoints(0).step(), 10);
  EXPECT_EQ(job.committed_checkpoints(1).step(), 20);
  EXPECT_EQ(job.committed_checkpoints(1).holders_size(), 2);
  EXPECT_EQ(job.committed_checkpoints(2).step(), 30);
  EXPECT_EQ(NewestRecordedStep(job), 30);
  const std::vector<v1::HeldCheckpoint> verified = VerifiedCheckpoints(job);
  ASSERT_EQ(verified.size(), 4u);
  EXPECT_EQ(verified[1].step(), 20);
  EXPECT_EQ(verified[1].manifest_sha256(), "d20");
  EXPECT_EQ(verified[2].manifest_sha256(), "e20");
  EXPECT_EQ(verified[3].job_id(), "j-1");
  for (int64_t step = 40; step < 40 + 10 * kCommittedCheckpointsKept; step += 10)
    RecordHolder(&job, "w1", step, "d" + std::to_string(step));
  ASSERT_EQ(job.committed_checkpoints_size(), kCommittedCheckpointsKept);
  EXPECT_FALSE(Vouched(job, "w1", 30, "d30"));  // dropped with the oldest
  EXPECT_FALSE(RecordHolder(&job, "w1", 5, "d5"));  // older than every kept step
  EXPECT_EQ(job.committed_checkpoints(0).step(), 40);
}

}  // namespace
}  // namespace nightshift
