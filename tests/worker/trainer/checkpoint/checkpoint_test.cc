// Checkpoints and exact resume: a run killed after a checkpoint (abort() in a child
// process, or SIGTERM) and resumed ends bit-identical to an uninterrupted run.
#include "worker/trainer/checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/format/checkpoint_layout.h"
#include "tests/worker/trainer/test_util.h"
#include "worker/trainer/models/model.h"
#include "worker/trainer/train.h"

namespace nightshift::trainer {
namespace {

namespace fs = std::filesystem;
using testing::FreshDir;
using testing::RunUntilAbort;
using testing::TinyConfig;

// The parameters of the newest complete checkpoint in config.checkpoint_dir.
std::vector<torch::Tensor> FinalParameters(const TrainConfig& c) {
  TransformerClassifier model = BuildModel(c.model, c.data.vocab_size, c.data.num_classes, c.data.pad_id);
  return testing::LatestCheckpointParameters(*model, c.checkpoint_dir);
}

void ExpectBitIdentical(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
}

format::ProgressRecord Find(const MemoryProgressSink& progress, const std::string& event) {
  for (const auto& r : progress.records)
    if (r.event == event) return r;
  ADD_FAILURE() << "no " << event << " event";
  return {};
}

std::vector<torch::Tensor> UninterruptedRun(const std::string& name) {
  TrainConfig c = TinyConfig(FreshDir(name));
  MemoryProgressSink progress;
  EXPECT_EQ(RunTraining(c, RankInfo{}, progress), kExitOk);
  EXPECT_EQ(progress.records.back().event, "done");
  EXPECT_EQ(progress.records.back().Number("step"), 10);  // 40 samples / 8 x 2 epochs
  return FinalParameters(c);
}

TEST(CheckpointResumeTest, AbortAfterCheckpointThenResumeIsBitExact) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string dir = FreshDir("abort");
  TrainConfig c = TinyConfig(dir);
  // Steps 1-4 run, a checkpoint is written at step 3, the process dies before step 5.
  EXPECT_DEATH(RunUntilAbort(c, 5), "fault injection: aborting at step 5");
  ASSERT_TRUE(fs::exists(c.checkpoint_dir + "/step-00000003/COMPLETE"));
  ASSERT_FALSE(fs::exists(c.checkpoint_dir + "/step-00000006"));
  // A newer checkpoint without its marker (a save that crashed) must be ignored.
  fs::create_directories(c.checkpoint_dir + "/step-00000009");
  std::ofstream(c.checkpoint_dir + "/step-00000009/model.pt") << "half-written";

  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(c, RankInfo{}, progress), kExitOk);
  EXPECT_EQ(Find(progress, "start").Number("resumed_step"), 3);
  ExpectBitIdentical(FinalParameters(c), UninterruptedRun("abort_reference"));
}

TEST(CheckpointResumeTest, SigtermSavesExitsAndResumesBitExact) {
  const std::string dir = FreshDir("sigterm");
  TrainConfig c = TinyConfig(dir);
  c.checkpoint.every_steps = 0;  // only the SIGTERM checkpoint and the final one
  RequestStop();
  MemoryProgressSink stopped;
  EXPECT_EQ(RunTraining(c, RankInfo{}, stopped), kExitStopped);
  ClearStopRequest();
  bool saw_checkpoint = false;
  for (const auto& r : stopped.records)
    if (r.event == "checkpoint") {
      saw_checkpoint = true;
      EXPECT_EQ(r.Number("step"), 1);
      EXPECT_GT(r.Number("bytes"), 0);
    }
  EXPECT_TRUE(saw_checkpoint);

  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(c, RankInfo{}, progress), kExitOk);
  EXPECT_EQ(Find(progress, "start").Number("resumed_step"), 1);
  ExpectBitIdentical(FinalParameters(c), UninterruptedRun("sigterm_reference"));
}

