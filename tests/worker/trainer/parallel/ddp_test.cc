// Data parallelism with real Gloo groups: ranks are threads of this process, meeting
// through a TCPStore on 127.0.0.1 and a free port.
#include "worker/trainer/parallel/ddp.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <thread>

#include "common/command.h"
#include "tests/worker/trainer/ranks_util.h"
#include "tests/worker/trainer/test_util.h"
#include "worker/trainer/checkpoint/checkpoint.h"
#include "worker/trainer/models/model.h"
#include "worker/trainer/fault_injection.h"
#include "worker/trainer/memory/oom.h"
#include "worker/trainer/parallel/step_agreement.h"
#include "worker/trainer/train.h"

namespace nightshift::trainer {
namespace {

namespace fs = std::filesystem;
using testing::FreePort;
using testing::LoopbackRank;
using testing::Options;
using testing::RunRanks;
using testing::TrainRanks;

namespace F = torch::nn::functional;

ModelConfig SmallModel() {
  ModelConfig m;
  m.layers = 2;
  m.d_model = 32;
  m.heads = 2;
  m.ffn = 64;
  m.dropout = 0.0;
  m.max_len = 16;
  return m;
}
constexpr int64_t kVocab = 50, kClasses = 3, kLen = 12;

struct Data {
  torch::Tensor tokens, mask, labels;
  Data Slice(int64_t from, int64_t n) const {
    return {tokens.narrow(0, from, n), mask.narrow(0, from, n), labels.narrow(0, from, n)};
  }
};

Data MakeData(int64_t n, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  Data d;
  d.tokens = torch::randint(4, kVocab, {n, kLen}, gen, torch::kInt64);
  d.tokens.select(1, 0).fill_(2);  // bos
  d.mask = torch::zeros({n, kLen}, torch::kBool);
  d.mask.narrow(0, 0, n / 2).narrow(1, kLen - 3, 3).fill_(true);  // some padding
  d.labels = torch::randint(0, kClasses, {n}, gen, torch::kInt64);
  return d;
}

torch::Tensor Loss(TransformerClassifier& model, const Data& d) {
  return F::cross_entropy(model->forward(d.tokens, d.mask), d.labels);
}

std::vector<torch::Tensor> Snapshot(const std::vector<torch::Tensor>& ts, bool grads = false) {
  std::vector<torch::Tensor> out;
  for (const auto& t : ts) out.push_back((grads ? t.grad() : t).detach().clone());
  return out;
}

// max |a - b| <= rel * max |b| (+ a tiny floor), tensor by tensor.
void ExpectClose(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, double rel,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = (a[i] - b[i]).abs().max().item<double>();
    const double scale = b[i].abs().max().item<double>();
    EXPECT_LE(diff, rel * scale + 1e-9) << what << " tensor " << i << " scale " << scale;
  }
}

TransformerClassifier Build(uint64_t seed) {
  torch::manual_seed(seed);
  return BuildModel(SmallModel(), kVocab, kClasses, 0);
}

class DdpTest : public ::testing::Test {
 protected:
  void SetUp() override { torch::set_num_threads(1); }
};

// 2 ranks with batch b == 1 rank with batch 2b, after one step (and the gradients).
void CheckOneStepEquivalence(bool overlap) {
  const int64_t b = 6;
  const Data all = MakeData(2 * b, 99);
  const int port = FreePort();
  std::vector<std::vector<torch::Tensor>> start(2), after(2), grads(2);
  std::vector<int> buckets(2);
  std::vector<TransformerClassifier> models = {Build(1), Build(2)};  // different inits
  RunRanks(2, [&](int r) {
    TransformerClassifier& model = models[r];
    GradientSyncOptions so;
    so.bucket_bytes = 8 << 10;  // several buckets
    so.overlap = overlap;
    GradientSync sync(ProcessGroup::Create(Options(r, 2, port)), model->parameters(), so);
    sync.Broadcast(model->parameters());
    start[r] = Snapshot(model->parameters());
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.5));
    opt.zero_grad();
    Loss(model, all.Slice(r * b, b)).backward();
    SyncStats stats = sync.Finish();
    EXPECT_GT(stats.allreduce_seconds, 0);
    EXPECT_GE(stats.hidden_fraction, 0);
    EXPECT_LE(stats.hidden_fraction, 1);
    if (!overlap) EXPECT_EQ(stats.hidden_fraction, 0);
    grads[r] = Snapshot(model->parameters(), /*grads=*/true);
    opt.step();
    after[r] = Snapshot(model->parameters());
    buckets[r] = sync.num_buckets();
  });
  EXPECT_GE(buckets[0], 3);
  for (size_t i = 0; i < start[0].size(); ++i) ASSERT_TRUE(torch::equal(start[0][i], start[1][i])) << i;

  // The reference: one rank, the combined batch, from rank 0's start.
  TransformerClassifier ref = Build(3);
  {
    torch::NoGradGuard no_grad;
    auto ps = ref->parameters();
    for (size_t i = 0; i < ps.size(); ++i) ps[i].copy_(start[0][i]);
  }
  torch::optim::SGD opt(ref->parameters(), torch::optim::SGDOptions(0.5));
  opt.zero_grad();
  Loss(ref, all).backward();
  const auto ref_grads = Snapshot(ref->parameters(), true);
  opt.step();
  const auto ref_after = Snapshot(ref->parameters());
  for (int r = 0; r < 2; ++r) {
    ExpectClose(grads[r], ref_grads, 1e-5, "gradients of rank " + std::to_string(r));
    ExpectClose(after[r], ref_after, 1e-5, "parameters of rank " + std::to_string(r));
  }
}

