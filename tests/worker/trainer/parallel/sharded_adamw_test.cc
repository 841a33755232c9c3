// resources.sharding: optimizer (sharded_adamw.h) and full (fully_sharded.h) against
// today's data parallelism, in whole runs of ranks that are threads of this process on
// loopback Gloo: the parameters after 20 steps, the state each rank keeps, and
// checkpoints written by 4 ranks resumed on 2 and on 1. The models are the tiny random Llama and BERT folders transformers saves
// for the model tests (tests/support/hf_decoders_reference.py, hf_models_reference.py).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/worker/trainer/ranks_util.h"
#include "tests/worker/trainer/reference_util.h"
#include "tests/worker/trainer/test_util.h"
#include "worker/trainer/checkpoint/checkpoint.h"
#include "worker/trainer/checkpoint/optimizer_shards.h"
#include "worker/trainer/models/common.h"
#include "worker/trainer/models/model.h"
#include "worker/trainer/models/pretrained.h"
#include "worker/trainer/optim/amp.h"
#include "worker/trainer/optim/clip.h"
#include "worker/trainer/parallel/fully_sharded.h"
#include "worker/trainer/parallel/sharded_adamw.h"
#include "worker/trainer/train.h"

#ifndef NIGHTSHIFT_PYTHON
#define NIGHTSHIFT_PYTHON "/opt/nightshift/venv/bin/python"
#endif

namespace nightshift::trainer {
namespace {

namespace fs = std::filesystem;

constexpr int kLmVocab = 96, kLmLen = 16;

class ShardedAdamWTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string error;
    const std::string script = std::string(NIGHTSHIFT_SOURCE_DIR) + "/tests/support/hf_decoders_reference.py";
    decoders_ = new std::string(testing::SharedFolder("nightshift_hf_decoders", std::string(NIGHTSHIFT_PYTHON) + " " +
                                                      script + " {dir}", {script}, NIGHTSHIFT_PYTHON, &error));
    if (!decoders_->empty())
      encoders_ = new std::string(testing::EncoderFoldersWithTokenizers(NIGHTSHIFT_SOURCE_DIR, NIGHTSHIFT_PYTHON, &error));
    if (decoders_->empty() || encoders_->empty()) error_ = new std::string(error);
  }
  void SetUp() override {
    ASSERT_EQ(error_, nullptr) << *error_;
    torch::set_num_threads(1);
  }

  // A causal-LM run of the Llama folder (or another decoder's) on packed rows, bf16
  // autocast, every block recomputed in backward, two batches accumulated per step, 20 steps.
  static TrainConfig Llama(const std::string& name, const std::string& folder = "llama_lm") {
    TrainConfig c = testing::TinyConfig(testing::FreshDir(name));
    testing::WriteSyntheticLmShard(c.data.train_shard, 96, 1, kLmVocab, kLmLen, true);
    testing::WriteSyntheticLmShard(c.data.val_shard, 12, 2, kLmVocab, kLmLen, true);
    c.model.arch = "pretrained";
    c.model.task = "causal_lm";
    c.model.pretrained = *decoders_ + "/" + folder;
    c.model.layers = c.model.d_model = c.model.heads = c.model.ffn = 0;
    c.model.dropout = -1;
    c.model.max_len = kLmLen;
    c.data.vocab_size = kLmVocab;
    c.data.num_classes = 0;
    c.train.rows = "packed";
    c.train.max_tokens = 2 * kLmLen;
    c.train.precision = "bf16";
    c.train.checkpoint_every_blocks = 1;
    c.train.accumulate_steps = 2;
    c.train.grad_clip = 0;
    Until(&c, 20);
    EXPECT_EQ(hf::ResolvePretrained(&c), "");
    return c;
  }
  // Sequence classification of `folder`'s model in float32, fixed batches of 8, the
  // gradient clipped at a norm it always exceeds, every block recomputed in backward, two
  // batches accumulated per step.
  static TrainConfig Classifier(const std::string& name, const std::string& folder, int n_train = 96) {
    TrainConfig c = testing::TinyConfig(testing::FreshDir(name), n_train);
    c.model.arch = "pretrained";
    c.model.pretrained = folder;
    c.model.layers = c.model.d_model = c.model.heads = c.model.ffn = 0;
    c.model.dropout = -1;
    c.model.attention_dropout = 0;
    // The folders' own three labels: their heads load (a new head's random draws would race
    // between the rank threads on the one CPU generator); the data uses two of them.
    c.data.class_names = {"ham", "spam", "eggs"};
    c.data.num_classes = 3;
    testing::WriteSyntheticShard(c.data.train_shard, n_train, 1, 4, 12, 3);
    testing::WriteSyntheticShard(c.data.val_shard, 16, 2, 4, 12, 3);
    c.train.checkpoint_every_blocks = 1;
    c.train.accumulate_steps = 2;
    c.train.grad_clip = 0.01;
    Until(&c, 20);
    EXPECT_EQ(hf::ResolvePretrained(&c), "");
    return c;
  }
  static void Until(TrainConfig* c, int steps) {
    c->train.epochs = 1000;
    c->train.max_steps = steps;
    c->checkpoint.every_steps = 0;  // the run's last step only
    c->model.dropout = c->model.dropout > 0 ? 0 : c->model.dropout;  // the ranks share one CPU generator
  }

  // `world` ranks train `c` to its end (one checkpoint folder, rank 0 writes), each with
  // `faults` (only rank `fault_rank` when >= 0); returns each rank's start record, and in
  // `steps` each rank's step records.
  using Records = std::vector<format::ProgressRecord>;
  static Records Train(TrainConfig c, int world, const std::string& sharding, const FaultPlan& faults = {},
                       std::vector<std::string>* warnings = nullptr, int fault_rank = -1,
                       std::vector<Records>* steps = nullptr) {
    c.data_parallel.world_size = world;
    c.data_parallel.timeout_seconds = 60;
    c.data_parallel.sharding = sharding;
    std::vector<MemoryProgressSink> progress(world);
    std::vector<int> exit_codes(world, -1);
    if (world == 1) {
      RankInfo rank;
      rank.faults = faults;
      exit_codes[0] = RunTraining(c, rank, progress[0]);
    } else {
      const int port = testing::FreePort();
      testing::RunRanks(world, [&](int r) {
        RankInfo rank = testing::LoopbackRank(r, world, port);
        if (fault_rank < 0 || r == fault_rank) rank.faults = faults;
        exit_codes[r] = RunTraining(c, rank, progress[r]);
      });
    }
    if (warnings != nullptr)
      for (const auto& record : progress[0].records)
        if (record.event == "warning") warnings->push_back(record.String("message"));
    std::vector<format::ProgressRecord> starts;
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(exit_codes[r], kExitOk) << "rank " << r << ": " << progress[r].records.back().String("message");
      if (progress[r].records.empty()) return {};
      starts.push_back(progress[r].records.front());
      if (steps == nullptr) continue;
      steps->emplace_back();
      for (const auto& record : progress[r].records)
        if (record.event == "step") steps->back().push_back(record);
    }
    return starts;
  }
  static std::vector<torch::Tensor> Final(const TrainConfig& c) {
    return testing::LatestCheckpointParameters(*hf::JobModel(c, /*load_weights=*/false), c.checkpoint_dir);
  }
  // Every tensor of `got` within `tolerance` (1e-5) of `want` relative to the tensor's largest value;
  // `loose` (names) within 1e-3: BERT's attention key biases, whose true gradient is zero
  // (a bias added to every key shifts a query's scores alike, which softmax ignores), so
  // theirs is rounding noise that Adam scales up to steps of the learning rate's size; a
  // different order of the same float32 sums (4 ranks' reduce-scatter against their
  // all-reduce) changes that noise, and the biases drift by about 1e-4 of their size.
  static void ExpectClose(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want,
                          const std::string& what, const std::vector<std::string>& names = {},
                          double tolerance = 1e-5) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < want.size(); ++i) {
      const bool loose = i < names.size() && names[i].find("attention.self.key.bias") != std::string::npos;
      EXPECT_LE((got[i] - want[i]).abs().max().item<double>(),
                (loose ? 1e-3 : tolerance) * std::max(want[i].abs().max().item<double>(), 1e-6))
          << what << ": parameter " << i << (i < names.size() ? " " + names[i] : "");
    }
  }

  static std::string* decoders_;
  static std::string* encoders_;
  static std::string* error_;
};
std::string* ShardedAdamWTest::decoders_ = nullptr;
std::string* ShardedAdamWTest::encoders_ = nullptr;
std::string* ShardedAdamWTest::error_ = nullptr;