// After an out-of-memory error the run keeps cutting batches into micro-batches of the size
// that fitted; the checkpoint keeps that size, so the resumed run cuts its next batch as
// the uninterrupted run does instead of running out again (in backward, after its forward
// drew dropout's masks: other masks, other weights).
TEST(CheckpointResumeTest, AnOutOfMemorySplitResumesWithItsMicroBatchesBitExact) {
  RankInfo rank;
  rank.faults.oom_above_tokens = 30;  // batches are 8 x up to 12 tokens
  rank.faults.oom_in_backward = true;
  const auto run = [&](const std::string& name, bool stop_first) {
    TrainConfig c = TinyConfig(FreshDir(name));
    c.checkpoint.every_steps = 0;
    if (stop_first) {
      RequestStop();
      MemoryProgressSink stopped;
      EXPECT_EQ(RunTraining(c, rank, stopped), kExitStopped);
      ClearStopRequest();
      EXPECT_GE(Find(stopped, "step").Number("oom_recoveries"), 1);
    }
    MemoryProgressSink progress;
    EXPECT_EQ(RunTraining(c, rank, progress), kExitOk);
    if (stop_first) {
      const format::ProgressRecord step = Find(progress, "step");
      EXPECT_EQ(step.Number("oom_recoveries"), 0) << "the resumed run ran out of memory again";
      EXPECT_GT(step.Number("micro_batches"), 1);
    }
    return FinalParameters(c);
  };
  ExpectBitIdentical(run("oom_resume", true), run("oom_resume_reference", false));
}

TEST(CheckpointResumeTest, ResumingAFinishedRunOnlyReportsDone) {
  TrainConfig c = TinyConfig(FreshDir("finished"));
  MemoryProgressSink first, second;
  ASSERT_EQ(RunTraining(c, RankInfo{}, first), kExitOk);
  ASSERT_EQ(RunTraining(c, RankInfo{}, second), kExitOk);
  for (const auto& r : second.records) EXPECT_NE(r.event, "step");
  EXPECT_EQ(second.records.back().event, "done");
  EXPECT_EQ(second.records.back().Number("val_accuracy"), first.records.back().Number("val_accuracy"));
}

TEST(CheckpointManagerTest, KeepsOnlyTheLastComplete) {
  TrainConfig c = TinyConfig(FreshDir("keep_last"));
  c.checkpoint.every_steps = 2;
  c.checkpoint.keep_last = 2;
  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(c, RankInfo{}, progress), kExitOk);
  CheckpointManager manager(CheckpointOptions{c.checkpoint_dir, 0, 0, 2});
  std::vector<std::string> complete = manager.ListComplete();
  ASSERT_EQ(complete.size(), 2u);
  EXPECT_EQ(fs::path(complete[0]).filename(), "step-00000008");
  EXPECT_EQ(fs::path(complete[1]).filename(), "step-00000010");
  int dirs = 0;
  for (const auto& e : fs::directory_iterator(c.checkpoint_dir)) dirs += e.is_directory();
  EXPECT_EQ(dirs, 3) << "two checkpoints and the exported model";
  EXPECT_TRUE(fs::exists(c.checkpoint_dir + "/model/model.safetensors")) << "pruning keeps the model";
}

// The accelerator's generator (dropout's masks on a GPU) saved and set back draws the same
// again; the CPU has none apart from GetCpuRngState's. The CUDA half runs where a GPU is
// (bench/gpu/check.sh runs these tests there); here it is skipped, saying so.
TEST(CheckpointManagerTest, TheDevicesGeneratorRoundTrips) {
  EXPECT_EQ(GetDeviceRngState(torch::kCPU), "");
  const std::string cpu = GetCpuRngState();
  SetDeviceRngState(torch::kCPU, "ignored");  // nothing to set on the CPU
  EXPECT_EQ(GetCpuRngState(), cpu);
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the CUDA generator's round trip not checked here";
  const torch::Device cuda(torch::kCUDA, 0);
  const std::string state = GetDeviceRngState(cuda);
  ASSERT_FALSE(state.empty());
  const torch::Tensor first = torch::dropout(torch::ones({1024}, cuda), 0.5, /*train=*/true);
  EXPECT_NE(GetDeviceRngState(cuda), state);  // the draw moved it on
  SetDeviceRngState(cuda, state);
  EXPECT_TRUE(torch::equal(torch::dropout(torch::ones({1024}, cuda), 0.5, true), first));
}

