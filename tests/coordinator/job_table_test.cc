// The job table alone: what reaches the store and comes back on a reopen (FakeJobStore,
// and RocksDB in a temporary folder), fail-stop on a failing store, request-id dedupe,
// pages, and the watchers.
#include "coordinator/job_table.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "tests/coordinator/parts.h"

namespace nightshift {
namespace {

using namespace std::chrono_literals;

class JobTableTest : public PartsTest {
 protected:
  // A new table over the same disk, loaded: the coordinator restarted.
  void Reopen() {
    Build();
    auto loaded = jobs_->Load();
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  }
};

TEST_F(JobTableTest, ASubmittedJobIsOnDiskBeforeSubmitReturnsAndComesBackOnAReopen) {
  auto job = jobs_->Submit(Spec(), "alice", "req-1", 1000);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->id(), "j-000001");
  EXPECT_EQ(job->state(), v1::QUEUED);
  ASSERT_EQ(disk_->jobs.count("j-000001"), 1u);
  EXPECT_EQ(disk_->jobs.at("j-000001").created().seconds(), 1767225600);  // the FakeClock's time of day
  JobEntry* entry = jobs_->Find("j-000001");
  jobs_->SetState(entry, v1::RUNNING, "all 1 ranks started");
  EXPECT_EQ(entry->version, 2u);
  entry->history.add_attempts()->add_evals()->set_step(7);
  jobs_->PersistHistory(entry);

  Reopen();
  const JobEntry* loaded = jobs_->Find("j-000001");
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(loaded->job.state(), v1::RUNNING);
  EXPECT_EQ(loaded->job.events_size(), 2);
  ASSERT_EQ(loaded->history.attempts_size(), 1);
  EXPECT_EQ(loaded->history.job_id(), "j-000001");
  EXPECT_EQ(loaded->last_advance, clock_.Now());  // hang detection starts over
  // Numbering goes on after the highest stored job, and a retried request finds its job.
  EXPECT_EQ(jobs_->Submit(Spec(), "alice", "", 1000)->id(), "j-000002");
  EXPECT_EQ(jobs_->Submit(Spec(), "alice", "req-1", 1000)->id(), "j-000001");
  EXPECT_EQ(jobs_->Submit(Spec(), "bob", "req-1", 1000)->id(), "j-000003");  // request ids are per owner
  EXPECT_EQ(jobs_->List(JobQuery{}, nullptr).jobs.size(), 3u);
}

// The same through the RocksDB store, written synced, closed and opened again.
TEST_F(JobTableTest, RecordsAndHistorySurviveAReopenOfTheRocksDbStore) {
  const std::string dir = testing::TempDir() + "/job_table." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const auto open = [&] {
    auto store = JobStore::Open(dir);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    jobs_ = std::make_unique<JobTable>(std::move(store.value()), &clock_);
    auto loaded = jobs_->Load();
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
    return loaded.ok() ? loaded.value() : 0;
  };
  EXPECT_EQ(open(), 0u);
  const std::string id = jobs_->Submit(Spec(2), "alice", "req-1", 1000)->id();
  JobEntry* entry = jobs_->Find(id);
  jobs_->SetState(entry, v1::FAILED, "rank 1 failed");
  entry->history.add_attempts()->add_evals()->set_step(3);
  jobs_->PersistHistory(entry);
  ASSERT_TRUE(jobs_->store_error().ok());
  jobs_.reset();  // closes the store
  EXPECT_EQ(open(), 1u);
  const JobEntry* loaded = jobs_->Find(id);
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(loaded->job.state(), v1::FAILED);
  EXPECT_EQ(loaded->job.reason(), "rank 1 failed");
  EXPECT_EQ(loaded->job.spec().resources().world_size(), 2);
  EXPECT_EQ(loaded->history.attempts_size(), 1);
  EXPECT_EQ(jobs_->Submit(Spec(2), "alice", "req-1", 1000)->id(), id);
  jobs_.reset();
  std::filesystem::remove_all(dir);
}

// The attacker (or a torn write): a job record in RocksDB that does not parse. The table
// loads without it, the store has moved it aside, and its number is not handed out again.
TEST_F(JobTableTest, AJobRecordThatDoesNotParseIsMovedAsideAndTheRestLoad) {
  const std::string dir = testing::TempDir() + "/job_table_corrupt." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const auto open = [&] {
    auto store = JobStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    jobs_ = std::make_unique<JobTable>(std::move(store.value()), &clock_);
    auto loaded = jobs_->Load();
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  };
  open();
  for (int i = 0; i < 3; ++i) jobs_->Submit(Spec(), "alice", "", 1000);
  jobs_.reset();
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "job/j-000003", "\x0a\xff\xff\xff\xff\xff torn").ok());
  }
  open();
  EXPECT_EQ(jobs_->moved_aside(), std::vector<std::string>{"job/j-000003"});
  EXPECT_EQ(jobs_->entries().size(), 2u);
  EXPECT_EQ(jobs_->Submit(Spec(), "alice", "", 1000)->id(), "j-000004");
  jobs_.reset();
  open();
  EXPECT_TRUE(jobs_->moved_aside().empty());  // moved once, not met again
  EXPECT_EQ(jobs_->entries().size(), 3u);
  jobs_.reset();
  std::filesystem::remove_all(dir);
}

