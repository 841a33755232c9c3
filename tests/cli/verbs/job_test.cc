// nightshift job ...: requests, output and exit codes against a fake coordinator.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "common/model_folder.h"
#include "tests/cli/fake_coordinator.h"
#include "tests/common/test_model_folder.h"

namespace nightshift::cli {
namespace {

using testing::FakeCoordinator;
using testing::RunCli;
using testing::SampleJobs;

class JobVerbsTest : public ::testing::Test {
 protected:
  std::string WriteSpec(const std::string& text) {
    const std::string path = ::testing::TempDir() + "/job_verbs_" + std::to_string(::getpid()) + ".yaml";
    std::ofstream(path) << text;
    return path;
  }
  FakeCoordinator fake_;
};

TEST_F(JobVerbsTest, SubmitSendsTheFileAsItIsAndPrintsTheId) {
  const std::string spec = "name: x\nmodel: {arch: gpt_lm}\n";
  const std::string path = WriteSpec(spec);
  auto r = RunCli({"job", "submit", path}, fake_.Channel());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "j9\n");
  ASSERT_EQ(fake_.jobs.submits.size(), 1u);
  EXPECT_EQ(fake_.jobs.submits[0].spec_yaml(), spec);

  r = RunCli({"job", "submit", path, "-o", "json"}, fake_.Channel());
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("\"id\": \"j9\""), std::string::npos) << r.out;
}

// A submit whose calls fail UNAVAILABLE (or time out) is sent again, with the same
// request id every time, until one succeeds; a second invocation picks a new id.
TEST_F(JobVerbsTest, SubmitRetriesUnreachableWithOneRequestIdUntilAccepted) {
  const std::string path = WriteSpec("name: x\n");
  fake_.jobs.submit_failures = 3;
  auto r = RunCli({"job", "submit", path}, fake_.Channel());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "j9\n");
  ASSERT_EQ(fake_.jobs.submits.size(), 4u);
  const std::string id = fake_.jobs.submits[0].request_id();
  EXPECT_EQ(id.size(), 32u) << id;
  for (const auto& req : fake_.jobs.submits) EXPECT_EQ(req.request_id(), id);
  EXPECT_NE(r.err.find("connection reset; attempt 3 failed, retrying in "), std::string::npos) << r.err;

  fake_.jobs.submits.clear();
  fake_.jobs.submit_failures = 1;
  fake_.jobs.submit_failure = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "slow");
  r = RunCli({"job", "submit", path}, fake_.Channel());
  EXPECT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(fake_.jobs.submits.size(), 2u);
  EXPECT_EQ(fake_.jobs.submits[1].request_id(), fake_.jobs.submits[0].request_id());
  EXPECT_NE(fake_.jobs.submits[0].request_id(), id);
}

TEST_F(JobVerbsTest, SubmitDoesNotRetryARefusalNorWithRetryForZero) {
  const std::string path = WriteSpec("name: x\n");
  fake_.jobs.fail = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "alice has 1000 unfinished jobs");
  EXPECT_EQ(RunCli({"job", "submit", path}, fake_.Channel()).code, 3);
  EXPECT_EQ(fake_.jobs.submits.size(), 1u);

  fake_.jobs.submits.clear();
  fake_.jobs.fail = grpc::Status::OK;
  fake_.jobs.submit_failures = 1;
  auto r = RunCli({"job", "submit", path, "--retry-for", "0"}, fake_.Channel());
  EXPECT_EQ(r.code, 4);
  EXPECT_EQ(r.err, "error: " + path + ": UNAVAILABLE: connection reset\n");
  EXPECT_EQ(fake_.jobs.submits.size(), 1u);
}

// Retries are bounded by --retry-for: a coordinator nobody answers for is given up on.
TEST_F(JobVerbsTest, SubmitGivesUpAfterRetryFor) {
  auto nobody = grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = RunCli({"job", "submit", WriteSpec("name: x\n"), "--retry-for", "1"}, nobody);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.code, 4) << r.err;
  EXPECT_NE(r.err.find("retrying in "), std::string::npos) << r.err;  // it did retry
  EXPECT_LT(took, 5.0);
  EXPECT_EQ(RunCli({"job", "submit", "x.yaml", "--retry-for", "-1"}, fake_.Channel()).code, 2);
}

TEST_F(JobVerbsTest, SubmitRefusedNamesTheFileAndExits3) {
  const std::string path = WriteSpec("model: {arch: x}\n");
  fake_.jobs.fail = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "model.arch (line 1): unknown architecture 'x'");
  auto r = RunCli({"job", "submit", path}, fake_.Channel());
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "error: " + path + ": INVALID_ARGUMENT: model.arch (line 1): unknown architecture 'x'\n");
  EXPECT_EQ(fake_.jobs.submits.size(), 1u);  // a refusal is not retried
}