TEST(CheckpointManagerTest, ManifestAndRngRoundTrip) {
  const std::string dir = FreshDir("manifest");
  torch::manual_seed(7);
  torch::nn::Linear model(3, 2);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  CheckpointManager manager(CheckpointOptions{dir, 1, 0, 3});
  RunPosition pos;
  pos.step = 42;
  pos.epoch = 3;
  pos.batch_in_epoch = 5;
  pos.lr_scale = 0.5;
  pos.scaler = ScalerState{1024.0, 7};
  pos.max_tokens = 4096;
  pos.accumulate_gradients = "whole";
  pos.train_seconds = 1.5;
  pos.tokens_seen = 123456789012;
  pos.rng_cpu = GetCpuRngState();
  pos.rng_device = std::string("\x01\x00\xff\x7f", 4);  // a CUDA generator's bytes, say
  pos.fingerprint = "seed=1;test";
  pos.nan_guard = NanGuardState{2, 1};
  torch::Tensor expected = torch::rand({4});
  SavedCheckpoint saved = manager.Save(pos, *model, optimizer);
  EXPECT_TRUE(fs::exists(saved.path + "/COMPLETE"));
  std::ifstream manifest(saved.path + "/manifest.json");
  std::string text((std::istreambuf_iterator<char>(manifest)), {});
  EXPECT_NE(text.find("\"magic\": \"nightshift-checkpoint\""), std::string::npos);

  RunPosition loaded;
  ASSERT_TRUE(manager.LoadLatest(*model, optimizer, &loaded));
  EXPECT_EQ(loaded.step, 42);
  EXPECT_EQ(loaded.epoch, 3);
  EXPECT_EQ(loaded.batch_in_epoch, 5);
  EXPECT_EQ(loaded.lr_scale, 0.5);
  EXPECT_EQ(loaded.scaler.scale, 1024.0);
  EXPECT_EQ(loaded.scaler.growth_tracker, 7);
  EXPECT_EQ(loaded.max_tokens, 4096);
  EXPECT_EQ(loaded.accumulate_gradients, "whole");
  EXPECT_EQ(loaded.train_seconds, 1.5);
  EXPECT_EQ(loaded.tokens_seen, 123456789012);
  EXPECT_EQ(loaded.fingerprint, "seed=1;test");
  EXPECT_EQ(loaded.nan_guard.consecutive, 2);
  EXPECT_EQ(loaded.nan_guard.rollbacks, 1);
  EXPECT_EQ(loaded.rng_device, pos.rng_device);
  SetCpuRngState(loaded.rng_cpu);
  EXPECT_TRUE(torch::equal(torch::rand({4}), expected));
  // Written before the guard's counts were saved: a halved rate says a roll-back was made
  // (only a roll-back halves it), so the next streak fails the run as it would have.
  nlohmann::json older = nlohmann::json::parse(std::ifstream(saved.path + "/manifest.json"));
  older["position"].erase("nan_consecutive");
  older["position"].erase("nan_rollbacks");
  older["position"].erase("rng_device");  // nor the device's generator: none set
  std::ofstream(saved.path + "/manifest.json", std::ios::trunc) << older.dump(2);
  ASSERT_TRUE(manager.LoadLatest(*model, optimizer, &loaded));
  EXPECT_EQ(loaded.nan_guard.consecutive, 0);
  EXPECT_EQ(loaded.nan_guard.rollbacks, 1);
  EXPECT_EQ(loaded.rng_device, "");
}

RunPosition At(int64_t step) {
  RunPosition pos;
  pos.step = step;
  return pos;
}