TEST_F(JobTableTest, ASubmitWhoseWriteFailsIsNotAcceptedAndChangesNothing) {
  disk_->fail_writes = true;
  auto refused = jobs_->Submit(Spec(), "alice", "req-1", 1000);
  ASSERT_EQ(refused.status().code(), Status::kUnavailable);
  EXPECT_EQ(refused.status().message().rfind("job not accepted: ", 0), 0u) << refused.status().message();
  EXPECT_TRUE(jobs_->entries().empty());
  EXPECT_TRUE(jobs_->store_error().ok());  // nothing was half done: the table goes on
  disk_->fail_writes = false;
  auto accepted = jobs_->Submit(Spec(), "alice", "req-1", 1000);
  ASSERT_TRUE(accepted.ok());
  EXPECT_EQ(accepted->id(), "j-000001");  // the refused one took no number
}

// After the first failed write the table writes nothing more: a restart rebuilds from
// what is on disk.
TEST_F(JobTableTest, AFailedWriteStopsEveryLaterWrite) {
  JobEntry* entry = Submit();
  disk_->fail_writes = true;
  jobs_->SetState(entry, v1::CANCELLED, "cancelled by user");
  EXPECT_EQ(jobs_->store_error().code(), Status::kUnavailable);
  EXPECT_NE(jobs_->store_error().message().find("No space left on device"), std::string::npos);
  EXPECT_EQ(disk_->failed_writes, 1);
  disk_->fail_writes = false;
  const uint64_t version = entry->version;
  jobs_->Persist(entry, /*sync=*/true);
  jobs_->PersistHistory(entry);
  EXPECT_EQ(entry->version, version);  // not bumped: watchers are told nothing
  EXPECT_EQ(disk_->jobs.at(entry->job.id()).state(), v1::QUEUED);
  Reopen();
  EXPECT_EQ(jobs_->Find("j-000001")->job.state(), v1::QUEUED);
}

TEST_F(JobTableTest, ARequestIdIsShortAndPlainAndNamesItsJob) {
  EXPECT_TRUE(JobTable::CheckRequestId("").ok());
  EXPECT_TRUE(JobTable::CheckRequestId("ci:build-42.retry_1").ok());
  EXPECT_EQ(JobTable::CheckRequestId("a b").code(), Status::kInvalidArgument);
  EXPECT_EQ(JobTable::CheckRequestId(std::string(129, 'a')).code(), Status::kInvalidArgument);
  const std::string id = jobs_->Submit(Spec(1), "alice", "req-1", 1000)->id();
  auto other = jobs_->Submit(Spec(2), "alice", "req-1", 1000);
  ASSERT_EQ(other.status().code(), Status::kInvalidArgument);
  EXPECT_NE(other.status().message().find(id), std::string::npos) << other.status().message();
}

TEST_F(JobTableTest, AnOwnerAtTheLimitOfUnfinishedJobsIsRefusedButRetriesAreNot) {
  const std::string id = jobs_->Submit(Spec(), "alice", "req-1", 1)->id();
  EXPECT_EQ(jobs_->Submit(Spec(), "alice", "req-2", 1).status().code(), Status::kResourceExhausted);
  EXPECT_EQ(jobs_->Submit(Spec(), "alice", "req-1", 1)->id(), id);
  EXPECT_TRUE(jobs_->Submit(Spec(), "bob", "", 1).ok());
  jobs_->SetState(jobs_->Find(id), v1::SUCCEEDED, "all ranks finished");
  EXPECT_TRUE(jobs_->Submit(Spec(), "alice", "req-2", 1).ok());
}