TEST_F(JobVerbsTest, SubmitOfAMissingOrEmptyFileIsAUsageErrorAndSendsNothing) {
  auto r = RunCli({"job", "submit", "/nonexistent/job.yaml"}, fake_.Channel());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "error: cannot read spec file /nonexistent/job.yaml\n");
  const std::string empty = WriteSpec("");
  r = RunCli({"job", "submit", empty}, fake_.Channel());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "error: spec file " + empty + " is empty\n");
  EXPECT_TRUE(fake_.jobs.submits.empty());
}

TEST_F(JobVerbsTest, SubmitWaitFollowsTheJobAndExitsWithItsOutcome) {
  auto jobs = SampleJobs();
  std::vector<v1::Job> stream = {jobs[2], jobs[0], jobs[0], jobs[1]};  // QUEUED, RUNNING x2, SUCCEEDED
  for (auto& j : stream) j.set_id("j9");
  fake_.jobs.watch_streams["j9"] = {stream};
  auto r = RunCli({"job", "submit", WriteSpec("name: x\n"), "--wait"}, fake_.Channel());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "j9\n"
            "j9 QUEUED: waiting for 4 slots\n"
            "j9 RUNNING: running on w1\n"
            "[######..................] 25% step 50/200 epoch 1 loss 0.6931 12346 tok/s rss 512 MiB ETA 1m40s\n"
            "j9 SUCCEEDED: all ranks finished\n"
            "  val_accuracy         0.9688\n"
            "  val_loss             0.2500\n");

  stream.back() = jobs[3];  // FAILED
  stream.back().set_id("j9");
  fake_.jobs.watch_streams["j9"] = {stream};
  r = RunCli({"job", "submit", WriteSpec("name: x\n"), "--wait"}, fake_.Channel());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("j9 FAILED: rank 0 exited with 1\nerror: data.path: no such folder\n"), std::string::npos)
      << r.out;
}

TEST_F(JobVerbsTest, ListFollowsEveryPage) {
  fake_.jobs.page_size = 2;  // 5 jobs: 3 pages
  auto r = RunCli({"job", "list"}, fake_.Channel());
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out,
            "ID         STATE      NAME                 REASON\n"
            "j1         RUNNING    spam                 running on w1\n"
            "j2         SUCCEEDED  lm                   all ranks finished\n"
            "j3         QUEUED     big                  waiting for 4 slots\n"
            "j4         FAILED     broken               rank 0 exited with 1\n"
            "j5         PREEMPTED  small                preempted by j3\n");
  ASSERT_EQ(fake_.jobs.lists.size(), 3u);
  EXPECT_EQ(fake_.jobs.lists[1].page_token(), "2");
  EXPECT_EQ(fake_.jobs.lists[2].page_token(), "4");

  r = RunCli({"-o", "json", "job", "list"}, fake_.Channel());
  EXPECT_EQ(r.code, 0);
  for (const char* id : {"\"j1\"", "\"j5\""}) EXPECT_NE(r.out.find(id), std::string::npos) << r.out;
}

TEST_F(JobVerbsTest, ListByStateAsksForThatStateAndRefusesUnknownOnes) {
  auto r = RunCli({"job", "list", "--state", "QUEUED"}, fake_.Channel());
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out,
            "ID         STATE      NAME                 REASON\n"
            "j3         QUEUED     big                  waiting for 4 slots\n");
  ASSERT_EQ(fake_.jobs.lists.size(), 1u);
  ASSERT_EQ(fake_.jobs.lists[0].states_size(), 1);
  EXPECT_EQ(fake_.jobs.lists[0].states(0), v1::QUEUED);

  r = RunCli({"job", "list", "--state", "BOGUS"}, fake_.Channel());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "error: --state: unknown state BOGUS\n");
  EXPECT_EQ(fake_.jobs.lists.size(), 1u);
}