// A zombie: attempt 0 goes on saving after attempt 1 claimed the folder. Its save is not
// committed (no COMPLETE, no directory left) and fails naming the newer attempt; attempt 1
// saves as usual; each manifest records its writer; attempt 0 can no longer claim.
TEST(CheckpointFencingTest, ALaterAttemptsClaimStopsAnOlderOneCommitting) {
  const std::string dir = FreshDir("fence");
  torch::nn::Linear model(3, 2);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  CheckpointManager old_attempt(CheckpointOptions{dir, 1, 0, 10, 0}), new_attempt(CheckpointOptions{dir, 1, 0, 10, 1});
  old_attempt.Claim();
  old_attempt.Save(At(1), *model, optimizer);
  new_attempt.Claim();
  try {
    old_attempt.Save(At(2), *model, optimizer);
    ADD_FAILURE() << "a fenced attempt committed a checkpoint";
  } catch (const FencedError& e) {
    EXPECT_NE(std::string(e.what()).find("fenced by attempt 1"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir + "/step-00000002"));
  EXPECT_THROW(old_attempt.CheckFence(), FencedError);
  new_attempt.Save(At(3), *model, optimizer);
  RunPosition loaded;
  ASSERT_TRUE(new_attempt.LoadLatest(*model, optimizer, &loaded));
  EXPECT_EQ(loaded.step, 3);
  EXPECT_EQ(loaded.attempt, 1);
  ASSERT_TRUE(new_attempt.PeekLatest(&loaded));
  EXPECT_EQ(loaded.attempt, 1);
  EXPECT_EQ(new_attempt.ListComplete().size(), 2u);
  try {
    old_attempt.Claim();
    ADD_FAILURE() << "an older attempt took the fence back";
  } catch (const FencedError& e) {
    EXPECT_NE(std::string(e.what()).find("fenced by attempt 1; this is attempt 0"), std::string::npos) << e.what();
  }
}

// A zombie that passed the fence before its successor's claim showed, and saves a step the
// successor has committed meanwhile (on a shared root: it hung in the save): its save
// fails at the commit, leaving no staging folder, and the successor's checkpoint of that
// step stays, whole. Once the claim shows, a save fails before it writes anything.
TEST(CheckpointFencingTest, AZombiesSaveNeverRemovesTheStepALaterAttemptCommitted) {
  const std::string dir = FreshDir("fence-same-step");
  torch::nn::Linear model(3, 2);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  CheckpointManager zombie(CheckpointOptions{dir, 1, 0, 10, 0}), successor(CheckpointOptions{dir, 1, 0, 10, 1});
  zombie.Claim();
  successor.Save(At(6), *model, optimizer);  // its claim not yet seen by the zombie's fence check
  EXPECT_THROW(zombie.Save(At(6), *model, optimizer), FencedError);
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find("staging"), std::string::npos) << e.path();
  RunPosition loaded;
  ASSERT_TRUE(successor.LoadLatest(*model, optimizer, &loaded));
  EXPECT_EQ(loaded.step, 6);
  EXPECT_EQ(loaded.attempt, 1);
  successor.Claim();
  EXPECT_THROW(zombie.Save(At(7), *model, optimizer), FencedError);
  EXPECT_FALSE(fs::exists(dir + "/step-00000007"));
}

// Resume only from checkpoints of attempts up to this one: attempt 1 does not see (load,
// list or prune) what attempt 2 wrote.
TEST(CheckpointFencingTest, CheckpointsOfALaterAttemptAreNeitherLoadedNorPruned) {
  const std::string dir = FreshDir("fence-later");
  torch::nn::Linear model(3, 2);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  CheckpointManager(CheckpointOptions{dir, 1, 0, 10, 0}).Save(At(4), *model, optimizer);
  CheckpointManager(CheckpointOptions{dir, 1, 0, 10, 2}).Save(At(8), *model, optimizer);
  CheckpointManager first_retry(CheckpointOptions{dir, 1, 0, 1, 1});
  RunPosition loaded;
  ASSERT_TRUE(first_retry.LoadLatest(*model, optimizer, &loaded));
  EXPECT_EQ(loaded.step, 4);
  EXPECT_EQ(loaded.attempt, 0);
  first_retry.Save(At(5), *model, optimizer);  // keep_last 1: step 4 goes, step 8 stays
  EXPECT_FALSE(fs::exists(dir + "/step-00000004"));
  EXPECT_TRUE(fs::exists(dir + "/step-00000008/COMPLETE"));
  // Without fencing (an older trainer's view, the export on request) every checkpoint counts.
  EXPECT_EQ(CheckpointManager(CheckpointOptions{dir}).ListComplete().size(), 2u);
}

