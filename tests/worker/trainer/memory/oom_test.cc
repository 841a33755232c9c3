#include "worker/trainer/fault_injection.h"
#include "worker/trainer/memory/oom.h"

#include <gtest/gtest.h>

#include "tests/worker/trainer/test_util.h"
#include "worker/trainer/errors.h"
#include "worker/trainer/models/model.h"
#include "worker/trainer/train.h"

namespace nightshift::trainer {
namespace {

namespace F = torch::nn::functional;
using testing::FreshDir;
using testing::TinyConfig;

// A batch of 8 samples of lengths 3..10 (padding at the end), labels 0/1.
Batch MakeBatch() {
  torch::manual_seed(11);
  const int64_t b = 8, l = 10;
  Batch batch;
  batch.tokens = torch::randint(4, 30, {b, l}, torch::kLong);
  batch.pad_mask = torch::zeros({b, l}, torch::kBool);
  for (int64_t r = 0; r < b; ++r) {
    const int64_t n = 3 + r;
    batch.tokens[r].narrow(0, n, l - n).fill_(0);
    batch.pad_mask[r].narrow(0, n, l - n).fill_(true);
  }
  batch.labels = torch::tensor({0, 1, 1, 0, 1, 0, 0, 1}, torch::kLong);
  batch.samples = b;
  batch.padded_tokens = b * l;
  batch.real_tokens = batch.pad_mask.logical_not().sum().item<int64_t>();
  return batch;
}

ModelConfig NoDropout() {
  ModelConfig m;
  m.layers = 2;
  m.d_model = 16;
  m.heads = 2;
  m.ffn = 32;
  m.dropout = 0.0;
  m.max_len = 16;
  return m;
}

// One optimizer step of a fresh model (seeded) on MakeBatch(); returns its parameters
// and then their gradients. (SGD: Adam would turn the rounding noise of gradients that
// are zero in exact arithmetic, e.g. the attention key bias's, into whole steps.) A
// stand-in's loss weighs 0, as the trainer's; `calls`: each call's (stand_in, last).
std::vector<torch::Tensor> OneStep(MicroBatchRunner& runner, MicroBatchResult* result,
                                   const FaultInjector& faults = FaultInjector(),
                                   std::vector<std::pair<bool, bool>>* calls = nullptr) {
  torch::manual_seed(5);
  TransformerClassifier model = BuildModel(NoDropout(), 32, 2, 0);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.5));
  const Batch batch = MakeBatch();
  *result = runner.Run(
      batch,
      [&](const Batch& micro, bool last, bool stand_in) {
        if (calls != nullptr) calls->emplace_back(stand_in, last);
        faults.BeforeMicroBatch(micro.padded_tokens);
        torch::Tensor loss = F::cross_entropy(model->forward(micro.tokens, micro.pad_mask), micro.labels,
                                              F::CrossEntropyFuncOptions().reduction(torch::kSum)) /
                             double(batch.samples);
        if (stand_in) loss = loss * 0;
        loss.backward();
        return loss.item<double>();
      },
      [&] { opt.zero_grad(); });
  opt.step();
  std::vector<torch::Tensor> params;
  for (const auto& p : model->parameters()) params.push_back(p.detach().clone());
  for (const auto& p : model->parameters()) params.push_back(p.grad().clone());
  return params;
}

TEST(OomTest, SplitStepGivesTheSameParametersAsTheUnsplitStep) {
  MicroBatchRunner plain(OomOptions{});
  MicroBatchResult r0;
  const auto expected = OneStep(plain, &r0);
  EXPECT_EQ(r0.micro_batches, 1);
  EXPECT_EQ(r0.oom_recoveries, 0);

  const FaultInjector above_25(FaultPlan{.oom_above_tokens = 25});
  OomOptions options;
  int released = 0;  // the trainer passes ReleaseCachedMemory (device.h): CUDA's emptyCache
  options.release_memory = [&] { ++released; };
  MicroBatchRunner split(options);
  MicroBatchResult r1;
  const auto got = OneStep(split, &r1, above_25);
  EXPECT_GE(r1.micro_batches, 4);
  EXPECT_GE(r1.oom_recoveries, 2);
  EXPECT_EQ(released, r1.oom_recoveries) << "memory is released before every retry";
  EXPECT_NEAR(r1.loss, r0.loss, 1e-5 * std::abs(r0.loss));
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double scale = std::max(expected[i].abs().max().item<double>(), 1e-6);
    EXPECT_LE((got[i] - expected[i]).abs().max().item<double>() / scale, 1e-5) << i;
  }
  // Later batches start at the size that fitted: no further out-of-memory attempts.
  EXPECT_GT(split.micro_batch_tokens(), 0);
  EXPECT_LE(split.micro_batch_tokens(), 25);
  MicroBatchResult r2;
  OneStep(split, &r2, above_25);
  EXPECT_EQ(r2.oom_recoveries, 0);
  EXPECT_EQ(r2.micro_batches, r1.micro_batches);
}