// The coordinated out-of-memory split under sharding full (oom.h's lockstep): rank 1 runs
// out of memory halfway through a backward, inside the blocks' collectives, which rank 0
// goes on with; rank 1 catches up on stand-ins, both ranks split, and 20 steps end where
// data parallelism with the same fault ends (its split is compared with no split in
// ddp_test.cc and oom_test.cc). The Llama's packed batches of 32 tokens all split in two
// (above 16); the BERT's batches of 8 samples of 4 to 12 tokens split where they pass 40,
// then each rank cuts its later batches to the size that fitted it: into different counts
// on the two ranks at some steps, where the one with fewer runs stand-ins.
TEST_F(ShardedAdamWTest, AnOutOfMemoryErrorUnderFullSplitsInLockstepAndEqualsDataParallel) {
  for (const bool llama : {true, false}) {
    const std::string name = llama ? "full_oom_llama" : "full_oom_bert";
    SCOPED_TRACE(name);
    FaultPlan faults;
    faults.oom_above_tokens = llama ? kLmLen : 40;
    faults.oom_in_backward = true;
    const TrainConfig ddp = llama ? Llama(name + "_none") : Classifier(name + "_none", *encoders_ + "/bert");
    const TrainConfig full = llama ? Llama(name + "_full") : Classifier(name + "_full", *encoders_ + "/bert");
    std::vector<Records> ddp_steps, steps;
    ASSERT_EQ(Train(ddp, 2, "none", faults, nullptr, 1, &ddp_steps).size(), 2u);
    ASSERT_EQ(Train(full, 2, "full", faults, nullptr, 1, &steps).size(), 2u);
    for (const auto& s : {steps, ddp_steps}) ASSERT_EQ(s[0].back().Number("step"), 20);
    const double stand_ins = steps[0].back().Number("stand_ins") + steps[1].back().Number("stand_ins");
    const double recoveries = steps[1].back().Number("oom_recoveries");
    EXPECT_GE(recoveries, 1);
    EXPECT_EQ(steps[0].back().Number("oom_recoveries"), recoveries);
    EXPECT_EQ(ddp_steps[1].back().Number("oom_recoveries"), recoveries);
    if (llama) EXPECT_EQ(recoveries, 1) << "one split, kept for the later batches";
    if (llama) EXPECT_EQ(stand_ins, 0);
    else EXPECT_GT(stand_ins, 0);
    EXPECT_EQ(ddp_steps[0].back().Number("stand_ins") + ddp_steps[1].back().Number("stand_ins"), 0);
    std::vector<std::string> names;
    for (const auto& p : hf::JobModel(full, /*load_weights=*/false)->named_parameters()) names.push_back(p.key());
    ExpectClose(Final(full), Final(ddp), "full with an out-of-memory split", names);
  }
}

// 20 steps with sharding optimizer and full end where today's data parallelism ends, on 2
// and on 4 ranks, for a Llama (bf16 autocast, recomputation, accumulation with full's
// block gradients summed whole; with full on 4 ranks its blocks not recomputed) and a BERT
// (clipping; with full, its blocks not recomputed and reduce-scattered at each
// micro-batch); each rank keeps AdamW's moments for its shard only.
TEST_F(ShardedAdamWTest, TwentyStepsEqualDataParallelOnTwoAndFourRanks) {
  for (const bool llama : {true, false}) {
    for (const int world : {2, 4}) {
     for (const std::string sharding : {"optimizer", "full"}) {
      const std::string name = std::string(llama ? "zero_llama_" : "zero_bert_") + std::to_string(world);
      SCOPED_TRACE(name + " " + sharding);
      const TrainConfig ddp = llama ? Llama(name + "_none") : Classifier(name + "_none", *encoders_ + "/bert");
      TrainConfig sharded = llama ? Llama(name + "_" + sharding) : Classifier(name + "_" + sharding, *encoders_ + "/bert");
      // full's blocks without recomputation too: gathered again for backward by a hook (for
      // the Llama on 4 ranks, as bf16 compute copies that autograd saved in forward).
      if (sharding == "full" && (!llama || world == 4)) sharded.train.checkpoint_every_blocks = 0;
      // The Llama's blocks' gradients summed whole between micro-batches (auto, here
      // whole); the BERT's reduce-scattered at each one.
      if (!llama) sharded.data_parallel.accumulate_gradients = "sharded";
      const auto ddp_starts = Train(ddp, world, "none");
      const auto starts = Train(sharded, world, sharding);
      ASSERT_EQ(starts.size(), static_cast<size_t>(world));
      ASSERT_EQ(ddp_starts.size(), static_cast<size_t>(world));
      if (sharding == "full") {  // the choice, as the run's checkpoint keeps it
        RunPosition position;
        ASSERT_TRUE(CheckpointManager(CheckpointOptions{sharded.checkpoint_dir}).PeekLatest(&position));
        EXPECT_EQ(position.accumulate_gradients, llama ? "whole" : "");  // the BERT's: the spec's sharded
      }
      const std::vector<torch::Tensor> final_params = Final(sharded);
      std::vector<std::string> names;
      for (const auto& p : hf::JobModel(sharded, /*load_weights=*/false)->named_parameters()) names.push_back(p.key());
      ExpectClose(final_params, Final(ddp), name, names);
      // The export (rank 0's whole parameters, as unsharded) is the unsharded run's.
      hf::PretrainedOptions options;
      options.task = llama ? "causal_lm" : "classification";
      std::vector<torch::Tensor> exported, ddp_exported;
      for (const auto& p : hf::LoadPretrained(sharded.checkpoint_dir + "/model", options)->parameters())
        exported.push_back(p.detach().clone());
      for (const auto& p : hf::LoadPretrained(ddp.checkpoint_dir + "/model", options)->parameters())
        ddp_exported.push_back(p.detach().clone());
      ExpectClose(exported, ddp_exported, name + " export", names);
      const double whole = ddp_starts[0].Number("optimizer_state_bytes");
      // Unsharded, a rank holds each gradient twice (its own and its all-reduce bucket's
      // copy) and AdamW's two moments.
      EXPECT_EQ(whole, ddp_starts[0].Number("gradient_bytes"));
      // A shard holds its share, give or take the padding that aligns each tensor to 64
      // values (sharded_adamw.h): up to 63 values per tensor and 64 at the shard's end
      // (with full, at each unit's: at most one unit per tensor).
      const double units = sharding == "full" ? double(final_params.size()) : 1.0;
      const double padding = 8.0 * (63.0 * double(final_params.size()) / world + 64 * units);
      double sum = 0;
      for (const auto& s : starts) {
        EXPECT_LE(s.Number("optimizer_state_bytes"), whole / world + padding) << "rank " << s.Number("rank");
        sum += s.Number("optimizer_state_bytes");
      }
      if (sharding == "optimizer") EXPECT_EQ(sum, whole) << "the shards together are the whole state";
      else EXPECT_GE(sum, whole) << "the shards together hold the whole state";
     }
    }
  }
}

// One block under full, its gradients reduce-scattered at each micro-batch: the next unit
// to reduce is the same block, whose reduction of the earlier micro-batch must be finished
// before the next starts (it was dropped: the block stepped on half of DDP's gradient).
// 20 steps on 2 ranks end where DDP ends; the key third of the block's qkv bias within
// 1e-3 (its true gradient is zero: rounding noise that Adam scales up, summed here in
// another order, as ExpectClose says of BERT's key biases).
TEST_F(ShardedAdamWTest, OneBlockReducedAtEachMicroBatchEqualsDataParallel) {
  std::map<std::string, std::vector<torch::Tensor>> final_params;
  std::vector<std::string> names;
  for (const std::string sharding : {"none", "full"}) {
    TrainConfig c = testing::TinyConfig(testing::FreshDir("one_block_" + sharding), 64);
    c.model.layers = 1;
    c.train.accumulate_steps = 2;
    c.data_parallel.accumulate_gradients = "sharded";
    Until(&c, 20);
    ASSERT_EQ(Train(c, 2, sharding).size(), 2u) << sharding;
    const auto model = BuildSequenceModel(c.model, c.data.vocab_size, c.data.num_classes, c.data.pad_id);
    final_params[sharding] = testing::LatestCheckpointParameters(*model, c.checkpoint_dir);
    names.clear();
    for (const auto& p : model->named_parameters()) names.push_back(p.key());
  }
  const size_t qkv_bias = std::find(names.begin(), names.end(), "blocks.0.qkv.bias") - names.begin();
  ASSERT_LT(qkv_bias, names.size());
  std::vector<torch::Tensor> keys;
  for (const std::string sharding : {"full", "none"}) {
    torch::Tensor& bias = final_params[sharding][qkv_bias];
    const int64_t d = bias.numel() / 3;
    keys.push_back(bias.narrow(0, d, d).clone());
    bias.narrow(0, d, d).zero_();  // checked below
  }
  ExpectClose(final_params["full"], final_params["none"], "one block reduced at each micro-batch");
  ExpectClose({keys[0]}, {keys[1]}, "the key biases", {}, 1e-3);
}