// The trainer claims the folder before it trains: a run of an older attempt than the
// folder's fence fails at once with the reason, and writes nothing.
TEST(CheckpointFencingTest, ARunOfASupersededAttemptStopsBeforeTraining) {
  TrainConfig c = TinyConfig(FreshDir("fence-run"));
  c.attempt = 3;
  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(c, RankInfo{}, progress), kExitOk);
  std::ifstream fence(c.checkpoint_dir + "/FENCE");
  int holder = -1;
  fence >> holder;
  EXPECT_EQ(holder, 3);
  const size_t kept = CheckpointManager(CheckpointOptions{c.checkpoint_dir}).ListComplete().size();
  c.attempt = 2;
  MemoryProgressSink zombie;
  EXPECT_EQ(RunTraining(c, RankInfo{}, zombie), kExitError);
  const format::ProgressRecord error = Find(zombie, "error");
  EXPECT_NE(error.String("message").find("fenced by attempt 3"), std::string::npos) << error.String("message");
  EXPECT_EQ(CheckpointManager(CheckpointOptions{c.checkpoint_dir}).ListComplete().size(), kept);
}

TEST(CheckpointManagerTest, DamagedNewestFallsBackToTheOneBefore) {
  const std::string dir = FreshDir("fallback");
  torch::manual_seed(3);
  torch::nn::Linear model(4, 3);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  CheckpointManager manager(CheckpointOptions{dir, 1, 0, 5});
  RunPosition pos;
  pos.step = 1;
  pos.batch_in_epoch = 1;
  pos.rng_cpu = GetCpuRngState();
  manager.Save(pos, *model, optimizer);
  const torch::Tensor weight_at_1 = model->weight.detach().clone();
  {
    torch::NoGradGuard no_grad;
    model->weight.add_(1.0);
  }
  pos.step = 2;
  SavedCheckpoint second = manager.Save(pos, *model, optimizer);
  pos.step = 3;
  SavedCheckpoint third = manager.Save(pos, *model, optimizer);

  // Step 3: truncated model file. Step 2: a flipped byte in the optimizer state.
  fs::resize_file(third.path + "/model.pt", fs::file_size(third.path + "/model.pt") / 2);
  {
    std::fstream f(second.path + "/optimizer.pt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    char c;
    f.seekg(40);
    f.get(c);
    f.seekp(40);
    f.put(static_cast<char>(c ^ 0x5a));
  }
  RunPosition peeked;
  std::string path;
  ASSERT_TRUE(manager.PeekLatest(&peeked, &path));
  EXPECT_EQ(peeked.step, 1);
  RunPosition loaded;
  ASSERT_TRUE(manager.LoadLatest(*model, optimizer, &loaded, &path));
  EXPECT_EQ(loaded.step, 1);
  EXPECT_EQ(fs::path(path).filename(), "step-00000001");
  EXPECT_TRUE(torch::equal(model->weight, weight_at_1));

  // All damaged: a clear error, not a crash.
  fs::resize_file(path + "/model.pt", 10);
  try {
    manager.LoadLatest(*model, optimizer, &loaded);
    FAIL() << "loaded a damaged checkpoint";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("none of the 3 checkpoints"), std::string::npos) << e.what();
  }
}

