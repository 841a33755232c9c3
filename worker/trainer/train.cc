#include "worker/trainer/errors.h"
#include "worker/trainer/train.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <thread>

#include "worker/trainer/data/data_loader.h"
#include "worker/trainer/parallel/ddp.h"
#include "worker/trainer/device.h"
#include "worker/trainer/run.h"
#include "worker/trainer/step_report.h"

namespace nightshift::trainer {
namespace {

using Clock = std::chrono::steady_clock;
using format::ProgressRecord;

std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the SIGTERM flag must be lock-free");

extern "C" void OnStopSignal(int) { g_stop_requested.store(true); }

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// The loop: BuildRun composes the parts (run.h); each step is batches (accumulate_steps of
// them) -> forward/backward (micro-batches after an out-of-memory error) ending in the
// ranks' one vote -> NaN guard -> unscale/clip/step -> report -> evaluation every
// eval.every_steps (early stopping ends the run there) -> checkpoint (and stop on
// SIGTERM, before the evaluation: the resumed run makes it first) -> else an evaluation at
// every epoch's end. All state that outlives a step is run->position.
int Train(const TrainConfig& cfg, const RankInfo& rank, ProgressSink& progress) {
  const std::unique_ptr<Run> run = BuildRun(cfg, rank, progress);
  RunPosition& pos = run->position;
  StepReporter report(*run);
  bool stopped = run->CatchUp();
  while (!stopped && run->stop_early.empty() && pos.epoch < cfg.train.epochs && !run->StepLimitReached()) {
    run->OpenEpoch();
    bool rolled_back = false;
    while (!run->EpochDone() && !run->StepLimitReached() && !stopped && !rolled_back && run->stop_early.empty()) {
      run->faults.BeforeStep(pos.step + 1);
      const auto t_step = Clock::now();
      double wait = 0;
      const StepBatches batches = run->NextBatches(&wait);  // train.accumulate_steps batches
      const double lr = run->SetLearningRate();
      run->agreement->Begin(run->Intent());
      const MicroBatchResult fb = run->ForwardBackward(batches);
      const StepDecision& agreed = run->agreement->decision();
      switch (run->nan_guard.Observe(agreed.loss_finite)) {
        case NanGuard::Action::kStep: run->ClipAndStep(); break;
        case NanGuard::Action::kSkip: break;
        case NanGuard::Action::kRollBack: run->RollBack(); rolled_back = true; continue;
        case NanGuard::Action::kFail:
          throw std::runtime_error("the loss was not finite for " + std::to_string(run->nan_guard.max_consecutive()) +
                                   " steps in a row again after rolling back to a checkpoint with half the "
                                   "learning rate: the run diverges; lower spec.train.lr or use precision fp32");
      }
      run->Advance(batches);
      report.Add(batches, fb, lr, wait, Seconds(t_step));
      stopped = agreed.stop;
      const bool eval = !stopped && run->EvalDue();
      if (eval) run->Evaluate();  // eval.every_steps (may stop early): before the checkpoint, which keeps its outcome
      if (agreed.stop || agreed.save) run->SaveCheckpoint();
      if (eval) stopped = run->AwaitJudgement();  // at an ASHA trial's rung: go on, or stop here
    }
    if (stopped || rolled_back || !run->EpochDone()) continue;  // a roll-back resumes mid-epoch
    if (cfg.eval_every_steps == 0) run->Evaluate();
    ++pos.epoch;
    pos.batch_in_epoch = 0;
    if (cfg.eval_every_steps == 0) stopped = run->AwaitJudgement(/*epoch_end=*/true);  // a rung by epochs
  }
  if (stopped) {
    Warn(progress, "stopped by SIGTERM at step " + std::to_string(pos.step) + " after a checkpoint");
    return kExitStopped;
  }
  run->Finish();
  return kExitOk;
}

}  // namespace

int RunTraining(const TrainConfig& config, const RankInfo& rank, ProgressSink& progress) {
  try {
    return Train(config, rank, progress);
  } catch (const PermanentError& e) {
    Log("error (a restart would meet it again): %s", e.what());
    progress.Emit(ProgressRecord{"error", {{"permanent", 1}}, {{"message", e.what()}}});
    return kExitPermanent;
  } catch (const std::exception& e) {
    // c10::Error messages carry a long backtrace; the first line is the message.
    std::string message = e.what();
    if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) message = c10->what_without_backtrace();
    Log("error: %s", message.c_str());
    progress.Emit(ProgressRecord{"error", {}, {{"message", message}}});
  } catch (...) {
    Log("error: unknown exception");
    progress.Emit(ProgressRecord{"error", {}, {{"message", "unknown exception"}}});
  }
  return kExitError;
}

void InstallStopSignalHandler() {
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
}
void RequestStop() { g_stop_requested.store(true); }
void ClearStopRequest() { g_stop_requested.store(false); }
bool StopRequested() { return g_stop_requested.load(); }