// model.init_from under sharding full: the export's weights written into the shards a block
// at a time (FullyShardedAdamW::ReopenFor), and 20 steps on 2 ranks of the run started from
// them end where the same start under DDP ends; both differ from a start without it.
TEST_F(ShardedAdamWTest, AnInitFromExportLoadsIntoTheShardsAndEqualsDataParallel) {
  auto config = [](const std::string& name, int steps) {
    TrainConfig c = testing::TinyConfig(testing::FreshDir(name), 64);
    c.model.layers = 3;
    c.model.dropout = 0;
    Until(&c, steps);
    return c;
  };
  const TrainConfig source = config("init_from_source", 6);
  ASSERT_EQ(Train(source, 1, "none").size(), 1u);
  std::map<std::string, std::vector<torch::Tensor>> final_params;
  for (const std::string start : {"none", "full", "full without"}) {
    TrainConfig c = config("init_from_" + std::to_string(final_params.size()), 20);
    if (start != "full without") c.model.init_from = source.checkpoint_dir + "/model";
    c.train.seed = 11;  // another initialisation and data order than the source's
    ASSERT_EQ(Train(c, 2, start.substr(0, 4)).size(), 2u) << start;
    final_params[start] = testing::LatestCheckpointParameters(
        *BuildSequenceModel(c.model, c.data.vocab_size, c.data.num_classes, c.data.pad_id), c.checkpoint_dir);
  }
  ExpectClose(final_params["full"], final_params["none"], "init_from: full against none");
  EXPECT_FALSE(torch::allclose(final_params["full"][0], final_params["full without"][0])) << "the export was not used";
}

// resources.reduce_precision bf16: each rank's gradients rounded to bf16, summed and
// averaged in bf16, then float32 for the update. On 2 ranks that is one rounding whatever
// the collective (the sum of two bf16 values, then an exact halving), so none, optimizer
// and full take the same steps: after 20 steps of the Llama run (bf16 autocast,
// recomputation; no accumulation, which full reduces per micro-batch) their parameters
// agree within float32 rounding, and differ from the float32-reduced run's by more than
// that (the setting is used) and by less than 5% of each tensor's largest value (Adam's
// step is the learning rate's size whatever the gradient's, so where a gradient is near
// zero its rounding can turn a step around: 1.1% on the embeddings, measured).
TEST_F(ShardedAdamWTest, Bf16ReductionTakesTheSameStepsWithEverySharding) {
  auto config = [](const std::string& name, bool bf16) {
    TrainConfig c = Llama(name);
    c.train.accumulate_steps = 1;
    c.data_parallel.reduce_bf16 = bf16;
    return c;
  };
  const TrainConfig f32 = config("reduce_fp32", false);
  ASSERT_EQ(Train(f32, 2, "none").size(), 2u);
  const std::vector<torch::Tensor> exact = Final(f32);
  std::vector<torch::Tensor> none;
  for (const std::string sharding : {"none", "optimizer", "full"}) {
    SCOPED_TRACE(sharding);
    const TrainConfig c = config("reduce_bf16_" + sharding, true);
    ASSERT_EQ(Train(c, 2, sharding).size(), 2u);
    const std::vector<torch::Tensor> got = Final(c);
    if (none.empty()) {
      none = got;
      double most = 0;
      ASSERT_EQ(got.size(), exact.size());
      for (size_t i = 0; i < got.size(); ++i) {
        const double scale = std::max(exact[i].abs().max().item<double>(), 1e-6);
        const double off = (got[i] - exact[i]).abs().max().item<double>() / scale;
        EXPECT_LE(off, 5e-2) << "parameter " << i;
        most = std::max(most, off);
      }
      EXPECT_GT(most, 1e-5) << "bf16 reduction changed nothing";
    } else {
      ExpectClose(got, none, "bf16-reduced " + sharding + " against none");
    }
  }
}

// GPT-2's blocks (Conv1D projections: a float32 bias added to the product, whose sum a
// bf16 input's projection casts back to bf16) under bf16 autocast, not recomputed: with
// full's bf16 compute copies, 20 steps on 2 ranks end where DDP's end, with one batch a
// step and with two accumulated, the blocks' gradients summed whole between them
// (resources.accumulate_gradients auto, here whole) and reduce-scattered once, in DDP's
// order of sums. GPT-2 has directions whose gradient is rounding noise (below), which
// AdamW turns into whole steps: reduce-scattered at each micro-batch (sharded, another
// order of sums) they end farther than 1e-5 from DDP's, which the held sum's extra bytes
// avoid. Sharded is held to 1e-4 instead, c_attn to 5e-4 with the keys' columns of its
// weight left out too (a bias added to every position's input moves every key alike: the
// weight's gradient along the inputs' mean is noise as well): measured, 2.2e-5 at most but
// for the second block's c_attn (8.4e-5 and 3.7e-5), where the noise of the first has
// added up; a gradient summed wrong moves the parameters by a part in a hundred.
TEST_F(ShardedAdamWTest, AGpt2RunWithComputeCopiesEqualsDataParallel) {
  const auto expect_close = [](const TrainConfig& sharded, const TrainConfig& ddp, bool reordered) {
    std::vector<std::string> names;
    for (const auto& p : hf::JobModel(sharded, /*load_weights=*/false)->named_parameters()) names.push_back(p.key());
    std::vector<torch::Tensor> got = Final(sharded), want = Final(ddp);
    ASSERT_EQ(got.size(), names.size());
    // c_attn's bias is the queries', the keys' and the values' (d each). The keys' gets no
    // gradient in exact arithmetic (a query's scores all move by the same q.b: softmax does
    // not see it), only rounding noise, which AdamW turns into steps of about lr whatever its
    // size, differing with any order of sums: left out.
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i].find("attn.c_attn.bias") != std::string::npos) {
        const int64_t d = got[i].numel() / 3;
        for (auto* t : {&got[i], &want[i]}) *t = torch::cat({t->narrow(0, 0, d), t->narrow(0, 2 * d, d)});
      } else if (reordered && names[i].find("attn.c_attn.weight") != std::string::npos) {  // [in, 3d]
        const int64_t d = got[i].size(1) / 3;
        for (auto* t : {&got[i], &want[i]}) *t = torch::cat({t->narrow(1, 0, d), t->narrow(1, 2 * d, d)}, 1);
      }
    if (!reordered) return ExpectClose(got, want, "gpt2 full against none", names);
    std::vector<torch::Tensor> attn[2], rest[2];  // [0]: got, [1]: want
    for (size_t i = 0; i < names.size(); ++i)
      for (int k : {0, 1}) (names[i].find("attn.c_attn") != std::string::npos ? attn : rest)[k].push_back(k ? want[i] : got[i]);
    ExpectClose(rest[0], rest[1], "gpt2 full (sharded) against none", {}, 1e-4);
    ExpectClose(attn[0], attn[1], "gpt2 full (sharded) against none: c_attn", {}, 5e-4);
  };
  double held_gradient_bytes = 0;  // rank 0's gradient bytes with the sum held whole
  for (const int accumulate : {1, 2})
    for (const std::string mode : {"auto", "sharded"}) {
      if (accumulate == 1 && mode == "sharded") continue;  // the same run: nothing to hold
      SCOPED_TRACE(std::to_string(accumulate) + " " + mode);
      auto config = [&](const std::string& name) {
        TrainConfig c = Llama(name + "_" + std::to_string(accumulate) + "_" + mode, "gpt2_lm");
        c.train.checkpoint_every_blocks = 0;
        c.train.accumulate_steps = accumulate;
        c.data_parallel.accumulate_gradients = mode;
        return c;
      };
      const TrainConfig sharded = config("gpt2_full");
      const auto starts = Train(sharded, 2, "full");
      ASSERT_EQ(starts.size(), 2u);
      if (mode == "sharded")
        EXPECT_GT(held_gradient_bytes, starts[0].Number("gradient_bytes")) << "the held sum counted";
      else if (accumulate == 2)
        held_gradient_bytes = starts[0].Number("gradient_bytes");
      const TrainConfig ddp = config("gpt2_none");
      ASSERT_EQ(Train(ddp, 2, "none").size(), 2u);
      expect_close(sharded, ddp, /*reordered=*/mode == "sharded");
    }
}

// LoRA (model.adapter) on 2 ranks with sharding full: each block's unit is its A and B
// matrices, its frozen base cut beside them (AddFrozen), and 20 steps end where unsharded
// LoRA ends: BERT's classifier in float32, and the causal Llama on a bf16 base under bf16
// autocast with every block recomputed in backward (the frozen bf16 and float32 ranges
// gathered again for the recompute); and resumed under full from the unsharded run's
// checkpoint.
TEST_F(ShardedAdamWTest, ALoraRunShardsItsAdaptersAndEqualsDataParallel) {
 for (const bool llama : {false, true}) {
  SCOPED_TRACE(llama ? "llama on a bf16 base" : "bert");
  auto config = [&](const std::string& name) {
    TrainConfig c = llama ? Llama(name + "_llama") : Classifier(name, *encoders_ + "/bert");
    c.model.adapter.type = "lora";
    c.model.adapter.r = 4;
    c.model.adapter.alpha = 8;
    if (llama) c.model.base_precision = "bf16";
    else c.train.checkpoint_every_blocks = 0;
    return c;
  };
  // The adapter starts from a folder, not from random draws: the rank threads share one
  // CPU generator, so each run's A matrices would depend on how the threads interleave.
  TrainConfig start = config("zero_lora_start");
  Until(&start, 1);
  ASSERT_EQ(Train(start, 1, "none").size(), 1u);
  TrainConfig ddp = config("zero_lora_none"), sharded = config("zero_lora_full"), resumed = config("zero_lora_resumed");
  ddp.model.adapter.init_from = sharded.model.adapter.init_from = resumed.model.adapter.init_from =
      start.checkpoint_dir + "/model";
  ddp.checkpoint.every_steps = 10;
  const auto ddp_starts = Train(ddp, 2, "none");
  ASSERT_EQ(ddp_starts.size(), 2u);
  const auto starts = Train(sharded, 2, "full");
  ASSERT_EQ(starts.size(), 2u);
  const auto final_params = [](const TrainConfig& c) {
    return testing::LatestCheckpointParameters(*hf::JobModel(c, /*load_weights=*/true), c.checkpoint_dir);
  };
  ExpectClose(final_params(sharded), final_params(ddp), "lora");
  // Resumed under full from the unsharded run's step 10 (loaded whole, then cut; the
  // frozen base, which no checkpoint holds, stays as the load cut it): where that run ends.
  fs::create_directories(resumed.checkpoint_dir);
  fs::copy(ddp.checkpoint_dir + "/step-00000010", resumed.checkpoint_dir + "/step-00000010");
  const auto resumed_starts = Train(resumed, 2, "full");
  ASSERT_EQ(resumed_starts.size(), 2u);
  EXPECT_EQ(resumed_starts[0].Number("resumed_step"), 10);
  ExpectClose(final_params(resumed), final_params(ddp), "lora resumed under full from an unsharded checkpoint");
  for (const auto& st : starts)  // the adapter's and the head's moments cut in two, give or take padding
    EXPECT_LT(st.Number("optimizer_state_bytes"), 0.75 * ddp_starts[0].Number("optimizer_state_bytes"));
 }
}