TEST(OomTest, OneSampleThatCannotFitFailsWithTheReason) {
  MicroBatchRunner runner(OomOptions{});
  MicroBatchResult r;
  try {
    OneStep(runner, &r, FaultInjector(FaultPlan{.oom_above_tokens = 2}));
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot fit"), std::string::npos) << e.what();
  }
}

TEST(OomTest, AnotherRanksVoteMakesThisRankSplitToo) {
  int attempts = 0;
  OomOptions options;
  options.vote = [&](bool local, bool unsplittable, double) {  // "rank 1 ran out" on the first attempt
    return OomVote{local || ++attempts == 1, unsplittable};
  };
  MicroBatchRunner runner(options);
  MicroBatchResult r;
  OneStep(runner, &r);
  EXPECT_EQ(r.oom_recoveries, 1);
  EXPECT_EQ(r.micro_batches, 2);
}

// A rank whose batch is one sample cannot split it: when another rank ran out, it reruns
// the sample as it is; when another rank ran out with one sample, every rank fails.
TEST(OomTest, OneSampleBatchRetriesAsItIsOrFailsWithTheOtherRank) {
  const Batch one = SliceBatch(MakeBatch(), 0, 1);
  int attempts = 0, calls = 0;
  OomOptions options;
  options.vote = [&](bool local, bool unsplittable, double) { return OomVote{local || ++attempts == 1, unsplittable}; };
  MicroBatchRunner retries(options);
  const auto step = [&](const Batch&, bool last, bool) {
    EXPECT_TRUE(last);
    ++calls;
    return 1.0;
  };
  const MicroBatchResult r = retries.Run(one, step, [] {});
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(r.micro_batches, 1);
  EXPECT_EQ(r.oom_recoveries, 1);

  options.vote = [](bool, bool, double) { return OomVote{true, true}; };
  MicroBatchRunner fails(options);
  try {
    fails.Run(one, step, [] {});
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("another rank ran out of memory with a single sample"), std::string::npos)
        << e.what();
  }
}

// A process group as the lockstep sees it: collectives counted, the skipped ones not.
struct FakeGroup {
  int64_t issued = 0, skip = 0, most = 0;  // most: another rank's micro-batches
  void Issue() {
    if (skip > 0) --skip;
    else ++issued;
  }
  Lockstep Make() {
    return Lockstep{[this](int64_t n) { return std::max(n, most); }, [this] { return issued; },
                    [this](int64_t n) { skip = n; }, [this] { return skip; }};
  }
};

// Lockstep (sharding full): after a recovery another rank cuts its batch into more
// micro-batches; this one runs stand-ins up to that count, the last of them the attempt's
// `last`, and the step equals the unsplit one (the stand-ins add nothing).
TEST(OomTest, InLockstepFewerMicroBatchesThanAnotherRankRunStandInsThatAddNothing) {
  MicroBatchRunner plain(OomOptions{});
  MicroBatchResult r0;
  const auto expected = OneStep(plain, &r0);
  FakeGroup group;
  group.most = 4;
  int attempts = 0;
  OomOptions options;
  options.lockstep = group.Make();
  options.vote = [&](bool local, bool unsplittable, double) { return OomVote{local || ++attempts == 1, unsplittable}; };
  MicroBatchRunner runner(options);
  MicroBatchResult r;
  std::vector<std::pair<bool, bool>> calls;
  const auto got = OneStep(runner, &r, FaultInjector(), &calls);
  EXPECT_EQ(r.oom_recoveries, 1);
  EXPECT_EQ(r.micro_batches, 2) << "stand-ins are not micro-batches of the step";
  EXPECT_EQ(r.stand_ins, 2);
  const std::vector<std::pair<bool, bool>> want = {{false, true}, {false, false}, {false, false}, {true, false}, {true, true}};
  EXPECT_EQ(calls, want) << "the first attempt whole (no rank had cut), then 2 halves and 2 stand-ins";
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double scale = std::max(expected[i].abs().max().item<double>(), 1e-6);
    EXPECT_LE((got[i] - expected[i]).abs().max().item<double>() / scale, 1e-5) << i;
  }
}