// A resume that went past a damaged newest checkpoint saves steps older than it: keep_last
// counts those, not the damaged one (which had the step just saved, and the one it resumed
// from, removed, leaving nothing loadable).
TEST(CheckpointManagerTest, ADamagedNewerCheckpointDoesNotCountAgainstKeepLast) {
  const std::string dir = FreshDir("prune-damaged");
  torch::nn::Linear model(4, 3);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  CheckpointManager writer(CheckpointOptions{dir, 1, 0, 5});
  writer.Save(At(1), *model, optimizer);
  const SavedCheckpoint third = writer.Save(At(3), *model, optimizer);
  fs::resize_file(third.path + "/model.pt", fs::file_size(third.path + "/model.pt") / 2);
  CheckpointManager resumed(CheckpointOptions{dir, 1, 0, 1});
  RunPosition loaded;
  ASSERT_TRUE(resumed.LoadLatest(*model, optimizer, &loaded));
  ASSERT_EQ(loaded.step, 1);
  resumed.Save(At(2), *model, optimizer);  // keep_last 1: step 1 goes, step 2 stays
  EXPECT_TRUE(fs::exists(dir + "/step-00000002/COMPLETE"));
  EXPECT_FALSE(fs::exists(dir + "/step-00000001"));
  ASSERT_TRUE(resumed.LoadLatest(*model, optimizer, &loaded));
  EXPECT_EQ(loaded.step, 2);
}

// The kept step (export.best's) is named, with its manifest's SHA-256, in every manifest
// written after it, which a worker vouches for it by (worker/checkpoint_copy.h); not in its
// own, nor in any once it is gone from the folder.
TEST(CheckpointManagerTest, EveryLaterManifestNamesTheKeptStepWithItsDigest) {
  const std::string dir = FreshDir("keep-named");
  torch::nn::Linear model(4, 3);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  CheckpointManager manager(CheckpointOptions{dir, 1, 0, 1});
  manager.Keep(2);
  manager.Save(At(2), *model, optimizer);
  for (int64_t step : {4, 6}) manager.Save(At(step), *model, optimizer);
  const auto manifest_of = [&](int64_t step) {
    format::CheckpointManifest m;
    EXPECT_EQ(format::ReadManifest(dir + "/" + format::StepDirName(step), &m), "");
    return m;
  };
  EXPECT_EQ(manifest_of(2).best_step, 0);
  std::ifstream in(dir + "/step-00000002/manifest.json", std::ios::binary);
  const std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(manifest_of(6).best_step, 2);
  EXPECT_EQ(manifest_of(6).best_manifest_sha256, crypto::Sha256Hex(kept));
  EXPECT_FALSE(fs::exists(dir + "/step-00000004"));  // keep_last 1 and the kept one
  fs::remove_all(dir + "/step-00000002");
  manager.Save(At(8), *model, optimizer);
  EXPECT_EQ(manifest_of(8).best_step, 0);
}