// A sharded run's checkpoint written by 4 ranks, resumed at its step 6 on 2 ranks (two
// batches accumulated: the same global batch) sharded either way, on 2 ranks unsharded
// and on 1 rank (four accumulated): each ends at step 12 where the uninterrupted 4-rank
// run ends; for checkpoints of sharding optimizer and of full (whose blocks' values are in
// the shard files, not in model.pt).
TEST_F(ShardedAdamWTest, ACheckpointOfFourRanksResumesOnTwoAndOnOne) {
 uintmax_t whole_model_pt = 0;
 for (const std::string written : {"optimizer", "full"}) {
  SCOPED_TRACE("written with " + written);
  auto config = [&](const std::string& name, int accumulate) {
    TrainConfig c = Classifier(name, *decoders_ + "/llama_cls", /*n_train=*/256);  // 32 batches an epoch
    c.train.checkpoint_every_blocks = 0;
    c.train.grad_clip = 1.0;
    c.train.accumulate_steps = accumulate;
    Until(&c, 12);
    c.checkpoint.every_steps = 6;
    return c;
  };
  const TrainConfig whole = config("zero_resume_whole_" + written, 1);
  ASSERT_EQ(Train(whole, 4, written).size(), 4u);
  const std::string step6 = whole.checkpoint_dir + "/step-00000006";
  ASSERT_TRUE(fs::exists(step6 + "/COMPLETE"));
  int shard_files = 0;
  for (const auto& e : fs::directory_iterator(step6)) shard_files += IsOptimizerShardFile(e.path().filename().string());
  if (written == "optimizer") {
    for (int r = 0; r < 4; ++r) EXPECT_TRUE(fs::exists(step6 + "/" + OptimizerShardFileName(r, 4))) << r;
  } else {  // one per unit and rank: the embeddings, each block, the final norm and head
    EXPECT_EQ(shard_files % 4, 0);
    EXPECT_GE(shard_files, 4 * 3);
  }
  EXPECT_FALSE(fs::exists(step6 + "/optimizer.pt"));
  // full's blocks are written by their ranks into their shard files, not gathered into
  // model.pt, which holds the rest (the embeddings, the final norm and head).
  if (written == "optimizer") {
    whole_model_pt = fs::file_size(step6 + "/model.pt");
  } else {
    uintmax_t block_bytes = 0;
    for (const auto& p : hf::JobModel(whole, /*load_weights=*/false)->named_parameters())
      if (p.key().find(".layers.") != std::string::npos) block_bytes += 4 * p.value().numel();
    EXPECT_GT(block_bytes, 0u);
    EXPECT_LE(fs::file_size(step6 + "/model.pt") + block_bytes, whole_model_pt);
  }
  const std::vector<torch::Tensor> want = Final(whole);

  for (const auto& [world, sharding] : {std::pair{2, "optimizer"}, std::pair{2, "full"}, std::pair{2, "none"}, std::pair{1, "none"}}) {
    const std::string name = "zero_resume_" + written + "_" + std::to_string(world) + "_" + sharding;
    SCOPED_TRACE(name);
    const TrainConfig c = config(name, 4 / world);
    fs::create_directories(c.checkpoint_dir);
    fs::copy(step6, c.checkpoint_dir + "/step-00000006");
    const auto starts = Train(c, world, sharding);
    ASSERT_EQ(starts.size(), static_cast<size_t>(world));
    EXPECT_EQ(starts[0].Number("resumed_step"), 6);
    ExpectClose(Final(c), want, name);
  }
 }
}

// A roll-back under sharding full (five losses in a row not finite) to a checkpoint the run
// wrote itself reads each rank's shards and gathers no block; to one written without
// sharding full (resumed from, nothing saved since) it gathers the blocks to load it. Either
// way the run goes on as today's data parallelism does from the same checkpoint. So does a
// run with one step skipped.
TEST_F(ShardedAdamWTest, ARollBackLoadsTheShardsAndEqualsDataParallel) {
  FaultPlan faults;
  faults.nan_losses = 5;
  auto config = [&](const std::string& name) {
    TrainConfig c = Classifier(name, *decoders_ + "/llama_cls", /*n_train=*/256);  // 32 batches an epoch
    c.train.checkpoint_every_blocks = 0;
    c.train.grad_clip = 1.0;
    return c;
  };
  const auto rolled_back = [](const std::vector<std::string>& warnings) {
    for (const std::string& w : warnings)
      if (w.find("rolled back to") != std::string::npos) return w;
    return std::string();
  };
  // Skipped steps change nothing, so a checkpoint written among them holds the state the
  // roll-back starts from: here the last one (step 6) comes before a clean step (7). Steps
  // 8-12 poisoned, and step 12 rolls back to step 6; steps 7-14 run at half the rate.
  faults.nan_loss_from_step = 8;
  std::vector<torch::Tensor> want;
  for (const std::string sharding : {"none", "full"}) {
    TrainConfig c = config("rollback_own_" + sharding);
    Until(&c, 14);
    c.checkpoint.every_steps = 6;
    std::vector<std::string> warnings;
    ASSERT_EQ(Train(c, 2, sharding, faults, &warnings).size(), 2u) << sharding;
    const std::string w = rolled_back(warnings);
    EXPECT_NE(w.find("step-00000006"), std::string::npos) << sharding << ": " << w;
    EXPECT_EQ(w.find("gathered"), std::string::npos) << sharding << ": " << w;
    if (sharding == "none") want = Final(c);
    else ExpectClose(Final(c), want, "rolled back under full to its own checkpoint");
  }
  // One step skipped (its loss not finite), then clean ones: nothing of the skipped step's
  // gradients may reach the next (full's last block reduction of it was still under way).
  FaultPlan once;
  once.nan_loss_from_step = 5;
  once.nan_losses = 1;
  for (const std::string sharding : {"none", "full"}) {
    TrainConfig c = config("skipped_once_" + sharding);
    Until(&c, 10);
    ASSERT_EQ(Train(c, 2, sharding, once).size(), 2u) << sharding;
    if (sharding == "none") want = Final(c);
    else ExpectClose(Final(c), want, "a step skipped under full");
  }
  // A checkpoint of step 6 written without sharding (by DDP), resumed; nothing saved until
  // the last step; the same steps poisoned.
  TrainConfig first = config("rollback_unsharded_first");
  Until(&first, 6);
  ASSERT_EQ(Train(first, 2, "none").size(), 2u);
  for (const std::string sharding : {"none", "full"}) {
    TrainConfig c = config("rollback_unsharded_" + sharding);
    Until(&c, 14);
    fs::create_directories(c.checkpoint_dir);
    fs::copy(first.checkpoint_dir + "/step-00000006", c.checkpoint_dir + "/step-00000006");
    std::vector<std::string> warnings;
    ASSERT_EQ(Train(c, 2, sharding, faults, &warnings).size(), 2u) << sharding;
    const std::string w = rolled_back(warnings);
    EXPECT_NE(w.find("step-00000006"), std::string::npos) << sharding << ": " << w;
    EXPECT_EQ(w.find("loaded whole on each rank") != std::string::npos, sharding == "full") << w;
    if (sharding == "none") want = Final(c);
    else ExpectClose(Final(c), want, "rolled back under full to an unsharded checkpoint");
  }
}