TEST_F(JobVerbsTest, DescribeShowsEverythingTheJobHas) {
  auto r = RunCli({"job", "describe", "j1"}, fake_.Channel());
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out,
            "Job:        j1 (spam)\n"
            "State:      RUNNING\n"
            "Reason:     running on w1\n"
            "World size: 2   Attempt: 1   Restarts: 1/3\n"
            "Placement:  w1 ranks 0..1 (running)\n"
            "Progress:   [######..................] 25% step 50/200 epoch 1 loss 0.6931 12346 tok/s rss 512 MiB "
            "ETA 1m40s\n"
            "Checkpoint: step 40 at /ckpt/j1/step-40\n"
            "Data:       cache hit abc123 on w1, ready in 0.2 s\n"
            "Events:\n"
            "  2024-05-01T12:00:00Z  QUEUED     attempt 0  submitted\n"
            "  2024-05-01T12:01:00Z  RUNNING    attempt 1  restarted after w2 was lost\n");
  r = RunCli({"job", "describe", "j2"}, fake_.Channel());
  EXPECT_EQ(r.out,
            "Job:        j2 (lm)\n"
            "State:      SUCCEEDED\n"
            "Reason:     all ranks finished\n"
            "World size: 1   Attempt: 0   Restarts: 0/0\n"
            "Placement:  w2 ranks 0..0 (finished)\n"
            "Metrics:\n"
            "  val_accuracy         0.9688\n"
            "  val_loss             0.2500\n"
            "Events:\n");
  r = RunCli({"job", "describe", "j4"}, fake_.Channel());
  EXPECT_NE(r.out.find("Error:      data.path: no such folder\n"), std::string::npos) << r.out;
  r = RunCli({"job", "describe", "j1", "-o", "json"}, fake_.Channel());
  EXPECT_NE(r.out.find("\"checkpoint_path\": \"/ckpt/j1/step-40\""), std::string::npos) << r.out;
}

TEST_F(JobVerbsTest, AnUnknownJobIsTheCoordinatorsAnswer) {
  for (const char* verb : {"describe", "cancel", "watch"}) {
    auto r = RunCli({"job", verb, "nope"}, fake_.Channel());
    EXPECT_EQ(r.code, 3) << verb;
    EXPECT_EQ(r.err, "error: NOT_FOUND: job nope not found\n") << verb;
  }
}

TEST_F(JobVerbsTest, CancelPrintsTheNewState) {
  auto r = RunCli({"job", "cancel", "j3"}, fake_.Channel());
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "j3 CANCELLED\n");
}

TEST_F(JobVerbsTest, DeleteRemovesAFinishedJobAndSaysSo) {
  auto r = RunCli({"job", "delete", "j2"}, fake_.Channel());
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_EQ(r.out, "j2 deleted\n");
  EXPECT_EQ(fake_.jobs.deletes, std::vector<std::string>{"j2"});
  r = RunCli({"job", "delete", "j2", "-o", "json"}, fake_.Channel());
  EXPECT_EQ(r.out, "{\"id\": \"j2\", \"deleted\": true}\n");
}

TEST_F(JobVerbsTest, DeleteOfAJobThatHasNotFinishedIsRefused) {
  fake_.jobs.fail = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                 "job j1 is RUNNING: only a finished job can be deleted; cancel it first");
  auto r = RunCli({"job", "delete", "j1"}, fake_.Channel());
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("cancel it first"), std::string::npos) << r.err;
}

TEST_F(JobVerbsTest, WatchReconnectsWhenTheStreamEndsEarly) {
  auto jobs = SampleJobs();
  // The coordinator restarts after sending RUNNING: the second stream ends the job.
  fake_.jobs.watch_streams["j1"] = {{jobs[0]}, {jobs[0], jobs[3]}};
  fake_.jobs.watch_streams["j1"][1][1].set_id("j1");
  auto r = RunCli({"job", "watch", "j1"}, fake_.Channel());
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(fake_.jobs.watches, 2);
  EXPECT_EQ(r.out,
            "j1 RUNNING: running on w1\n"
            "[######..................] 25% step 50/200 epoch 1 loss 0.6931 12346 tok/s rss 512 MiB ETA 1m40s\n"
            "j1 RUNNING: running on w1\n"
            "[######..................] 25% step 50/200 epoch 1 loss 0.6931 12346 tok/s rss 512 MiB ETA 1m40s\n"
            "j1 FAILED: rank 0 exited with 1\n"
            "error: data.path: no such folder\n");
}

TEST_F(JobVerbsTest, WatchWithJsonPrintsOnlyStatesThenTheJob) {
  fake_.jobs.watch_streams["j2"] = {{SampleJobs()[0], SampleJobs()[1]}};
  auto r = RunCli({"job", "watch", "j2", "-o", "json"}, fake_.Channel());
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out.find("[#"), std::string::npos) << r.out;  // no progress lines
  EXPECT_EQ(r.out.rfind("j1 RUNNING: running on w1\nj2 SUCCEEDED: all ranks finished\n{", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\"val_accuracy\": 0.96875"), std::string::npos) << r.out;
}