TEST_F(DdpTest, OneStepOfTwoRanksEqualsOneRankWithTheCombinedBatch) { CheckOneStepEquivalence(true); }

TEST_F(DdpTest, SameResultWithoutHookDrivenOverlap) { CheckOneStepEquivalence(false); }

TEST_F(DdpTest, TwentyStepsKeepRanksIdentical) {
  const int port = FreePort();
  std::vector<std::vector<torch::Tensor>> final_params(2);
  std::vector<TransformerClassifier> models = {Build(5), Build(6)};
  RunRanks(2, [&](int r) {
    TransformerClassifier& model = models[r];
    GradientSyncOptions so;
    so.bucket_bytes = 16 << 10;
    GradientSync sync(ProcessGroup::Create(Options(r, 2, port)), model->parameters(), so);
    sync.Broadcast(model->parameters());
    torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(3e-3).weight_decay(0.01));
    for (int step = 0; step < 20; ++step) {
      const Data d = MakeData(4 + r, 1000 * step + r);  // different data and sizes per rank
      opt.zero_grad();
      Loss(model, d).backward();
      sync.Finish();
      torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
      opt.step();
    }
    final_params[r] = Snapshot(model->parameters());
  });
  for (size_t i = 0; i < final_params[0].size(); ++i)
    EXPECT_TRUE(torch::equal(final_params[0][i], final_params[1][i])) << "parameter " << i;
}

TEST_F(DdpTest, NoSyncAccumulatesLocallyAndSyncsOnTheLastMicroBatch) {
  const int64_t b = 8;
  const Data all = MakeData(2 * b, 7);
  const int port = FreePort();
  std::vector<std::vector<torch::Tensor>> whole(2), micro(2);
  std::vector<TransformerClassifier> models = {Build(1), Build(1)};
  RunRanks(2, [&](int r) {
    TransformerClassifier& model = models[r];
    GradientSync sync(ProcessGroup::Create(Options(r, 2, port)), model->parameters());
    const Data mine = all.Slice(r * b, b);
    // The whole local batch at once.
    model->zero_grad();
    Loss(model, mine).backward();
    sync.Finish();
    whole[r] = Snapshot(model->parameters(), true);
    // Two micro-batches of b/2 (each loss halved): only the second one syncs.
    model->zero_grad();
    {
      NoSync no_sync(&sync);
      EXPECT_FALSE(sync.sync());
      (Loss(model, mine.Slice(0, b / 2)) * 0.5).backward();
      EXPECT_EQ(sync.Finish().buckets, 0);  // nothing to do while not syncing
    }
    EXPECT_TRUE(sync.sync());
    (Loss(model, mine.Slice(b / 2, b / 2)) * 0.5).backward();
    sync.Finish();
    micro[r] = Snapshot(model->parameters(), true);
  });
  for (int r = 0; r < 2; ++r) ExpectClose(micro[r], whole[r], 1e-5, "rank " + std::to_string(r));
  ExpectClose(whole[0], whole[1], 0, "ranks");
}

TEST_F(DdpTest, BackwardAfterSendWithoutNoSyncIsAnError) {
  const int port = FreePort();
  std::vector<TransformerClassifier> models = {Build(1), Build(1)};
  std::vector<std::string> errors(2);
  RunRanks(2, [&](int r) {
    TransformerClassifier& model = models[r];
    GradientSync sync(ProcessGroup::Create(Options(r, 2, port)), model->parameters());
    const Data d = MakeData(4, 3 + r);
    Loss(model, d).backward();
    Loss(model, d).backward();  // a second micro-batch, but synced: buckets already sent
    try {
      sync.Finish();
    } catch (const std::logic_error& e) {
      errors[r] = e.what();
    }
  });
  for (const auto& e : errors) EXPECT_NE(e.find("NoSync"), std::string::npos) << e;
}