// train.batching.max_tokens auto under sharding full: the two ranks probe in lockstep
// (each probe gathers and reduce-scatters the blocks, so ranks probing different sizes
// would meet in different collectives). Rank 1's probes run out of memory above 5 rows
// (fault injection, as their backward ends or halfway through it): both ranks make the same probes (without the
// agreement rank 0 would go on doubling into collectives rank 1 never enters), agree on
// the budget of 5 rows (0.9 x 5 x 16 tokens) where rank 0 alone would take the epoch's
// cap, and train as DDP does with that budget set.
TEST_F(ShardedAdamWTest, ATokenBudgetProbedInLockstepTrainsAsDataParallelWithIt) {
  TrainConfig ddp = Llama("auto_budget_none");
  ddp.train.max_tokens = 72;
  Until(&ddp, 6);
  ASSERT_EQ(Train(ddp, 2, "none").size(), 2u);
  // Halfway through the backward, rank 1 is inside the blocks' collectives: it catches up
  // on one row before the ranks agree (oom.h).
  for (const bool in_backward : {false, true}) {
    SCOPED_TRACE(in_backward ? "in backward" : "after backward");
    TrainConfig full = Llama(in_backward ? "auto_budget_full_in_backward" : "auto_budget_full");
    full.train.max_tokens_auto = true;
    Until(&full, 6);
    full.data_parallel.world_size = 2;
    full.data_parallel.timeout_seconds = 60;
    full.data_parallel.sharding = "full";
    std::vector<MemoryProgressSink> progress(2);
    const std::vector<int> exit_codes = testing::TrainRanks(full, &progress, [in_backward](int r, RankInfo& rank) {
      if (r != 1) return;
      rank.faults.probe_oom_above_tokens = 5 * kLmLen;
      rank.faults.oom_in_backward = in_backward;
    });
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(exit_codes[r], kExitOk) << "rank " << r << ": " << progress[r].records.back().String("message");
      EXPECT_EQ(progress[r].records.front().Number("max_tokens"), 72) << "rank " << r;
    }
    ExpectClose(Final(full), Final(ddp), "full with the probed budget against DDP with it set");
  }
}

// A limit between what a rank's parameters, gradients and AdamW state need unsharded and
// sharded over 4 ranks: unsharded, every rank fails before its first step (permanent, the
// message naming resources.memory_gb and what sharding would keep); sharded, the run ends.
// The same between sharding optimizer and full; and under full with two micro-batches a
// step, between the blocks' gradients reduce-scattered at each (sharded) and held whole
// (forced: the message names resources.accumulate_gradients).
TEST(ShardedAdamWUnitTest, AStateOverTheMemoryLimitFailsBeforeTheFirstStepAndFitsSharded) {
  auto run = [](const std::string& sharding, int64_t limit, std::vector<MemoryProgressSink>* progress,
                const std::string& accumulate = "") {
    TrainConfig c = testing::TinyConfig(testing::FreshDir("zero_limit_" + sharding + accumulate), /*n_train=*/64);
    if (!accumulate.empty()) {
      c.train.accumulate_steps = 2;
      c.data_parallel.accumulate_gradients = accumulate;
    }
    c.model.dropout = 0;
    c.model.layers = 4;  // most of the model in blocks, as in any real one
    c.model.d_model = 32;
    c.model.ffn = 128;
    c.train.max_steps = 2;
    c.data_parallel.world_size = 4;
    c.data_parallel.timeout_seconds = 60;
    c.data_parallel.sharding = sharding;
    std::vector<int> codes(4, -1);
    progress->assign(4, MemoryProgressSink());
    const int port = testing::FreePort();
    testing::RunRanks(4, [&](int r) {
      RankInfo rank = testing::LoopbackRank(r, 4, port);
      rank.memory_limit_bytes = limit;
      codes[r] = RunTraining(c, rank, (*progress)[r]);
    });
    return codes;
  };
  std::vector<MemoryProgressSink> progress;
  auto need = [&](int r) {
    const auto& s = progress[r].records.front();
    return s.Number("parameter_bytes") + s.Number("gradient_bytes") + s.Number("optimizer_state_bytes");
  };
  ASSERT_EQ(run("none", 0, &progress), std::vector<int>(4, kExitOk));
  const double unsharded = need(0);
  ASSERT_EQ(run("optimizer", 0, &progress), std::vector<int>(4, kExitOk));
  double sharded = 0;
  for (int r = 0; r < 4; ++r) sharded = std::max(sharded, need(r));
  ASSERT_LT(sharded, unsharded);
  const int64_t limit = static_cast<int64_t>((sharded + unsharded) / 2);
  EXPECT_EQ(run("none", limit, &progress), std::vector<int>(4, kExitPermanent));
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(progress[r].records.back().event, "error");
    const std::string message = progress[r].records.back().String("message");
    EXPECT_NE(message.find("resources.memory_gb: rank " + std::to_string(r) + " needs"), std::string::npos) << message;
    EXPECT_NE(message.find("with resources.sharding: optimizer each of the 4 ranks"), std::string::npos) << message;
  }
  EXPECT_EQ(run("optimizer", limit, &progress), std::vector<int>(4, kExitOk));
  // Below what optimizer sharding needs, sharding full still fits: the blocks' parameters
  // and gradients are held two blocks at a time (one computing, the next being gathered).
  ASSERT_EQ(run("full", 0, &progress), std::vector<int>(4, kExitOk));
  double full = 0;
  for (int r = 0; r < 4; ++r) full = std::max(full, need(r));
  ASSERT_LT(full, sharded);
  const int64_t tight = static_cast<int64_t>((full + sharded) / 2);
  EXPECT_EQ(run("optimizer", tight, &progress), std::vector<int>(4, kExitPermanent));
  EXPECT_EQ(run("full", tight, &progress), std::vector<int>(4, kExitOk));
  ASSERT_EQ(run("full", 0, &progress, "sharded"), std::vector<int>(4, kExitOk));
  double reduced = 0;
  for (int r = 0; r < 4; ++r) reduced = std::max(reduced, need(r));
  ASSERT_EQ(run("full", 0, &progress, "whole"), std::vector<int>(4, kExitOk));
  double held = 0;
  for (int r = 0; r < 4; ++r) held = std::max(held, need(r));
  ASSERT_LT(reduced, held);
  const int64_t between = static_cast<int64_t>((reduced + held) / 2);
  EXPECT_EQ(run("full", between, &progress, "whole"), std::vector<int>(4, kExitPermanent));
  const std::string message = progress[0].records.back().String("message");
  EXPECT_NE(message.find("with resources.accumulate_gradients: sharded it would not hold"), std::string::npos)
      << message;
  EXPECT_EQ(run("full", between, &progress, "sharded"), std::vector<int>(4, kExitOk));
}

// The pieces of the layout, reduce-scatter and clipping against the whole computation: on
// 3 ranks, parameters of 5 + 7 + 4 values with each rank's own gradients, unaligned (16
// values: shards of 6, 6 and 4) and aligned at 4 (5 + 3 padding + 7 + 1 + 4 = 20, shards
// of 8: ranks own values [0, 5), [5, 12), [12, 16)); after ReduceGradients and clipping
// every rank holds exactly its slice of the averaged, clipped whole gradient, and the
// norm is clip_grad_norm_'s.
TEST(ShardedAdamWUnitTest, EachRankHoldsItsSliceOfTheAveragedClippedGradient) {
  const int world = 3;
  const std::vector<int64_t> sizes = {5, 7, 4};
  auto grads_of = [&](int rank) {
    std::vector<torch::Tensor> g;
    for (size_t i = 0; i < sizes.size(); ++i)
      g.push_back(torch::arange(sizes[i], torch::kFloat32).mul(0.1 * (rank + 1)).add(double(i) - rank));
    return g;
  };
  std::vector<torch::Tensor> whole;
  for (int r = 0; r < world; ++r) {
    const auto g = grads_of(r);
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (r == 0) whole.push_back(torch::zeros({sizes[i]}, torch::requires_grad()));
      whole[i].mutable_grad() = r == 0 ? g[i].clone() / world : whole[i].grad() + g[i] / world;
    }
  }
  const double want_norm = torch::nn::utils::clip_grad_norm_(whole, 0.5);
  torch::Tensor want = torch::cat({whole[0].grad(), whole[1].grad(), whole[2].grad()});
  for (const int64_t align : {1, 4}) {
  SCOPED_TRACE("align " + std::to_string(align));
  const std::vector<int64_t> begins = align == 1 ? std::vector<int64_t>{0, 6, 12, 16} : std::vector<int64_t>{0, 5, 12, 16};
  const int port = testing::FreePort();
  std::vector<torch::Tensor> got(world);
  std::vector<double> norms(world);
  testing::RunRanks(world, [&](int r) {
    auto group = ProcessGroup::Create(testing::Options(r, world, port));
    std::vector<torch::Tensor> params;
    for (int64_t n : sizes) params.push_back(torch::zeros({n}, torch::requires_grad()));
    const auto g = grads_of(r);
    for (size_t i = 0; i < sizes.size(); ++i) params[i].mutable_grad() = g[i].clone();
    auto opt = ShardedAdamW::Create(params, torch::optim::AdamWOptions(1e-3), r, world, /*chunk_bytes=*/8, align);
    opt->set_group(group.get());
    EXPECT_EQ(opt->begin(), begins[r]);
    EXPECT_EQ(opt->end(), begins[r + 1]);
    opt->ReduceGradients();
    for (const auto& p : params) EXPECT_FALSE(p.grad().defined()) << "the whole gradient is freed";
    norms[r] = ClipGradNorm(opt->pieces(), 0.5, [&](double local) { return group->SumOverRanks(local); });
    std::vector<torch::Tensor> mine;
    for (const auto& piece : opt->pieces()) mine.push_back(piece.grad());
    got[r] = torch::cat(mine);
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_NEAR(norms[r], want_norm, 1e-6 * want_norm) << "rank " << r;
    torch::Tensor slice = want.narrow(0, begins[r], begins[r + 1] - begins[r]);
    ASSERT_EQ(got[r].numel(), slice.numel()) << "rank " << r;
    EXPECT_LE((got[r] - slice).abs().max().item<double>(), 1e-7) << "rank " << r;
  }
  }
}