// Running out of memory while loading the newest checkpoint says nothing about it: the
// error is the allocation's, not "none is loadable (delete them)", and no older checkpoint
// is loaded in its place (that would lose the steps since). In a child process whose
// RLIMIT_DATA leaves 1 MiB above what it holds, for a 64 MiB weight.
TEST(CheckpointManagerTest, OutOfMemoryWhileLoadingNeitherFallsBackNorBlamesTheCheckpoint) {
  const std::string dir = FreshDir("load_oom");
  torch::nn::Linear model(4096, 4096);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  CheckpointManager manager(CheckpointOptions{dir, 1, 0, 5});
  RunPosition pos;
  pos.rng_cpu = GetCpuRngState();
  for (pos.step = 1; pos.step <= 2; ++pos.step) manager.Save(pos, *model, optimizer);
  const std::string message_file = dir + "/child-message";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::ifstream status("/proc/self/status");
    long long data_kb = 0;
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmData:", 0) == 0) data_kb = std::atoll(line.c_str() + 7);
    const rlimit limit{rlim_t(data_kb + 1024) * 1024, rlim_t(data_kb + 1024) * 1024};
    ::setrlimit(RLIMIT_DATA, &limit);
    int code = 3;
    try {
      RunPosition loaded;
      code = manager.LoadLatest(*model, optimizer, &loaded) ? 1 : 2;
    } catch (const std::exception& e) {
      std::ofstream(message_file) << e.what();
      code = 0;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  std::ifstream in(message_file);
  const std::string message((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the child loaded a checkpoint (1) or found none (2)";
  // LibTorch's allocator's error, or std::bad_alloc where the C++ runtime failed first.
  EXPECT_TRUE(message.find("can't allocate memory") != std::string::npos || message == "std::bad_alloc") << message;
  EXPECT_EQ(message.find("delete them"), std::string::npos) << message;
}

// A checkpoint a trainer of manifest version 1 wrote: position at the top level, the rest
// in a "metrics" map.
TEST(CheckpointManagerTest, Version1ManifestStillResumes) {
  const std::string dir = FreshDir("v1");
  torch::manual_seed(11);
  torch::nn::Linear model(3, 2);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  CheckpointManager manager(CheckpointOptions{dir, 1, 0, 3});
  RunPosition pos;
  pos.step = 17;
  pos.epoch = 1;
  pos.batch_in_epoch = 4;
  pos.rng_cpu = GetCpuRngState();
  const SavedCheckpoint saved = manager.Save(pos, *model, optimizer);
  const std::string manifest_path = saved.path + "/manifest.json";
  nlohmann::json v2 = nlohmann::json::parse(std::ifstream(manifest_path));
  nlohmann::json v1 = {{"magic", "nightshift-checkpoint"}, {"version", 1},
                       {"step", 17}, {"epoch", 1}, {"batch_in_epoch", 4},
                       {"rng_cpu", v2["position"]["rng_cpu"]},
                       {"metrics", {{"train_seconds", 2.5}, {"tokens_seen", 900.0}, {"lr_scale", 0.5},
                                    {"max_tokens", 2048.0}, {"grad_scale", 512.0},
                                    {"grad_scale_growth_tracker", 3.0}}},
                       {"fingerprint", "seed=1"}, {"files", v2["files"]}};
  std::ofstream(manifest_path, std::ios::trunc) << v1.dump(2);

  RunPosition loaded;
  ASSERT_TRUE(manager.LoadLatest(*model, optimizer, &loaded));
  EXPECT_EQ(loaded.step, 17);
  EXPECT_EQ(loaded.epoch, 1);
  EXPECT_EQ(loaded.batch_in_epoch, 4);
  EXPECT_EQ(loaded.train_seconds, 2.5);
  EXPECT_EQ(loaded.tokens_seen, 900);
  EXPECT_EQ(loaded.lr_scale, 0.5);
  EXPECT_EQ(loaded.max_tokens, 2048);
  EXPECT_EQ(loaded.scaler.scale, 512.0);
  EXPECT_EQ(loaded.scaler.growth_tracker, 3);
  EXPECT_EQ(loaded.fingerprint, "seed=1");
  EXPECT_EQ(loaded.rng_cpu, pos.rng_cpu);
  EXPECT_EQ(loaded.nan_guard.rollbacks, 1);  // lr_scale 0.5: rolled back once
}

// A manifest version this trainer does not read is refused naming it, not skipped for an
// older checkpoint (that would silently drop the newer one's steps).
TEST(CheckpointManagerTest, UnknownManifestVersionIsRefusedNamingIt) {
  const std::string dir = FreshDir("v4");
  torch::nn::Linear model(3, 2);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  CheckpointManager manager(CheckpointOptions{dir, 1, 0, 3});
  RunPosition pos;
  pos.rng_cpu = GetCpuRngState();
  pos.step = 1;
  manager.Save(pos, *model, optimizer);
  pos.step = 2;
  const SavedCheckpoint newest = manager.Save(pos, *model, optimizer);
  nlohmann::json m = nlohmann::json::parse(std::ifstream(newest.path + "/manifest.json"));
  m["version"] = 4;
  m["files"] = nlohmann::json::array({"model.pt"});  // a later version may change any field's shape
  std::ofstream(newest.path + "/manifest.json", std::ios::trunc) << m.dump(2);

  RunPosition loaded;
  for (int peek = 0; peek < 2; ++peek) {
    try {
      if (peek) {
        manager.PeekLatest(&loaded);
      } else {
        manager.LoadLatest(*model, optimizer, &loaded);
      }
      FAIL() << "resumed past a version 4 checkpoint (step " << loaded.step << ")";
    } catch (const CheckpointVersionError& e) {
      EXPECT_NE(std::string(e.what()).find("step-00000002 has manifest version 4"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("versions 1 to 3"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace nightshift::trainer
