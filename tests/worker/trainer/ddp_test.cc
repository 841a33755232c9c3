// Data parallelism with real Gloo groups: ranks are threads of this process, meeting
// through a TCPStore on 127.0.0.1 and a free port.
#include "worker/trainer/ddp.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <functional>
#include <thread>

#include "worker/trainer/model.h"

namespace nightshift::trainer {
namespace {

namespace F = torch::nn::functional;

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

ProcessGroupOptions Options(int rank, int world, int port, int timeout_ms = 20000) {
  ProcessGroupOptions o;
  o.rank = rank;
  o.world_size = world;
  o.master_addr = "127.0.0.1";
  o.master_port = port;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  return o;
}

// Runs body(rank) on `world` threads; rethrows the first failure.
void RunRanks(int world, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

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
    cfg.world_size = 2;
    cfg.timeout_seconds = 20;
    RankInfo info;
    info.rank = r;
    info.world_size = 2;
    info.master_addr = "127.0.0.1";
    info.master_port = port;
    try {
      StartDataParallel(cfg, info, *models[r], {r == 0 ? 10 : 20, 0, 10});
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
    auto group = ProcessGroup::Create(Options(r, 2, port, 1500));
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(4000));
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
    EXPECT_LT(s, 3.9) << "waited past the timeout";
  });
  EXPECT_NE(error.find("timed out"), std::string::npos) << error;
}

}  // namespace
}  // namespace nightshift::trainer