// sharding full's units (fully_sharded.h) by hand: two "blocks" and a resident tensor on
// 3 ranks, each rank with its own gradients. Sharded, a block's parameters hold no memory
// (their shapes stay); acquired, they are whole; once backward has accumulated the
// gradient of the block's last parameter, its gradients and parameters are freed and the
// shards hold the average; one step later every rank's
// parameters (the blocks gathered again) equal a whole AdamW's step on the averaged
// gradients.
TEST(ShardedAdamWUnitTest, AFullyShardedBlockIsFreedGatheredAndStepsAsAWholeAdamW) {
  const int world = 3;
  const std::vector<std::vector<int64_t>> shapes = {{6}, {5, 3}, {7}, {4, 2}, {3}};
  const std::vector<int64_t> block_of = {-1, 0, 0, 1, -1};
  auto initial = [&](size_t i) { return torch::linspace(-1, 1, c10::multiply_integers(shapes[i])).view(shapes[i]); };
  auto grad_of = [&](size_t i, int rank) { return initial(i).mul(0.3 * (rank + 1)).add(0.1 * double(i) - 0.05 * rank); };
  const auto options = torch::optim::AdamWOptions(1e-2).weight_decay(0.1);
  std::vector<torch::Tensor> want;
  for (size_t i = 0; i < shapes.size(); ++i) {
    want.push_back(initial(i).requires_grad_(true));
    torch::Tensor sum = torch::zeros(shapes[i]);
    for (int r = 0; r < world; ++r) sum += grad_of(i, r);
    want[i].mutable_grad() = sum / world;
  }
  FusedAdamW whole(want, options);
  whole.step();
  const int port = testing::FreePort();
  std::vector<std::vector<torch::Tensor>> got(world);
  testing::RunRanks(world, [&](int r) {
    auto group = ProcessGroup::Create(testing::Options(r, world, port));
    std::vector<torch::Tensor> params;
    for (size_t i = 0; i < shapes.size(); ++i) params.push_back(initial(i).requires_grad_(true));
    auto opt = FullyShardedAdamW::Create(params, block_of, options, r, world);
    opt->set_group(group.get());
    opt->Shard();
    const std::vector<BlockParams*> blocks = opt->block_params(2);
    ASSERT_EQ(blocks.size(), 2u);
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(params[i].sizes(), c10::IntArrayRef(shapes[i])) << i;
      EXPECT_EQ(params[i].storage().nbytes() == 0, block_of[i] >= 0) << i << ": blocks freed, the rest whole";
    }
    for (int b : {1, 0}) {  // backward order
      blocks[b]->Acquire();
      for (size_t i = 0; i < params.size(); ++i) {
        if (block_of[i] != b) continue;
        EXPECT_TRUE(torch::equal(params[i].detach(), initial(i))) << i << " gathered";
        EXPECT_EQ(params[i].storage().nbytes() == 0, false) << i;
        (params[i] * grad_of(i, r)).sum().backward();  // accumulates grad_of(i, r)
      }
      for (size_t i = 0; i < params.size(); ++i) {
        if (block_of[i] != b) continue;
        EXPECT_FALSE(params[i].grad().defined()) << i << ": reduced and freed";
        EXPECT_EQ(params[i].storage().nbytes(), 0u) << i << ": freed after the block's last gradient";
      }
    }
    for (size_t i = 0; i < params.size(); ++i)
      if (block_of[i] < 0) params[i].mutable_grad() = grad_of(i, r);
    opt->ReduceGradients();
    opt->step();
    opt->Unshard();
    for (const auto& p : params) got[r].push_back(p.detach().clone());
    opt.reset();  // the parameters outlive the optimizer; its gradient hooks go with it
    (params[1] * 2.0).sum().backward();
    EXPECT_TRUE(params[1].grad().defined());
  });
  for (int r = 0; r < world; ++r)
    for (size_t i = 0; i < shapes.size(); ++i)
      EXPECT_LE((got[r][i] - want[i].detach()).abs().max().item<double>(), 1e-6) << "rank " << r << " tensor " << i;
}