TEST_F(JobTableTest, PagesInSubmitOrderFilteredByStateAndOwner) {
  for (int i = 0; i < 5; ++i) Submit(Spec(), i % 2 ? "bob" : "alice");
  jobs_->SetState(jobs_->Find("j-000002"), v1::CANCELLED, "cancelled by user");
  JobQuery query;
  query.limit = 2;
  JobPage first = jobs_->List(query, nullptr);
  ASSERT_EQ(first.jobs.size(), 2u);
  EXPECT_EQ(first.jobs[0].id(), "j-000001");
  EXPECT_EQ(first.next_after_seq, 2u);
  query.after_seq = first.next_after_seq;
  query.states = {v1::QUEUED};
  JobPage second = jobs_->List(query, nullptr);
  ASSERT_EQ(second.jobs.size(), 2u);
  EXPECT_EQ(second.jobs[0].id(), "j-000003");
  EXPECT_EQ(second.jobs[1].id(), "j-000004");
  const std::string bob = "bob";
  JobPage bobs = jobs_->List(JobQuery{}, &bob);
  ASSERT_EQ(bobs.jobs.size(), 2u);
  EXPECT_EQ(bobs.next_after_seq, 0u);
}

TEST_F(JobTableTest, AWatcherSeesTheNextVersionOrTimesOut) {
  std::mutex mu;  // the Coordinator's
  const std::string id = Submit()->job.id();
  std::unique_lock<std::mutex> lock(mu);
  uint64_t version = 0;
  ASSERT_TRUE(jobs_->WaitForChange(lock, id, &version, 0ms).ok());
  EXPECT_EQ(version, 1u);
  EXPECT_EQ(jobs_->WaitForChange(lock, id, &version, 10ms).status().code(), Status::kDeadlineExceeded);
  EXPECT_EQ(jobs_->WaitForChange(lock, "j-9", &version, 0ms).status().code(), Status::kNotFound);
  std::thread writer([&] {
    std::lock_guard<std::mutex> writing(mu);  // taken once the watcher waits
    jobs_->SetState(jobs_->Find(id), v1::CANCELLED, "cancelled by user");
  });
  auto changed = jobs_->WaitForChange(lock, id, &version, 60s);
  lock.unlock();
  writer.join();
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  EXPECT_EQ(changed->state(), v1::CANCELLED);
  EXPECT_EQ(version, 2u);
}

TEST_F(JobTableTest, EventsCarryTheClocksTimeOfDayAndRunningRestartsHangDetection) {
  JobEntry* entry = Submit();
  clock_.Advance(90s);
  jobs_->SetState(entry, v1::RUNNING, "all 1 ranks started", 5);
  const v1::JobEvent& ev = entry->job.events(1);
  EXPECT_EQ(ev.time().seconds(), 1767225600 + 90);
  EXPECT_EQ(ev.state(), v1::RUNNING);
  EXPECT_EQ(ev.step(), 5);
  EXPECT_EQ(entry->job.updated().seconds(), 1767225600 + 90);
  EXPECT_EQ(entry->last_advance, clock_.Now());
}