TEST_F(DdpTest, AnyRankIsAnOrAcrossRanks) {
  const int port = FreePort();
  std::vector<std::vector<bool>> got(2);
  RunRanks(2, [&](int r) {
    auto group = ProcessGroup::Create(Options(r, 2, port));
    got[r].push_back(group->AnyRank(r == 1));
    got[r].push_back(group->AnyRank(false));
    EXPECT_EQ(group->MinOverRanks(r == 0 ? 7 : -3), -3);
    EXPECT_EQ(group->MinOverRanks(r == 0 ? 5 : 9), 5);
    const auto v = group->AnyRank(std::vector<bool>{r == 0, false, true});
    got[r].insert(got[r].end(), v.begin(), v.end());
    group->Barrier();
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(got[r], (std::vector<bool>{true, false, true, false, true})) << r;
}

TEST_F(DdpTest, RanksAtDifferentPositionsRefuseToStart) {
  const int port = FreePort();
  std::vector<TransformerClassifier> models = {Build(1), Build(2)};
  std::vector<std::string> errors(2);
  RunRanks(2, [&](int r) {
    TrainConfig cfg;
    cfg.data_parallel.world_size = 2;
    cfg.data_parallel.timeout_seconds = 20;
    RankInfo info;
    info.rank = r;
    info.world_size = 2;
    info.master_addr = "127.0.0.1";
    info.master_port = port;
    try {
      CheckRanksAgree(*StartDataParallel(cfg, info, *models[r]), {r == 0 ? 10 : 20, 0, 10});
    } catch (const std::runtime_error& e) {
      errors[r] = e.what();
    }
  });
  for (const auto& e : errors)
    EXPECT_NE(e.find("different checkpoints or prepare different data"), std::string::npos) << e;
}

TEST_F(DdpTest, MissingPeerFailsWithinTheTimeout) {
  // The rendezvous: rank 1 never comes.
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(ProcessGroup::Create(Options(0, 2, FreePort(), 1500)), std::runtime_error);
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(waited, 15);

  // A collective: rank 1 joined, then stops taking part (stuck, then gone).
  const int port = FreePort();
  std::string error;
  RunRanks(2, [&](int r) {
    // (3 s: the rendezvous must not time out on a loaded machine)
    auto group = ProcessGroup::Create(Options(r, 2, port, 3000));
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(8000));
      return;
    }
    torch::Tensor t = torch::ones({4});
    auto start = std::chrono::steady_clock::now();
    try {
      group->AllReduceSum(t);
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(s, 7.5) << "waited past the timeout";
  });
  EXPECT_NE(error.find("timed out"), std::string::npos) << error;
}

// Coordinated OOM recovery: rank 1 runs out of memory on its batch, rank 0 does not. Both
// retry in micro-batches (rank 0 because of the vote), nobody waits in a collective the
// other never enters, and the step equals the unsplit two-rank step.
TEST_F(DdpTest, OutOfMemoryOnOneRankSplitsOnEveryRankAndKeepsTheUpdate) {
  const int64_t b = 6;
  const Data all = MakeData(2 * b, 21);
  const auto as_batch = [](const Data& d) {
    Batch batch;
    batch.tokens = d.tokens;
    batch.pad_mask = d.mask;
    batch.labels = d.labels;
    batch.samples = d.tokens.size(0);
    batch.padded_tokens = d.tokens.numel();
    batch.real_tokens = d.mask.logical_not().sum().item<int64_t>();
    return batch;
  };
  // One SGD step of both ranks; rank 1 throws out-of-memory above `rank1_limit` tokens.
  const auto step = [&](int64_t rank1_limit, std::vector<MicroBatchResult>* results) {
    const int port = FreePort();
    std::vector<std::vector<torch::Tensor>> after(2);
    std::vector<TransformerClassifier> models = {Build(1), Build(2)};
    RunRanks(2, [&](int r) {
      TransformerClassifier& model = models[r];
      GradientSyncOptions so;
      so.bucket_bytes = 8 << 10;
      GradientSync sync(ProcessGroup::Create(Options(r, 2, port)), model->parameters(), so);
      sync.Broadcast(model->parameters());
      torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.5));
      StepAgreement agreement(&sync);
      OomOptions oo;
      const FaultInjector faults(FaultPlan{.oom_above_tokens = r == 1 ? rank1_limit : 0});
      oo.vote = [&](bool o, bool u, double loss) { return agreement.Vote(o, u, loss); };
      MicroBatchRunner runner(oo);
      const Batch mine = as_batch(all.Slice(r * b, b));
      (*results)[r] = runner.Run(
          mine,
          [&](const Batch& m, bool last, bool) {
            faults.BeforeMicroBatch(m.padded_tokens);
            NoSync accumulate_only(last ? nullptr : &sync);
            torch::Tensor loss = F::cross_entropy(model->forward(m.tokens, m.pad_mask), m.labels,
                                                  F::CrossEntropyFuncOptions().reduction(torch::kSum)) /
                                 double(b);
            loss.backward();
            return loss.item<double>();
          },
          [&] { opt.zero_grad(); });
      EXPECT_GT(agreement.sync_stats().buckets, 0) << "the successful attempt's all-reduce";
      opt.step();
      after[r] = Snapshot(model->parameters());
    });
    ExpectClose(after[1], after[0], 0, "ranks after the step");
    return after[0];
  };
  std::vector<MicroBatchResult> plain(2), split(2);
  const auto expected = step(0, &plain);
  const auto got = step(2 * kLen, &split);  // rank 1: at most 2 samples per micro-batch
  EXPECT_EQ(plain[0].oom_recoveries + plain[1].oom_recoveries, 0);
  EXPECT_GE(split[1].oom_recoveries, 1);
  EXPECT_EQ(split[0].oom_recoveries, split[1].oom_recoveries) << "rank 0 retried with rank 1";
  EXPECT_GE(split[1].micro_batches, 3);
  ExpectClose(got, expected, 1e-5, "split step against the unsplit step");
}