// An adapter's frozen base under sharding full (AddFrozen), on 2 ranks through BlockPlan:
// two blocks, each a frozen bf16 weight and a frozen float32 norm around a trainable LoRA
// pair (out = x + y W^T + y A^T B^T, y = x * norm). Sharded, the frozen tensors hold no
// memory. In backward the norm of block 1 computes its input's gradient after the block's
// last trainable gradient was accumulated (A and B already reduced and freed): its weight
// and W must still be whole then. Every frozen tensor is freed when backward ends; one
// step equals a whole AdamW's on the averaged gradients, and the frozen values are kept.
TEST(ShardedAdamWUnitTest, AnAdaptersFrozenBaseIsCutWithItsBlockAndWholeUntilTheBlocksInputGradient) {
  const int world = 2;
  const int64_t d = 8, rank_r = 2;
  torch::manual_seed(3);
  std::vector<torch::Tensor> init;  // per block: W, norm, A, B
  for (int b = 0; b < 2; ++b) {
    init.push_back(torch::randn({d, d}).to(torch::kBFloat16));
    init.push_back(1 + 0.1 * torch::randn({d}));
    init.push_back(0.1 * torch::randn({rank_r, d}));
    init.push_back(0.1 * torch::randn({d, rank_r}));
  }
  std::vector<torch::Tensor> inputs;
  for (int r = 0; r < world; ++r) inputs.push_back(torch::randn({3, d}));
  // The loss of `x` through the blocks (params as init's layout), each run by `plan` when given.
  using Hook = std::function<void(size_t block)>;
  auto loss_of = [](const std::vector<torch::Tensor>& p, const torch::Tensor& x, BlockPlan* plan, Hook at_norm) {
    torch::Tensor h = x;
    for (size_t b = 0; b < 2; ++b) {
      BlockForward block = [&p, b, at_norm](const torch::Tensor& in, const torch::Tensor&) {
        torch::Tensor y = in * p[4 * b + 1];
        if (y.requires_grad() && at_norm) y.register_hook([at_norm, b](const torch::Tensor&) { at_norm(b); });
        return in + torch::matmul(y, p[4 * b].to(torch::kFloat).t()) +
               torch::matmul(torch::matmul(y, p[4 * b + 2].t()), p[4 * b + 3].t());
      };
      h = plan != nullptr ? plan->Run(b, block, h, torch::Tensor()) : block(h, torch::Tensor());
    }
    return h.pow(2).mean();
  };
  const std::vector<size_t> trainable_at = {2, 3, 6, 7}, frozen_at = {0, 1, 4, 5};
  const auto options = torch::optim::AdamWOptions(1e-2).weight_decay(0.1);
  std::vector<torch::Tensor> want;
  for (size_t i : trainable_at) want.push_back(init[i].clone().requires_grad_(true));
  for (int r = 0; r < world; ++r) {
    std::vector<torch::Tensor> p = init;
    for (size_t k = 0; k < trainable_at.size(); ++k) p[trainable_at[k]] = want[k];
    (loss_of(p, inputs[r], nullptr, nullptr) / world).backward();  // the average over ranks
  }
  FusedAdamW whole(want, options);
  whole.step();

  const int port = testing::FreePort();
  testing::RunRanks(world, [&](int r) {
    auto group = ProcessGroup::Create(testing::Options(r, world, port));
    std::vector<torch::Tensor> p;
    for (size_t i = 0; i < init.size(); ++i) p.push_back(init[i].clone());
    std::vector<torch::Tensor> trainable, frozen;
    for (size_t i : trainable_at) trainable.push_back(p[i].requires_grad_(true));
    for (size_t i : frozen_at) frozen.push_back(p[i]);
    auto opt = FullyShardedAdamW::Create(trainable, {0, 0, 1, 1}, options, r, world);
    EXPECT_EQ(opt->AddFrozen(frozen, {0, 0, 1, 1}), 2 * (d * d + d));
    opt->set_group(group.get());
    opt->Shard();
    const auto freed = [&](size_t i) { return p[i].storage().nbytes() == 0; };
    for (size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(freed(i)) << i << ": every block's tensor cut";
    const FullyShardedAdamW::FrozenBytes bytes = opt->frozen_bytes();
    EXPECT_EQ(bytes.whole, 2 * (d * d * 2 + d * 4));
    // Each dtype's range is padded to shards of a multiple of 64 values: 64 a rank here.
    EXPECT_EQ(bytes.largest_block, 128 * 2 + 128 * 4);
    EXPECT_EQ(bytes.shards, 2 * (64 * 2 + 64 * 4));
    EXPECT_EQ(bytes.held, bytes.shards + 2 * bytes.largest_block);  // two blocks: both whole at most
    BlockPlan plan;
    plan.sharded = opt->block_params(2);
    int norms_seen = 0;
    const Hook at_norm = [&](size_t b) {  // the norm's backward is next
      ++norms_seen;
      EXPECT_TRUE(freed(4 * b + 2) && freed(4 * b + 3)) << "block " << b << "'s A and B reduced before its norm's backward";
      EXPECT_FALSE(freed(4 * b) || freed(4 * b + 1)) << "block " << b << "'s W and norm freed before its norm's backward";
    };
    loss_of(p, inputs[r], &plan, at_norm).backward();
    EXPECT_EQ(norms_seen, 1);  // block 1's (block 0's input needs no gradient)
    opt->ReduceGradients();
    for (size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(freed(i)) << i << ": freed when backward ended";
    opt->step();
    opt->Unshard();
    for (size_t k = 0; k < trainable_at.size(); ++k)
      EXPECT_LE((p[trainable_at[k]].detach() - want[k].detach()).abs().max().item<double>(), 1e-6)
          << "rank " << r << " tensor " << trainable_at[k];
    for (size_t i : frozen_at) EXPECT_TRUE(torch::equal(p[i], init[i])) << "rank " << r << " frozen " << i;
  });
}

// Compute copies (GatherInDtype) on 4 ranks through BlockPlan under bf16 autocast: two
// blocks, each out = in + linear(in * n1, W, b) * n2. In a training step W and b are
// gathered as bf16 (the values autocast would cast them to), n1 and n2 as float32 in the
// side gather (n1's values split over ranks 2 and 3: unpadded ranges); the step equals a
// whole AdamW's on the float32 parameters under the same autocast. Outside a step the
// blocks are gathered in float32 again.
TEST(ShardedAdamWUnitTest, ATrainingStepGathersTheProjectionsAsBf16CopiesAndStepsAsFloat32Parameters) {
  const int world = 4;
  const int64_t d = 8;
  torch::manual_seed(5);
  std::vector<torch::Tensor> init;  // per block: W, n1, b, n2
  for (int blk = 0; blk < 2; ++blk)
    for (torch::Tensor t : {torch::randn({d, d}) / 3, 1 + 0.1 * torch::randn({d}), 0.1 * torch::randn({d}),
                            1 + 0.1 * torch::randn({d})})
      init.push_back(t);
  std::vector<torch::Tensor> inputs;
  for (int r = 0; r < world; ++r) inputs.push_back(torch::randn({3, d}));
  using Check = std::function<void(const std::vector<torch::Tensor>&, size_t block)>;
  auto loss_of = [](const std::vector<torch::Tensor>& p, const torch::Tensor& x, BlockPlan* plan, Check check) {
    AutocastRegion autocast("bf16", torch::kCPU);
    torch::Tensor h = x;
    for (size_t blk = 0; blk < 2; ++blk) {
      BlockForward block = [&p, blk, check](const torch::Tensor& in, const torch::Tensor&) {
        if (check) check(p, blk);
        const torch::Tensor* q = &p[4 * blk];
        return in + torch::nn::functional::linear(in * q[1], q[0], q[2]) * q[3];
      };
      h = plan != nullptr ? plan->Run(blk, block, h, torch::Tensor()) : block(h, torch::Tensor());
    }
    return h.pow(2).mean();
  };
  const auto options = torch::optim::AdamWOptions(1e-2).weight_decay(0.1);
  std::vector<torch::Tensor> want;
  for (const torch::Tensor& t : init) want.push_back(t.clone().requires_grad_(true));
  for (int r = 0; r < world; ++r) (loss_of(want, inputs[r], nullptr, nullptr) / world).backward();
  FusedAdamW whole(want, options);
  whole.step();

  const int port = testing::FreePort();
  testing::RunRanks(world, [&](int r) {
    auto group = ProcessGroup::Create(testing::Options(r, world, port));
    std::vector<torch::Tensor> p;
    for (const torch::Tensor& t : init) p.push_back(t.clone().requires_grad_(true));
    auto opt = FullyShardedAdamW::Create(p, {0, 0, 0, 0, 1, 1, 1, 1}, options, r, world, /*align=*/1);
    opt->GatherInDtype(torch::kBFloat16, {true, false, true, false, true, false, true, false});
    opt->set_group(group.get());
    opt->Shard();
    EXPECT_EQ(opt->largest_block_bytes(), 4 * 88);
    // The range as bf16, n1 and n2 as float32; while gathering, this rank's 22 values as
    // bf16 and the side gather's buffers (rank 3 holds 14 of n1 and n2: 14 a rank, 4 ranks)
    EXPECT_EQ(opt->largest_gathered_bytes(), 2 * 88 + 4 * 16 + 2 * 22 + 4 * (14 + 14 * 4));
    BlockPlan plan;
    plan.sharded = opt->block_params(2);
    plan.sharded[0]->Acquire();  // an evaluation before the step: float32, then bf16 in the step
    EXPECT_TRUE(torch::equal(p[0].detach(), init[0]));
    plan.sharded[0]->Release();
    int checked = 0;
    const Check in_step = [&](const std::vector<torch::Tensor>& q, size_t blk) {
      ++checked;
      for (size_t k : {0, 2}) {
        EXPECT_EQ(q[4 * blk + k].scalar_type(), torch::kBFloat16) << blk << "/" << k;
        EXPECT_TRUE(torch::equal(q[4 * blk + k].detach(), init[4 * blk + k].to(torch::kBFloat16))) << blk << "/" << k;
      }
      for (size_t k : {1, 3}) EXPECT_TRUE(torch::equal(q[4 * blk + k].detach(), init[4 * blk + k])) << blk << "/" << k;
    };
    {
      ComputeGathers step(opt.get());
      loss_of(p, inputs[r], &plan, in_step).backward();
      opt->ReduceGradients();
    }
    EXPECT_EQ(checked, 2);
    for (const torch::Tensor& t : p) EXPECT_EQ(t.storage().nbytes(), 0u) << "freed after backward";
    opt->step();
    plan.sharded[1]->Acquire();  // an evaluation's gather: float32
    for (size_t i = 4; i < 8; ++i) {
      EXPECT_EQ(p[i].scalar_type(), torch::kFloat32) << i;
      EXPECT_LE((p[i].detach() - want[i].detach()).abs().max().item<double>(), 1e-6) << "rank " << r << " tensor " << i;
    }
    plan.sharded[1]->Release();
    opt->Unshard();
    for (size_t i = 0; i < p.size(); ++i)
      EXPECT_LE((p[i].detach() - want[i].detach()).abs().max().item<double>(), 1e-6) << "rank " << r << " tensor " << i;
  });
}

// A model from scratch under sharding full (run.cc's BuildModel): built under DeferInit,
// then drawn by InitAsBuilt, cutting each block as the draws pass it (ShardBefore). Every
// block before the one being drawn is already cut; the shards and the whole embeddings,
// norms and head are the eager build's from the same seed, to the bit, and so is the
// generator's state after, for both architectures from scratch.
TEST(ShardedAdamWUnitTest, AModelFromScratchIsDrawnAsItsConstructorsDrawAndCutABlockAtATime) {
  for (const std::string arch : {"gpt_lm", "transformer_classifier"}) {
    SCOPED_TRACE(arch);
    ModelConfig m;
    m.arch = arch;
    m.layers = 3;
    m.d_model = 16;
    m.heads = 2;
    m.ffn = 24;
    m.max_len = 8;
    const int64_t vocab = 50, classes = arch == "gpt_lm" ? 0 : 3, pad = 1;
    auto cut = [&](SequenceModel& model, int rank) {
      std::map<const c10::TensorImpl*, int64_t> in_block;
      const auto blocks = model.blocks();
      for (size_t b = 0; b < blocks.size(); ++b)
        for (const torch::Tensor& p : blocks[b]->parameters()) in_block[p.unsafeGetTensorImpl()] = int64_t(b);
      std::vector<torch::Tensor> params = model.parameters();
      std::vector<int64_t> block_of;
      for (const torch::Tensor& p : params) {
        auto it = in_block.find(p.unsafeGetTensorImpl());
        block_of.push_back(it == in_block.end() ? -1 : it->second);
      }
      return std::make_pair(FullyShardedAdamW::Create(params, block_of, torch::optim::AdamWOptions(1e-3), rank, 2),
                            block_of);
    };
    for (int rank : {0, 1}) {
      SCOPED_TRACE(rank);
      torch::manual_seed(11);
      std::shared_ptr<SequenceModel> eager = BuildSequenceModel(m, vocab, classes, pad);
      const std::string eager_rng = GetCpuRngState();
      auto [want, want_blocks] = cut(*eager, rank);
      want->Shard();
      torch::manual_seed(11);
      const std::string rng = GetCpuRngState();
      std::shared_ptr<SequenceModel> model;
      {
        hf::DeferInit unwritten;
        model = BuildSequenceModel(m, vocab, classes, pad);
      }
      auto [got, block_of] = cut(*model, rank);
      ASSERT_EQ(block_of, want_blocks);
      const std::vector<torch::Tensor> params = model->parameters();
      SetCpuRngState(rng);
      int passed = 0;
      hf::InitAsBuilt(*model, [&](const torch::Tensor& p) {
        got->ShardBefore(p);
        int64_t block = -1;
        for (size_t i = 0; i < params.size(); ++i)
          if (params[i].unsafeGetTensorImpl() == p.unsafeGetTensorImpl()) block = block_of[i];
        for (size_t i = 0; i < params.size(); ++i)
          if (block_of[i] >= 0 && block_of[i] < block) {
            ++passed;
            EXPECT_EQ(params[i].storage().nbytes(), 0u) << "block " << block_of[i] << " cut before block " << block;
          }
      });
      EXPECT_GT(passed, 0);
      EXPECT_EQ(GetCpuRngState(), eager_rng) << "the same draws, in the same order";
      got->Shard();
      ASSERT_EQ(got->shards().size(), want->shards().size());
      for (size_t u = 0; u < got->shards().size(); ++u) EXPECT_TRUE(torch::equal(got->shards()[u], want->shards()[u])) << u;
      const std::vector<torch::Tensor> eager_params = eager->parameters();
      for (size_t i = 0; i < params.size(); ++i)
        if (block_of[i] < 0) EXPECT_TRUE(torch::equal(params[i], eager_params[i])) << i;
    }
  }
}

// Sharding as the weights load (ShardBefore), on 3 ranks: the parameters start unwritten
// (models/common.h's DeferInit), the load writes them in the model's order, a bf16 frozen
// tensor in each block beside its trainable ones (an adapter's base). Each block is cut
// once the load has moved past it, so no rank ever holds two written blocks whole; after
// Shard() every block is freed, and gathered again every tensor has the value written.
TEST(ShardedAdamWUnitTest, ALoadInTheModelsOrderCutsOneBlockAtATime) {
  const int world = 3;
  const std::vector<std::vector<int64_t>> shapes = {{6}, {5, 3}, {4, 4}, {7}, {4, 2}, {4, 4}, {9}, {4, 4}, {3}};
  const std::vector<int64_t> block_of = {-1, 0, 0, 0, 1, 1, 2, 2, -1};
  const std::set<size_t> frozen_at = {2, 5, 7};
  auto initial = [&](size_t i) {
    torch::Tensor t = torch::linspace(-1, 1, c10::multiply_integers(shapes[i])).view(shapes[i]).add(double(i));
    return frozen_at.count(i) ? t.to(torch::kBFloat16) : t;
  };
  const int port = testing::FreePort();
  std::vector<int> most_whole(world, 0);
  testing::RunRanks(world, [&](int r) {
    auto group = ProcessGroup::Create(testing::Options(r, world, port));
    std::vector<torch::Tensor> params, trainable, frozen;
    std::vector<int64_t> trainable_block, frozen_block;
    for (size_t i = 0; i < shapes.size(); ++i) {
      params.push_back(torch::empty(shapes[i], initial(i).options()));
      (frozen_at.count(i) ? frozen : trainable).push_back(params[i]);
      (frozen_at.count(i) ? frozen_block : trainable_block).push_back(block_of[i]);
    }
    for (torch::Tensor& t : trainable) t.requires_grad_(true);
    auto opt = FullyShardedAdamW::Create(trainable, trainable_block, torch::optim::AdamWOptions(1e-2), r, world);
    opt->AddFrozen(frozen, frozen_block);
    opt->set_group(group.get());
    std::set<size_t> written;
    auto whole_blocks = [&] {
      std::set<int64_t> whole;
      for (size_t i : written)
        if (block_of[i] >= 0 && params[i].storage().nbytes() > 0) whole.insert(block_of[i]);
      return static_cast<int>(whole.size());
    };
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      opt->ShardBefore(params[i]);
      most_whole[r] = std::max(most_whole[r], whole_blocks());
      params[i].copy_(initial(i));
      written.insert(i);
    }
    opt->Shard();
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_EQ(params[i].storage().nbytes() == 0, block_of[i] >= 0) << "rank " << r << " tensor " << i;
    opt->Unshard();
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(torch::equal(params[i].detach(), initial(i))) << "rank " << r << " tensor " << i;
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(most_whole[r], 1) << "rank " << r;
}

// How many blocks (block_of[i] >= 0: params[i]'s) hold a parameter whose storage is
// allocated: whole on this rank.
int WholeBlocks(const std::vector<torch::Tensor>& params, const std::vector<int64_t>& block_of) {
  std::set<int64_t> whole;
  for (size_t i = 0; i < params.size(); ++i)
    if (block_of[i] >= 0 && params[i].storage().nbytes() > 0) whole.insert(block_of[i]);
  return static_cast<int>(whole.size());
}

// A load into the sharded model (model.init_from at start-up), on 3 ranks: the load writes
// new values in the model's order, each block reopened whole just before its first
// parameter (ReopenFor) and cut again when the load moves on, so a rank holds at most one
// block whole; after EndReopen every block is freed, gathered again every tensor has the
// new value, and each rank's shard of a resident unit (outside the blocks: whole on every
// rank) is its slice of the new values.
TEST(ShardedAdamWUnitTest, AReloadInTheModelsOrderReopensOneBlockAtATime) {
  const int world = 3;
  const std::vector<std::vector<int64_t>> shapes = {{6}, {5, 3}, {4, 4}, {7}, {4, 2}, {9}, {4, 4}, {3}};
  const std::vector<int64_t> block_of = {-1, 0, 0, 0, 1, 2, 2, -1};
  auto values = [&](size_t i, double offset) {
    return torch::linspace(-1, 1, c10::multiply_integers(shapes[i])).view(shapes[i]).add(double(i) + offset);
  };
  const int port = testing::FreePort();
  std::vector<int> most_whole(world, 0);
  testing::RunRanks(world, [&](int r) {
    auto group = ProcessGroup::Create(testing::Options(r, world, port));
    std::vector<torch::Tensor> params;
    for (size_t i = 0; i < shapes.size(); ++i) params.push_back(values(i, 0).requires_grad_(true));
    auto opt = FullyShardedAdamW::Create(params, block_of, torch::optim::AdamWOptions(1e-2), r, world);
    opt->set_group(group.get());
    opt->Shard();
    auto whole_blocks = [&] { return WholeBlocks(params, block_of); };
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      opt->ReopenFor(params[i]);
      most_whole[r] = std::max(most_whole[r], whole_blocks());
      params[i].copy_(values(i, 100));
    }
    opt->EndReopen();
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_EQ(params[i].storage().nbytes() == 0, block_of[i] >= 0) << "rank " << r << " tensor " << i;
    for (size_t u : {size_t{0}, opt->shards().size() - 1}) {  // the resident units: tensors 0 and 7
      const size_t i = u == 0 ? 0 : shapes.size() - 1;
      const torch::Tensor shard = opt->shards()[u];
      const torch::Tensor flat = torch::cat({values(i, 100).flatten(), torch::zeros({world * shard.numel() - params[i].numel()})});
      EXPECT_TRUE(torch::equal(shard, flat.narrow(0, r * shard.numel(), shard.numel()))) << "rank " << r << " unit " << u;
    }
    opt->Unshard();
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(torch::equal(params[i].detach(), values(i, 100))) << "rank " << r << " tensor " << i;
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(most_whole[r], 1) << "rank " << r;
}

// The export's walk: rank 0 asks for every parameter in order (GatherFor) and reads it
// whole, the others only walk (EndWalk); each rank holds at most one block whole at any
// time, every parameter read is the whole value, and all blocks are freed after.
TEST(ShardedAdamWUnitTest, TheExportWalkGathersOneBlockAtATime) {
  const int world = 3;
  const std::vector<std::vector<int64_t>> shapes = {{6}, {5, 3}, {7}, {4, 2}, {9}, {3}};
  const std::vector<int64_t> block_of = {-1, 0, 0, 1, 2, -1};
  auto initial = [&](size_t i) { return torch::linspace(-1, 1, c10::multiply_integers(shapes[i])).view(shapes[i]); };
  const int port = testing::FreePort();
  std::vector<int> most_whole(world, 0);
  std::vector<std::vector<torch::Tensor>> read(world);
  testing::RunRanks(world, [&](int r) {
    auto group = ProcessGroup::Create(testing::Options(r, world, port));
    std::vector<torch::Tensor> params;
    for (size_t i = 0; i < shapes.size(); ++i) params.push_back(initial(i).requires_grad_(true));
    auto opt = FullyShardedAdamW::Create(params, block_of, torch::optim::AdamWOptions(1e-2), r, world);
    opt->set_group(group.get());
    opt->Shard();
    auto whole_blocks = [&] { return WholeBlocks(params, block_of); };
    if (r == 0) {
      for (const torch::Tensor& p : params) {
        opt->GatherFor(p);
        most_whole[r] = std::max(most_whole[r], whole_blocks());
        read[r].push_back(p.detach().clone());
      }
    }
    opt->EndWalk();
    most_whole[r] = std::max(most_whole[r], whole_blocks());
    EXPECT_EQ(whole_blocks(), 0) << "rank " << r << ": every block freed after the walk";
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(most_whole[r], r == 0 ? 1 : 0) << "rank " << r;
  ASSERT_EQ(read[0].size(), shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) EXPECT_TRUE(torch::equal(read[0][i], initial(i))) << "tensor " << i;
}

}  // namespace
}  // namespace nightshift::trainer