// Retention: a finished job goes, with its history and its request id, once it finished
// before the cutoff; an unfinished one stays however old it is. Its number is not handed
// out again, also after a restart.
TEST_F(JobTableTest, FinishedJobsBeforeTheCutoffAreRemovedWithTheirHistoryAndRequestId) {
  JobEntry* done = jobs_->Find(jobs_->Submit(Spec(), "alice", "req-1", 1000)->id());
  jobs_->SetState(done, v1::SUCCEEDED, "all ranks finished");
  done->history.add_attempts()->add_evals()->set_step(3);
  jobs_->PersistHistory(done);
  JobEntry* queued = Submit(Spec(), "alice");
  clock_.Advance(std::chrono::hours(24));
  const auto cutoff = clock_.WallNow() - std::chrono::hours(25);  // finished after it: kept
  EXPECT_EQ(jobs_->RemoveFinishedBefore(cutoff), 0);
  EXPECT_EQ(jobs_->RemoveFinishedBefore(clock_.WallNow()), 1);
  EXPECT_EQ(jobs_->Find("j-000001"), nullptr);
  ASSERT_NE(jobs_->Find(queued->job.id()), nullptr);
  EXPECT_EQ(disk_->jobs.count("j-000001"), 0u);
  EXPECT_EQ(disk_->metrics.count("j-000001"), 0u);
  EXPECT_EQ(jobs_->List(JobQuery{}, nullptr).jobs.size(), 1u);
  // The request id went with it: the same id makes a new job now.
  EXPECT_EQ(jobs_->Submit(Spec(2), "alice", "req-1", 1000)->id(), "j-000003");
  JobEntry* newest = jobs_->Find("j-000003");
  jobs_->SetState(newest, v1::CANCELLED, "cancelled by user");
  jobs_->Remove(newest);  // the newest: its number stays taken too
  Reopen();
  EXPECT_EQ(jobs_->entries().size(), 1u);
  EXPECT_EQ(jobs_->Submit(Spec(), "alice", "", 1000)->id(), "j-000004");
}

// Retention, for sweeps: an ended sweep goes once its last event is before the cutoff; a
// running one stays however old it is. The newest sweep's number is not handed out again
// after a restart, nor a number whose record was moved aside.
TEST_F(JobTableTest, EndedSweepsBeforeTheCutoffAreRemovedAndTheirNumbersNotReused) {
  ASSERT_TRUE(jobs_->SubmitSweep(v1::SweepSpec(), "alice", "").ok());
  StatusOr<v1::Sweep> submitted = jobs_->SubmitSweep(v1::SweepSpec(), "alice", "req-1");
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  v1::Sweep* ended = &jobs_->sweeps().at(submitted->id());
  ended->set_state(v1::SUCCEEDED);
  jobs_->AddSweepEvent(ended, "finished: best trial j-000007");
  jobs_->PersistSweep(ended);
  ASSERT_EQ(ended->id(), "s-000002");
  clock_.Advance(std::chrono::hours(24));
  EXPECT_EQ(jobs_->RemoveFinishedBefore(clock_.WallNow() - std::chrono::hours(25)), 0);
  EXPECT_EQ(jobs_->RemoveFinishedBefore(clock_.WallNow()), 1);
  EXPECT_EQ(jobs_->sweeps().count("s-000002"), 0u);
  EXPECT_EQ(disk_->sweeps.count("s-000002"), 0u);
  EXPECT_EQ(jobs_->sweeps().count("s-000001"), 1u);
  EXPECT_EQ(disk_->sweeps.count("s-000001"), 1u);
  // The removed sweep's request id is free again: a new sweep, as for a removed job.
  EXPECT_EQ(jobs_->SubmitSweep(v1::SweepSpec(), "alice", "req-1")->id(), "s-000003");
  Reopen();
  EXPECT_EQ(jobs_->sweeps().size(), 2u);
  EXPECT_EQ(jobs_->SubmitSweep(v1::SweepSpec(), "bob", "")->id(), "s-000004");
  EXPECT_EQ(jobs_->SubmitSweep(v1::SweepSpec(), "alice", "req-1")->id(), "s-000003");  // that one, after a restart
}

TEST_F(JobTableTest, UsedSlotsCountUnfinishedPartsOfJobsThatHoldSlots) {
  Register("w1", 4);
  JobEntry* running = Submit(Spec(2));
  PlaceOn(running, {"w1"}, 2);
  JobEntry* stopping = Submit(Spec(1));
  PlaceOn(stopping, {"w1"});
  attempts_->BeginStopping(stopping, v1::PREEMPTED, "preempted");
  EXPECT_EQ(jobs_->UsedSlots("w1"), 3);
  stopping->job.mutable_placements(0)->set_finished(true);  // its rank is gone
  EXPECT_EQ(jobs_->UsedSlots("w1"), 2);
  jobs_->SetState(running, v1::CANCELLED, "cancelled by user");
  EXPECT_EQ(jobs_->UsedSlots("w1"), 0);
  EXPECT_EQ(jobs_->UsedSlots("w2"), 0);
}

}  // namespace
}  // namespace nightshift