// Two trainer ranks (threads) with max_tokens: auto and an out-of-memory fault on rank 1
// only: they agree on one budget, split together, and both finish.
TEST_F(DdpTest, TwoTrainerRanksAgreeOnTheBudgetAndOnSplitting) {
  TrainConfig c = testing::TinyConfig(testing::FreshDir("ddp_oom"), /*n_train=*/160);
  c.data_parallel.world_size = 2;
  c.data_parallel.timeout_seconds = 60;
  c.model.max_len = 32;
  c.train.max_tokens_auto = true;  // on this tiny data: one batch per rank and epoch
  c.train.epochs = 4;
  c.train.max_steps = 4;
  c.checkpoint.every_steps = 2;
  std::vector<MemoryProgressSink> progress(2);
  const std::vector<int> exit_codes = TrainRanks(c, &progress, [](int r, RankInfo& rank) {
    rank.memory_limit_bytes = int64_t{2} << 30;
    if (r == 1) rank.faults.oom_above_tokens = 24;  // only rank 1 runs out (above 24 tokens)
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(exit_codes[r], kExitOk) << "rank " << r << ": " << progress[r].records.back().String("message");
    EXPECT_EQ(progress[r].records.back().event, "done");
    EXPECT_EQ(progress[r].records.back().Number("step"), 4);
  }
  const auto last_step = [](const MemoryProgressSink& p) {
    for (auto it = p.records.rbegin(); it != p.records.rend(); ++it)
      if (it->event == "step") return *it;
    return format::ProgressRecord{};
  };
  EXPECT_EQ(progress[0].records.front().Number("max_tokens"), progress[1].records.front().Number("max_tokens"));
  EXPECT_GE(last_step(progress[1]).Number("oom_recoveries"), 1);
  EXPECT_EQ(last_step(progress[0]).Number("oom_recoveries"), last_step(progress[1]).Number("oom_recoveries"));
}

// Two ranks, each with its own checkpoint folder (no shared storage), trained with
// `folders[r]` as rank r's; returns each rank's last progress record.
std::vector<format::ProgressRecord> TrainTwoRanks(TrainConfig c, const std::vector<std::string>& folders) {
  const int port = FreePort();
  std::vector<MemoryProgressSink> progress(2);
  std::vector<int> exit_codes(2, -1);
  RunRanks(2, [&](int r) {
    TrainConfig mine = c;
    mine.checkpoint_dir = folders[r];
    exit_codes[r] = RunTraining(mine, LoopbackRank(r, 2, port), progress[r]);
  });
  std::vector<format::ProgressRecord> out;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(exit_codes[r], kExitOk) << "rank " << r << ": " << progress[r].records.back().String("message");
    EXPECT_EQ(progress[r].records.front().event, "start");
    out.push_back(progress[r].records.front());
  }
  return out;
}

std::vector<torch::Tensor> NewestParameters(const TrainConfig& c, const std::string& folder) {
  auto model = BuildSequenceModel(c.model, c.data.vocab_size, c.data.num_classes, c.data.pad_id);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  RunPosition position;
  EXPECT_TRUE(CheckpointManager(CheckpointOptions{folder}).LoadLatest(*model, optimizer, &position));
  std::vector<torch::Tensor> params;
  for (const auto& p : model->parameters()) params.push_back(p.detach().clone());
  return params;
}

// Two ranks of a small run that checkpoints every 3 steps and keeps them all.
TrainConfig CheckpointingTwoRanks(const std::string& dir) {
  TrainConfig c = testing::TinyConfig(dir, /*n_train=*/96);
  c.data_parallel.world_size = 2;
  c.data_parallel.timeout_seconds = 60;
  c.checkpoint.every_steps = 3;
  c.checkpoint.keep_last = 10;
  c.model.dropout = 0;  // both ranks are threads of this process: they would share one CPU generator
  return c;
}