TEST_F(JobVerbsTest, LogsAreCopiedByteForByte) {
  fake_.jobs.log_chunks = {"line 1\n", "partial", " line 2\n"};
  auto r = RunCli({"job", "logs", "j1", "--rank", "3", "-f"}, fake_.Channel());
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "line 1\npartial line 2\n");
  ASSERT_EQ(fake_.jobs.log_requests.size(), 1u);
  EXPECT_EQ(fake_.jobs.log_requests[0].id(), "j1");
  EXPECT_EQ(fake_.jobs.log_requests[0].rank(), 3);
  EXPECT_TRUE(fake_.jobs.log_requests[0].follow());
  r = RunCli({"job", "logs", "j1"}, fake_.Channel());
  EXPECT_EQ(fake_.jobs.log_requests[1].rank(), 0);
  EXPECT_FALSE(fake_.jobs.log_requests[1].follow());
}

TEST_F(JobVerbsTest, AMissingIdIsAUsageErrorAndCallsNothing) {
  auto r = RunCli({"job", "describe"}, fake_.Channel());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "ID is required\nRun with --help for more information.\n");
}

TEST_F(JobVerbsTest, ErrorsExit3WhenRefusedAnd4WhenNobodyAnswers) {
  fake_.jobs.fail = grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "alice may not");
  auto r = RunCli({"job", "list"}, fake_.Channel());
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.err, "error: PERMISSION_DENIED: alice may not\n");
  r = RunCli({"job", "logs", "j1"}, fake_.Channel());
  EXPECT_EQ(r.code, 3);
  // A watch refused is said at once (it was retried 30 times in silence, then exit 1).
  r = RunCli({"job", "watch", "j1"}, fake_.Channel());
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.err, "error: PERMISSION_DENIED: alice may not\n");
  EXPECT_EQ(fake_.jobs.watches, 1);
  fake_.jobs.fail = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "slow");
  EXPECT_EQ(RunCli({"job", "submit", WriteSpec("name: x\n"), "--retry-for", "0"}, fake_.Channel()).code, 4);

  auto nobody = grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"job", "list"}, {"job", "describe", "j1"}, {"job", "cancel", "j1"}, {"job", "logs", "j1"},
           {"job", "submit", WriteSpec("name: x\n"), "--retry-for", "0"}}) {
    r = RunCli(args, nobody);
    EXPECT_EQ(r.code, 4) << args[1];
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("UNAVAILABLE: "), std::string::npos) << r.err;
  }
}

// The chunks GetArtifacts would send for a model folder in `dir` (SendModelFolder).
std::vector<v1::ArtifactChunk> ChunksOf(const std::string& dir) {
  std::vector<v1::ArtifactChunk> chunks;
  Status s = SendModelFolder(dir, dir, 40, [&](const v1::ArtifactChunk& c) {
    chunks.push_back(c);
    return true;
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  return chunks;
}

class ArtifactsVerbTest : public JobVerbsTest {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/artifacts_verb_" + std::to_string(::getpid());
    std::filesystem::remove_all(root_);
    files_ = testing_model::WriteModelFolder(root_ + "/source");
    fake_.jobs.artifact_chunks = ChunksOf(root_ + "/source");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  // Whatever is in `dir` besides `keep`.
  std::vector<std::string> Entries(const std::string& dir) {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::string root_;
  std::map<std::string, std::string> files_;
};

TEST_F(ArtifactsVerbTest, DownloadsVerifiesAndRenamesIntoPlace) {
  const std::string out = root_ + "/dl/model";
  auto r = RunCli({"job", "artifacts", "j2", "--output", out}, fake_.Channel());
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("step 40"), std::string::npos) << r.out;
  for (const auto& [name, bytes] : files_) EXPECT_EQ(testing_model::ReadFile(out + "/" + name), bytes) << name;
  EXPECT_TRUE(VerifyModelFolder(out).ok());
  EXPECT_EQ(Entries(root_ + "/dl"), std::vector<std::string>{"model"});  // no temporary folder left
  // A folder that is there already is not overwritten.
  r = RunCli({"job", "artifacts", "j2", "--output", out}, fake_.Channel());
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("already exists"), std::string::npos) << r.err;
}

// --output with a trailing slash names the folder itself (it was downloaded into a
// hidden sibling named "..partial-PID" inside it, then refused, leaving it empty).
TEST_F(ArtifactsVerbTest, AnOutputWithATrailingSlashIsThatFolder) {
  const std::string out = root_ + "/dl/model";
  auto r = RunCli({"job", "artifacts", "j2", "--output", out + "/"}, fake_.Channel());
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_TRUE(VerifyModelFolder(out).ok());
  EXPECT_EQ(Entries(root_ + "/dl"), std::vector<std::string>{"model"});
}

TEST_F(ArtifactsVerbTest, ACorruptedFileIsAnErrorNamingItAndNothingIsKept) {
  // One byte of the weights flipped on the way.
  for (auto& c : fake_.jobs.artifact_chunks)
    if (c.file() == "model.safetensors" && c.offset() > 0) {
      (*c.mutable_data())[7] ^= 1;
      break;
    }
  std::filesystem::create_directories(root_ + "/dl");
  auto r = RunCli({"job", "artifacts", "j2", "--output", root_ + "/dl/model"}, fake_.Channel());
  EXPECT_EQ(r.code, kExitCorrupt);
  EXPECT_NE(r.err.find("model.safetensors"), std::string::npos) << r.err;
  EXPECT_TRUE(Entries(root_ + "/dl").empty());
  // A stream cut short (the coordinator fails mid-way): the call's error, nothing kept.
  fake_.jobs.artifact_chunks.resize(2);
  fake_.jobs.artifacts_end = grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker w2 that holds the model is gone");
  r = RunCli({"job", "artifacts", "j2", "--output", root_ + "/dl/model"}, fake_.Channel());
  EXPECT_EQ(r.code, kExitUnreachable);
  EXPECT_NE(r.err.find("worker w2"), std::string::npos) << r.err;
  EXPECT_TRUE(Entries(root_ + "/dl").empty());
}

TEST_F(ArtifactsVerbTest, RefusalsExit3AndLeaveNothing) {
  fake_.jobs.fail = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "job j1 is RUNNING and has no model yet");
  std::filesystem::create_directories(root_ + "/dl");
  auto r = RunCli({"job", "artifacts", "j1", "--output", root_ + "/dl/m"}, fake_.Channel());
  EXPECT_EQ(r.code, kExitRefused);
  EXPECT_NE(r.err.find("RUNNING"), std::string::npos) << r.err;
  EXPECT_TRUE(Entries(root_ + "/dl").empty());
}