namespace {

// Evaluation's running sums (over this rank's batches, then over the ranks).
struct EvalTally {
  double loss_sum = 0;
  int64_t n = 0, terms = 0, correct = 0, tp = 0, fp = 0, fn = 0;  // samples, loss terms, hits, F1's counts
};

// Adds one batch: a decoder's head a chunk at a time (NextTokenEvalSums), else the logits.
void TallyBatch(SequenceModel& model, const Batch& batch, int64_t num_classes, bool next_token, EvalTally* t) {
  t->n += batch.samples;
  if (LmEvalSums sums; next_token && NextTokenEvalSums(model, batch, &sums)) {
    t->loss_sum += sums.loss_sum;
    t->correct += sums.correct;
    t->terms += LossCount(batch, true);
    return;
  }
  torch::Tensor logits = Logits(model, batch);
  const LossSum loss = ComputeLossSum(logits, batch, next_token);
  t->loss_sum += loss.sum.item<double>();
  t->terms += loss.count;
  if (next_token) {
    const int64_t l = batch.tokens.size(1);
    if (l < 2) return;
    torch::Tensor pred = logits.narrow(1, 0, l - 1).argmax(-1);
    t->correct += (pred.eq(batch.tokens.narrow(1, 1, l - 1)) & NextTokenTargets(batch)).sum().item<int64_t>();
    return;
  }
  torch::Tensor pred = logits.argmax(1);
  t->correct += pred.eq(batch.labels).sum().item<int64_t>();
  if (num_classes == 2) {
    t->tp += (pred.eq(1) & batch.labels.eq(1)).sum().item<int64_t>();
    t->fp += (pred.eq(1) & batch.labels.eq(0)).sum().item<int64_t>();
    t->fn += (pred.eq(0) & batch.labels.eq(1)).sum().item<int64_t>();
  }
}

// The sums of every rank's share (exact: counts stay far below 2^53).
void SumOverRanks(ProcessGroup& group, EvalTally* t) {
  torch::Tensor sums = torch::tensor({t->loss_sum, double(t->n), double(t->terms), double(t->correct), double(t->tp),
                                      double(t->fp), double(t->fn)}, torch::kFloat64);
  group.AllReduceSum(sums);
  t->loss_sum = sums[0].item<double>();
  t->n = sums[1].item<int64_t>();
  t->terms = sums[2].item<int64_t>();
  t->correct = sums[3].item<int64_t>();
  t->tp = sums[4].item<int64_t>();
  t->fp = sums[5].item<int64_t>();
  t->fn = sums[6].item<int64_t>();
}

}  // namespace

EvalMetrics Evaluate(SequenceModel& model, const format::ShardReader& shard, const BatchPlan& plan,
                     int64_t max_len, int64_t pad_id, int64_t num_classes, bool next_token,
                     ProcessGroup* group, bool lockstep) {
  torch::NoGradGuard no_grad;
  model.eval();
  torch::Device device = torch::kCPU;
  for (const auto& p : model.parameters()) {
    device = p.device();
    break;
  }
  EvalTally t;
  const size_t stride = group ? static_cast<size_t>(group->size()) : 1;
  const size_t first = group ? static_cast<size_t>(group->rank()) : 0;
  // lockstep: every rank runs as many rounds as the busiest one (ceil(plan / stride)).
  const size_t end = lockstep ? (plan.size() + stride - 1) / stride * stride : plan.size();
  EvalTally uncounted;
  for (size_t b = first; b < end; b += stride) {
    const bool counted = b < plan.size();
    TallyBatch(model, ToDevice(Collate(shard, plan[counted ? b : first % plan.size()], max_len, pad_id), device),
               num_classes, next_token, counted ? &t : &uncounted);
  }
  model.train();
  if (group) SumOverRanks(*group, &t);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EvalMetrics m;
  m.samples = t.n;
  m.loss = t.terms > 0 ? t.loss_sum / t.terms : nan;
  m.accuracy = t.terms > 0 ? double(t.correct) / t.terms : nan;
  m.f1 = next_token || num_classes != 2 || t.n == 0 ? nan
                                                    : (t.tp == 0 ? 0.0 : 2.0 * t.tp / double(2 * t.tp + t.fp + t.fn));
  m.perplexity = next_token ? std::exp(m.loss) : nan;
  return m;
}

double MeasureBlasGflops() {
  torch::NoGradGuard no_grad;
  const int64_t n = 1024;  // large enough to reach the GEMM's peak, small enough for ~0.1 s
  torch::Tensor a = torch::full({n, n}, 0.5f), b = torch::full({n, n}, 0.25f);
  torch::Tensor c = torch::mm(a, b);  // warm-up
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 4; ++i) {
    const auto t0 = Clock::now();
    c = torch::mm(a, b);
    best = std::min(best, Seconds(t0));
    if (best > 0.05) break;  // clearly slow: do not spend seconds proving it
  }
  return 2.0 * n * n * n / best / 1e9;
}

}  // namespace nightshift::trainer