// After an out-of-memory split (rank 1 ran out; both ranks cut their batches since) a
// checkpoint keeps both ranks' micro-batch sizes, and a run stopped there resumes cutting as
// the uninterrupted run does instead of running out again: the same weights. (Dropout 0:
// the ranks are threads sharing one generator; DdpProcessTest below shows the agreed
// generators with rank processes.)
TEST_F(DdpTest, AResumeAfterAnOutOfMemorySplitCutsAsTheUninterruptedRunDid) {
  const auto faults = [](int r, RankInfo& rank) {
    if (r == 1) rank.faults.oom_above_tokens = 30;  // batches are 8 x up to 12 tokens
  };
  const auto run = [&](const std::string& name, bool stop_first) {
    TrainConfig c = CheckpointingTwoRanks(testing::FreshDir(name));
    c.checkpoint.every_steps = 0;
    if (stop_first) {
      RequestStop();
      std::vector<MemoryProgressSink> stopped(2);
      EXPECT_EQ(TrainRanks(c, &stopped, faults), std::vector<int>({kExitStopped, kExitStopped}));
      ClearStopRequest();
      RunPosition saved;
      EXPECT_TRUE(CheckpointManager(CheckpointOptions{c.checkpoint_dir}).PeekLatest(&saved));
      EXPECT_EQ(saved.micro_batch_tokens.size(), 2u);
      for (const int64_t tokens : saved.micro_batch_tokens) EXPECT_GT(tokens, 0);
    }
    std::vector<MemoryProgressSink> progress(2);
    EXPECT_EQ(TrainRanks(c, &progress, faults), std::vector<int>({kExitOk, kExitOk}));
    for (const auto& record : progress[1].records)
      if (stop_first && record.event == "step") EXPECT_EQ(record.Number("oom_recoveries"), 0) << "ran out again";
    return NewestParameters(c, c.checkpoint_dir);
  };
  const std::vector<torch::Tensor> resumed = run("ddp_oom_resume", true), uninterrupted = run("ddp_oom_resume_ref", false);
  ASSERT_EQ(resumed.size(), uninterrupted.size());
  for (size_t i = 0; i < resumed.size(); ++i) EXPECT_TRUE(torch::equal(resumed[i], uninterrupted[i])) << i;
}

// Issue 18: ranks without a shared checkpoint folder resume from the newest checkpoint
// any of them holds. Rank 0's disk has step 3, rank 1's step 6 (rank 0's worker was
// replaced, rank 1 sits where rank 0 once ran): both resume from 6, rank 0 receives it
// over the group and keeps it, and the run ends bit-identical to an uninterrupted one.
TEST_F(DdpTest, RanksWithoutSharedStorageResumeFromTheNewestCheckpointAnyHolds) {
  const std::string dir = testing::FreshDir("ddp_no_shared");
  TrainConfig c = CheckpointingTwoRanks(dir);
  TrainTwoRanks(c, {dir + "/shared", dir + "/shared"});
  const std::vector<torch::Tensor> uninterrupted = NewestParameters(c, dir + "/shared");

  fs::create_directories(dir + "/both");
  fs::copy(dir + "/shared/step-00000006", dir + "/both/step-00000006");
  TrainTwoRanks(c, {dir + "/both", dir + "/both"});
  const std::vector<torch::Tensor> shared_resume = NewestParameters(c, dir + "/both");
  for (size_t i = 0; i < shared_resume.size(); ++i) EXPECT_TRUE(torch::equal(shared_resume[i], uninterrupted[i])) << "shared " << i;
  for (const auto& [rank, step] : {std::pair{0, "step-00000003"}, std::pair{1, "step-00000006"}}) {
    const std::string folder = dir + "/rank" + std::to_string(rank);
    fs::create_directories(folder);
    fs::copy(dir + "/shared/" + step, folder + "/" + step);
  }
  const auto starts = TrainTwoRanks(c, {dir + "/rank0", dir + "/rank1"});
  for (const auto& start : starts) EXPECT_EQ(start.Number("resumed_step"), 6);
  EXPECT_TRUE(fs::exists(dir + "/rank0/step-00000006/COMPLETE")) << "rank 0 did not keep what it received";
  const std::vector<torch::Tensor> resumed = NewestParameters(c, dir + "/rank0");
  ASSERT_EQ(resumed.size(), uninterrupted.size());
  for (size_t i = 0; i < resumed.size(); ++i) EXPECT_TRUE(torch::equal(resumed[i], uninterrupted[i])) << i;
}