v1::JobMetrics SampleMetrics() {
  v1::JobMetrics m;
  auto* a = m.add_attempts();
  a->set_stride(1);
  for (int step = 1; step <= 20; ++step) {
    auto* t = a->add_train();
    t->set_step(step);
    t->set_epoch(step > 10);
    t->set_loss(2.0 / step);
    t->set_lr(0.001);
    t->set_tokens_per_second(1000);
  }
  for (int e = 0; e < 2; ++e) {
    auto* ev = a->add_evals();
    ev->set_step(10 * (e + 1));
    ev->set_epoch(e);
    (*ev->mutable_metrics())["val_loss"] = 0.5 - e * 0.1;
    (*ev->mutable_metrics())["val_accuracy"] = 0.75 + e * 0.125;
  }
  return m;
}

TEST_F(JobVerbsTest, MetricsPrintsTheEpochTableAndTheLossCurve) {
  fake_.jobs.job_metrics = SampleMetrics();
  auto r = RunCli({"job", "metrics", "j2"}, fake_.Channel());
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.out.find("Attempt 0: 2 evaluations, 20 training points"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("val_accuracy"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0.8750"), std::string::npos) << r.out;   // epoch 1's accuracy
  EXPECT_NE(r.out.find("0.1000"), std::string::npos) << r.out;   // the loss at step 20 (2/20)
  EXPECT_NE(r.out.find("2.0000 |*"), std::string::npos) << r.out;  // the curve starts top left
  EXPECT_NE(r.out.find("step"), std::string::npos);

  r = RunCli({"job", "metrics", "j2", "-o", "csv"}, fake_.Channel());
  ASSERT_EQ(r.code, kExitOk);
  EXPECT_EQ(r.out.rfind("attempt,step,epoch,metric,value\n", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\n0,20,1,loss,0.10000000000000001\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n0,20,1,val_accuracy,0.875\n"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1 + 20 * 3 + 2 * 2);

  r = RunCli({"job", "metrics", "j2", "-o", "json"}, fake_.Channel());
  ASSERT_EQ(r.code, kExitOk);
  EXPECT_NE(r.out.find("\"job_id\": \"j2\""), std::string::npos) << r.out;

  fake_.jobs.fail = grpc::Status(grpc::StatusCode::NOT_FOUND, "no job j9");
  r = RunCli({"job", "metrics", "j9"}, fake_.Channel());
  EXPECT_EQ(r.code, kExitRefused);
}

}  // namespace
}  // namespace nightshift::cli