// Lockstep: a rank that runs out of memory halfway through an attempt's collectives reruns
// the attempt on two-token stand-ins with the collectives it had issued skipped, so it has
// issued each collective of the attempt once when it votes (here three per micro-batch:
// one before the point where memory runs out, two after); then every rank retries.
TEST(OomTest, InLockstepARankThatRunsOutCatchesUpOnStandInsBeforeItVotes) {
  const Batch whole = MakeBatch();                    // 8 rows of lengths 3..10: 80 padded tokens
  const Batch small = SliceBatch(whole, 0, 4);        // lengths 3..6: 24
  const std::vector<Batch> step_batches = {small, whole};  // one step of two accumulated batches
  for (const int64_t limit : {30, 1}) {
    SCOPED_TRACE("out of memory above " + std::to_string(limit) + " tokens");
    FakeGroup group;
    std::vector<int64_t> at_votes;  // the collectives issued when each attempt votes
    int zeroed = 0;
    OomOptions options;
    options.lockstep = group.Make();
    options.vote = [&](bool local, bool unsplittable, double) {
      at_votes.push_back(group.issued);
      return OomVote{local, unsplittable};
    };
    MicroBatchRunner runner(options);
    std::vector<std::pair<int64_t, bool>> calls;  // (rows, stand_in)
    const auto step = [&](const Batch& m, bool, bool stand_in) {
      calls.emplace_back(m.rows(), stand_in);
      group.Issue();
      if (m.padded_tokens > limit) ThrowInjectedOutOfMemory(m.padded_tokens, limit);
      group.Issue();
      group.Issue();
      return 1.0;
    };
    if (limit == 1) {  // a stand-in (two tokens) runs out too: nothing is left to do in step with the others
      try {
        runner.Run(step_batches, step, [&] { ++zeroed; });
        FAIL() << "expected an error";
      } catch (const PermanentError& e) {
        EXPECT_NE(std::string(e.what()).find("then again while issuing its remaining collectives"), std::string::npos)
            << e.what();
      }
      EXPECT_EQ(group.skip, 0) << "the skipping ends with the catch-up";
      continue;
    }
    const MicroBatchResult r = runner.Run(step_batches, step, [&] { ++zeroed; });
    // Attempts of 2, 4 and 8 micro-batches: the first two run out in their last one (80 and
    // then 4 x 10 = 40 tokens), after its first collective.
    EXPECT_EQ(at_votes, (std::vector<int64_t>{2 * 3, 2 * 3 + 4 * 3, 2 * 3 + 4 * 3 + 8 * 3}));
    EXPECT_EQ(r.oom_recoveries, 2);
    EXPECT_EQ(r.micro_batches, 8);
    EXPECT_EQ(group.skip, 0);
    using Calls = std::vector<std::pair<int64_t, bool>>;
    const Calls first = {{4, false}, {8, false}, {1, true}, {1, true}};
    EXPECT_EQ(Calls(calls.begin(), calls.begin() + 4), first);
    EXPECT_EQ(zeroed, 3 + 2 + 2) << "before each attempt, before each catch-up, after each vote to retry";
  }
}

TEST(OomTest, RecognisesOutOfMemoryErrors) {
  const c10::SourceLocation here{__func__, __FILE__, __LINE__};
  EXPECT_TRUE(IsOutOfMemory(c10::Error(here, "DefaultCPUAllocator: can't allocate memory: you tried")));
  EXPECT_TRUE(IsOutOfMemory(c10::OutOfMemoryError(here, "CUDA out of memory.")));
  EXPECT_FALSE(IsOutOfMemory(c10::Error(here, "shape mismatch")));
  EXPECT_FALSE(IsOutOfMemory(std::runtime_error("out of memory")));  // not from LibTorch
}

TEST(OomTest, SliceTrimsToTheLongestSample) {
  const Batch batch = MakeBatch();
  const Batch s = SliceBatch(batch, 0, 2);  // lengths 3 and 4
  EXPECT_EQ(s.tokens.sizes(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(s.padded_tokens, 8);
  EXPECT_EQ(s.real_tokens, 7);
  int64_t samples = 0;
  for (const Batch& m : SplitBatch(batch, 3)) samples += m.samples;
  EXPECT_EQ(samples, 8);
}

TEST(OomTest, TrainingRecoversAndReportsIt) {
  TrainConfig c = TinyConfig(FreshDir("oom"));
  c.train.max_steps = 6;
  c.checkpoint.every_steps = 0;
  RankInfo rank;
  rank.faults.oom_above_tokens = 30;  // batches are 8 x up to 12 tokens
  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(c, rank, progress), kExitOk);
  double recoveries = 0;
  for (const auto& r : progress.records)
    if (r.event == "step") recoveries = std::max(recoveries, r.Number("oom_recoveries"));
  EXPECT_GE(recoveries, 1);
  EXPECT_EQ(progress.records.back().event, "done");
}

}  // namespace
}  // namespace nightshift::trainer