// export.best with folders per worker: rank 0's worker replaced (its disk empty), rank 1's
// holding steps up to 9 and the best before them. Rank 0 receives step 9 and the best step
// it names, and exports that step, as the uninterrupted run does (before, the final model,
// with a warning). A rate too small to move a float32 weight keeps every evaluation's
// val_loss the same: the best is the first evaluation's, step 3.
TEST_F(DdpTest, ARankThatReceivesTheNewestStepReceivesExportBestsStepToo) {
  const std::string dir = testing::FreshDir("ddp_best_sent");
  TrainConfig c = CheckpointingTwoRanks(dir);  // 12 steps, saves every 3
  c.checkpoint_dir_shared = false;
  c.train.lr = 1e-30;
  c.eval_every_steps = 3;
  c.export_best = "val_loss";
  const auto run = [&]() {
    const int port = FreePort();
    std::vector<MemoryProgressSink> progress(2);
    RunRanks(2, [&](int r) {
      TrainConfig mine = c;
      mine.checkpoint_dir = dir + "/rank" + std::to_string(r);
      EXPECT_EQ(RunTraining(mine, LoopbackRank(r, 2, port), progress[r]), kExitOk) << r;
    });
    return progress[0];
  };
  const auto export_step = [](const MemoryProgressSink& p) {
    for (const auto& r : p.records)
      if (r.event == "export") return static_cast<int64_t>(r.Number("step"));
    return int64_t{-1};
  };
  const int64_t best = export_step(run());
  ASSERT_EQ(best, 3);
  fs::remove_all(dir + "/rank0");
  for (const std::string& kept : CheckpointManager(CheckpointOptions{dir + "/rank1"}).ListComplete())
    if (fs::path(kept).filename().string() > "step-00000009") fs::remove_all(kept);
  const MemoryProgressSink resumed = run();
  EXPECT_EQ(export_step(resumed), best);
  for (const auto& r : resumed.records)
    if (r.event == "warning") EXPECT_EQ(r.String("message").find("export.best"), std::string::npos) << r.String("message");
}

// Issue 18: without a shared folder every worker's first rank writes a complete
// checkpoint of its own (checkpoint_dir_shared false), in step with the others. When rank
// 0's worker is lost with its disk, rank 1's copy alone resumes the job, bit-identical to
// an uninterrupted run.
TEST_F(DdpTest, EveryWorkerKeepsItsOwnCompleteCheckpointsAndAnyOneResumesTheJob) {
  const std::string dir = testing::FreshDir("ddp_own_disks");
  TrainConfig c = CheckpointingTwoRanks(dir);
  c.checkpoint_dir_shared = false;
  TrainTwoRanks(c, {dir + "/rank0", dir + "/rank1"});
  const std::vector<std::string> kept0 = CheckpointManager(CheckpointOptions{dir + "/rank0"}).ListComplete();
  const std::vector<std::string> kept1 = CheckpointManager(CheckpointOptions{dir + "/rank1"}).ListComplete();
  ASSERT_GE(kept1.size(), 3u);
  ASSERT_EQ(kept0.size(), kept1.size());
  for (size_t i = 0; i < kept1.size(); ++i) {
    EXPECT_EQ(fs::path(kept0[i]).filename(), fs::path(kept1[i]).filename());
    EXPECT_EQ(ReadCheckpointFiles(kept0[i]).at("model.pt"), ReadCheckpointFiles(kept1[i]).at("model.pt")) << kept1[i];
  }
  const std::vector<torch::Tensor> uninterrupted = NewestParameters(c, dir + "/rank1");

  // Rank 0's worker is gone with its disk; rank 1's disk is as it was at step 6.
  fs::remove_all(dir + "/rank0");
  for (const std::string& kept : kept1)
    if (fs::path(kept).filename().string() > "step-00000006") fs::remove_all(kept);
  const auto starts = TrainTwoRanks(c, {dir + "/rank0", dir + "/rank1"});
  for (const auto& start : starts) EXPECT_EQ(start.Number("resumed_step"), 6);
  for (const char* folder : {"/rank0", "/rank1"}) {
    const std::vector<torch::Tensor> resumed = NewestParameters(c, dir + folder);
    ASSERT_EQ(resumed.size(), uninterrupted.size());
    for (size_t i = 0; i < resumed.size(); ++i) EXPECT_TRUE(torch::equal(resumed[i], uninterrupted[i])) << folder << " " << i;
  }
}

// A NaN roll-back with a folder per worker: rank 0's copy of the newest checkpoint (step 9)
// is damaged as soon as it is written, so rank 0 rolls back to step 6 and rank 1 to step 9.
// Both stop with an error saying so (before, each trained on from its own step, the ranks'
// parameters apart); the restart resumes both from step 9, which rank 1 sends rank 0.
TEST_F(DdpTest, ARollBackToDifferentStepsStopsTheRanksAndTheRestartRejoinsThem) {
  const std::string dir = testing::FreshDir("ddp_rollback_apart");
  TrainConfig c = CheckpointingTwoRanks(dir);  // saves every 3 steps, 6 steps an epoch
  c.checkpoint_dir_shared = false;
  std::vector<int> exit_codes(2, -1);
  // Both ranks through a roll-back (steps 7-11 not finite: the fifth in a row rolls back),
  // in <root>/rank<r>, each rank's copies of the steps in damaged[r] damaged once written.
  const auto damaged_run = [&](const std::string& root, const std::vector<std::set<int64_t>>& damaged) {
    std::vector<testing::DamagingProgressSink> told(2);
    for (int r = 0; r < 2; ++r) {
      told[r].folder = root + "/rank" + std::to_string(r);
      told[r].damaged = damaged[r];
    }
    const int port = FreePort();
    RunRanks(2, [&](int r) {
      TrainConfig mine = c;
      mine.checkpoint_dir = root + "/rank" + std::to_string(r);
      RankInfo rank = LoopbackRank(r, 2, port);
      rank.faults.nan_loss_from_step = 7;
      rank.faults.nan_losses = 5;
      exit_codes[r] = RunTraining(mine, rank, told[r]);
    });
    return told;
  };
  const auto progress = damaged_run(dir, {{9}, {}});
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(exit_codes[r], kExitError) << "rank " << r;
    EXPECT_NE(progress[r].records.back().String("message").find("the ranks loaded checkpoints of different steps"),
              std::string::npos)
        << progress[r].records.back().String("message");
  }
  const auto starts = TrainTwoRanks(c, {dir + "/rank0", dir + "/rank1"});
  for (const auto& start : starts) EXPECT_EQ(start.Number("resumed_step"), 9);

  // Every copy on rank 0's disk damaged: its load throws, and it says why (a checkpoint
  // none of which loads); rank 1 stops too instead of waiting in a collective. Every copy
  // on both disks damaged: each says why (before: "no checkpoint to roll back to").
  for (const auto& both : damaged_run(testing::FreshDir("ddp_rollback_none_both"), {{3, 6, 9}, {3, 6, 9}})) {
    EXPECT_EQ(both.records.back().String("message").rfind("checkpoint: none of the 3 checkpoints", 0), 0u)
        << both.records.back().String("message");
  }
  const auto told = damaged_run(testing::FreshDir("ddp_rollback_none"), {{3, 6, 9}, {}});
  EXPECT_EQ(exit_codes[0], kExitError);
  EXPECT_EQ(told[0].records.back().String("message").rfind("checkpoint: none of the 3 checkpoints", 0), 0u)
      << told[0].records.back().String("message");  // its own error, not a vote's
  EXPECT_EQ(exit_codes[1], kExitError);
  EXPECT_NE(told[1].records.back().String("message").find("another rank could not load its checkpoint"),
            std::string::npos)
      << told[1].records.back().String("message");
}

// Evaluation under data parallelism: each rank takes every other batch, and the summed
// metrics equal one rank evaluating the whole set.
TEST_F(DdpTest, ShardedEvaluationEqualsTheWholeSet) {
  const std::string dir = testing::FreshDir("ddp_eval");
  testing::WriteSyntheticShard(dir + "/val.shard", 37, 4);
  format::ShardReader shard;
  ASSERT_EQ(shard.Open(dir + "/val.shard", /*verify_checksum=*/true), "");
  std::vector<uint32_t> lengths;
  for (uint64_t i = 0; i < shard.num_samples(); ++i) lengths.push_back(shard.length(i));
  BatchPlanOptions po;
  po.batch_size = 4;  // 10 batches: the ranks get 5 each, the last one short
  const BatchPlan plan = PlanEval(lengths, po);
  torch::manual_seed(3);
  std::shared_ptr<SequenceModel> model = BuildSequenceModel(SmallModel(), testing::kVocab, 2, testing::kPad);
  const EvalMetrics whole = Evaluate(*model, shard, plan, 16, testing::kPad, 2);
  const int port = FreePort();
  std::vector<EvalMetrics> got(2);
  RunRanks(2, [&](int r) {
    auto group = ProcessGroup::Create(Options(r, 2, port));
    got[r] = Evaluate(*model, shard, plan, 16, testing::kPad, 2, false, group.get());
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(got[r].samples, 37);
    EXPECT_NEAR(got[r].loss, whole.loss, 1e-9 * std::abs(whole.loss)) << r;
    EXPECT_EQ(got[r].accuracy, whole.accuracy) << r;
    EXPECT_EQ(got[r].f1, whole.f1) << r;
  }
}

// The agreed generators across processes (the threads above share one generator): two
// nightshift-trainer processes, each with its own CPU generator, train with dropout while
// rank 1 runs out of memory in its backward (it drew dropout's seeds for the failed attempt
// and then for more micro-batches than rank 0). A run aborted after its step-4 checkpoint
// and resumed ends with the uninterrupted run's model, byte for byte: the checkpoint's
// generator state (rank 0's) is every rank's, as the ranks take rank 0's at each step's end.
// Without that, rank 1 resumes drawing rank 0's masks instead of its own: other weights.
TEST(DdpProcessTest, AResumeAfterAnOutOfMemorySplitDrawsTheUninterruptedRunsDropout) {
  const fs::path trainer = fs::read_symlink("/proc/self/exe").parent_path() / "nightshift-trainer";
  ASSERT_TRUE(fs::exists(trainer)) << trainer << " (built with trainer_test)";
  rlimit no_core{0, 0};  // the aborted ranks write no core file
  setrlimit(RLIMIT_CORE, &no_core);
  const auto run = [&](const std::string& name, bool abort_first) {
    const std::string dir = testing::FreshDir(name);
    testing::WriteSyntheticShard(dir + "/train.shard", 96, 1);
    testing::WriteSyntheticShard(dir + "/val.shard", 16, 2);
    const nlohmann::json config = {
        {"job_id", "j-test"},
        {"checkpoint_dir", dir + "/checkpoints"},
        {"spec",
         {{"model", {{"arch", "transformer_classifier"}, {"layers", 1}, {"d_model", 16}, {"heads", 2}, {"ffn", 32},
                     {"dropout", 0.1}, {"max_len", 16}}},
          {"train", {{"epochs", 2}, {"lr", 3e-3}, {"warmup_steps", 2}, {"threads", 1}, {"batching", {{"batch_size", 8}}}}},
          {"data", {{"path", dir}}},
          {"resources", {{"world_size", 2}, {"timeout_seconds", 60}}},
          {"checkpoint", {{"every_steps", 2}, {"keep_last", 10}}}}},
        {"data",
         {{"train_shard", dir + "/train.shard"}, {"val_shard", dir + "/val.shard"}, {"vocab_size", testing::kVocab},
          {"num_classes", 2}, {"pad_id", testing::kPad}, {"bos_id", testing::kBos}, {"eos_id", testing::kEos}}}};
    std::ofstream(dir + "/config.json") << config.dump();
    const auto train = [&](bool abort_at_5) {
      const std::string port = std::to_string(FreePort());
      std::vector<StatusOr<CommandResult>> results(2, Status::Internal("not run"));
      RunRanks(2, [&](int r) {
        std::map<std::string, std::string> env = {
            {"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", std::to_string(r)},
            {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port},
            {"NIGHTSHIFT_PROGRESS_FD", "none"}, {"NIGHTSHIFT_FAULT_OOM_ABOVE_TOKENS", r == 1 ? "30" : "0"},
            {"NIGHTSHIFT_FAULT_OOM_IN_BACKWARD", r == 1 ? "1" : "0"},
            {"NIGHTSHIFT_FAULT_ABORT_AT_STEP", abort_at_5 ? "5" : "0"},
            // every other variable ReadRankInfo reads, whatever this process's environment holds
            {"NIGHTSHIFT_FAULT_PROBE_OOM_ABOVE_TOKENS", "0"}, {"NIGHTSHIFT_FAULT_NAN_LOSS_FROM_STEP", "0"},
            {"NIGHTSHIFT_FAULT_NAN_LOSSES", "0"}, {"NIGHTSHIFT_MEMORY_LIMIT_BYTES", "0"},
            {"TORCHELASTIC_RESTART_COUNT", "0"}, {"TORCHELASTIC_USE_AGENT_STORE", "False"}};
        results[r] = SubprocessRunner().Run({trainer.string(), "--config", dir + "/config.json"}, "", env, 80);
      });
      for (int r = 0; r < 2; ++r) {
        ASSERT_TRUE(results[r].ok()) << results[r].status().ToString();
        if (abort_at_5) EXPECT_EQ(results[r]->exit_code, 128 + SIGABRT) << "rank " << r << ": " << results[r]->err;
        else EXPECT_EQ(results[r]->exit_code, 0) << "rank " << r << ": " << results[r]->err;
      }
    };
    if (abort_first) {
      train(true);
      RunPosition saved;
      EXPECT_TRUE(CheckpointManager(CheckpointOptions{dir + "/checkpoints"}).PeekLatest(&saved));
      EXPECT_EQ(saved.step, 4);
      EXPECT_EQ(saved.micro_batch_tokens.size(), 2u) << "rank 1 split";
    }
    train(false);
    std::ifstream in(dir + "/checkpoints/model/model.safetensors", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string resumed = run("ddp_process_oom_resume", true), uninterrupted = run("ddp_process_oom_ref", false);
  ASSERT_GT(uninterrupted.size(), 1000u);
  EXPECT_TRUE(resumed == uninterrupted) << "the resumed run's weights differ";
}

}  // namespace
}  // namespace nightshift::trainer
