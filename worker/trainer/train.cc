#include "worker/trainer/train.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <thread>

#include "worker/trainer/amp.h"
#include "worker/trainer/checkpoint.h"
#include "worker/trainer/compat.h"
#include "worker/trainer/data_loader.h"
#include "worker/trainer/device.h"
#include "worker/trainer/memory_probe.h"
#include "worker/trainer/ddp.h"
#include "worker/trainer/dropout.h"
#include "worker/trainer/oom.h"

namespace nightshift::trainer {
namespace {

namespace F = torch::nn::functional;
using Clock = std::chrono::steady_clock;
using format::ProgressRecord;

std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the SIGTERM flag must be lock-free");

extern "C" void OnStopSignal(int) { g_stop_requested.store(true); }

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

void Log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void Log(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::fputs("nightshift-trainer: ", stderr);
  std::vfprintf(stderr, fmt, args);
  std::fputc('\n', stderr);
  va_end(args);
}

void Warn(ProgressSink& progress, const std::string& message) {
  Log("warning: %s", message.c_str());
  progress.Emit(ProgressRecord{"warning", {}, {{"message", message}}});
}

void OpenShard(const std::string& path, const char* what, const DataConfig& data,
               format::ShardReader* shard) {
  std::string err = shard->Open(path, /*verify_checksum=*/false);
  if (!err.empty()) throw std::runtime_error(std::string(what) + " shard: " + err);
  const auto& h = shard->header();
  if (h.vocab_size > static_cast<uint32_t>(data.vocab_size))
    throw std::runtime_error(std::string(what) + " shard " + path + " has vocab_size " +
                             std::to_string(h.vocab_size) + " but data.vocab_size is " +
                             std::to_string(data.vocab_size));
  if (h.num_classes != static_cast<uint32_t>(data.num_classes))
    throw std::runtime_error(std::string(what) + " shard " + path + " has " +
                             std::to_string(h.num_classes) + " classes but data.num_classes is " +
                             std::to_string(data.num_classes));
  for (uint64_t i = 0; data.num_classes > 0 && i < shard->num_samples(); ++i)
    if (shard->label(i) < 0 || shard->label(i) >= data.num_classes)
      throw std::runtime_error(std::string(what) + " shard " + path + ": sample " + std::to_string(i) +
                               " has label " + std::to_string(shard->label(i)) + " outside [0, " +
                               std::to_string(data.num_classes) + ")");
}

std::vector<uint32_t> Lengths(const format::ShardReader& shard, int64_t max_len) {
  std::vector<uint32_t> lengths(shard.num_samples());
  for (uint64_t i = 0; i < lengths.size(); ++i)
    lengths[i] = static_cast<uint32_t>(std::min<uint64_t>(shard.length(i), max_len));
  return lengths;
}

// Sums of the steps since the last `step` event.
// A worst-case batch for memory probes: `rows` samples of `len` tokens, no padding.
Batch WorstCaseBatch(int64_t rows, int64_t len, int64_t token) {
  Batch b;
  b.tokens = torch::full({rows, len}, token, torch::kLong);
  b.pad_mask = torch::zeros({rows, len}, torch::kBool);
  b.labels = torch::zeros({rows}, torch::kLong);
  b.real_tokens = b.padded_tokens = rows * len;
  b.samples = rows;
  return b;
}

struct StepWindow {
  int64_t steps = 0, tokens = 0, padded = 0, samples = 0;
  double seconds = 0, wait = 0, loss = 0;
  double allreduce = 0, allreduce_hidden = 0;  // data parallel: seconds, fraction
};

int Train(const TrainConfig& cfg, const RankInfo& rank, ProgressSink& progress) {
  const auto t_start = Clock::now();
  std::vector<std::string> warnings;  // emitted right after the start event
  // ---- validate what this trainer can do
  torch::Device device = torch::kCPU;
  if (std::string err = PickDevice(cfg.device, rank.local_rank, &device); !err.empty())
    throw std::runtime_error(err);
  if (std::string err = CheckPrecision(cfg.train.precision, device); !err.empty())
    throw std::runtime_error(err);
  const bool is_rank0 = rank.rank == 0;

  // ---- threads and BLAS speed
  const int threads = cfg.train.threads > 0
                          ? cfg.train.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                            std::max(1, rank.local_world_size));
  torch::set_num_threads(threads);
  const double blas_gflops = MeasureBlasGflops();
  // A reference BLAS does 1-3 GFLOP/s; the wheel's MKL does 100+ on two cores (a little
  // less on one thread of a small VM, hence the per-thread allowance).
  if (blas_gflops < std::min(20.0, 8.0 * threads))
    warnings.push_back("BLAS is slow (" + std::to_string(blas_gflops) +
                       " GFLOP/s on a 1024x1024 matmul): is this LibTorch built without MKL or OpenBLAS?");
  // MFU's denominator: the device's dense peak (CUDA), else the GEMM rate just measured.
  const double peak_flops = PeakFlops(device, cfg.train.precision, blas_gflops * 1e9);

  // ---- data
  format::ShardReader train_shard, val_shard;
  OpenShard(cfg.data.train_shard, "train", cfg.data, &train_shard);
  OpenShard(cfg.data.val_shard, "val", cfg.data, &val_shard);
  const int64_t max_len = cfg.model.max_len, pad_id = cfg.data.pad_id;
  const std::vector<uint32_t> train_lengths = Lengths(train_shard, max_len);
  const std::vector<uint32_t> val_lengths = Lengths(val_shard, max_len);
  BatchPlanOptions plan_options;
  plan_options.batch_size = cfg.train.batch_size;
  plan_options.max_tokens = cfg.train.max_tokens;
  const uint64_t seed = cfg.train.seed;

  // ---- model, optimizer, checkpoints (resume)
  torch::manual_seed(seed);
  SetDropoutStream(static_cast<uint64_t>(rank.rank));  // ranks draw different dropout masks
  std::shared_ptr<SequenceModel> model =
      BuildSequenceModel(cfg.model, cfg.data.vocab_size, cfg.data.num_classes, pad_id);
  // Language-model data (no classes) trains next-token prediction.
  const bool next_token = cfg.model.arch == "gpt_lm" || cfg.data.num_classes == 0;
  model->set_activation_checkpointing(cfg.train.checkpoint_every_blocks);
  model->to(device);  // before the optimizer sees its parameters
  torch::optim::AdamW optimizer(
      model->parameters(),
      torch::optim::AdamWOptions(cfg.train.lr).weight_decay(cfg.train.weight_decay));
  CheckpointManager checkpoints(CheckpointOptions{cfg.checkpoint_dir, cfg.checkpoint.every_steps,
                                                  cfg.checkpoint.every_seconds,
                                                  cfg.checkpoint.keep_last});
  TrainPosition pos;
  std::string resumed_from;
  // A checkpoint of another seed, batching, data or model cannot continue this run.
  const auto shard_text = [](const char* name, const format::ShardReader& s) {
    return std::string(name) + "=" + std::to_string(s.num_samples()) + "/" + std::to_string(s.header().num_tokens) +
           "/" + std::to_string(s.header().payload_checksum);
  };
  const ModelConfig& mc = cfg.model;
  const std::string fingerprint = RunFingerprint(
      seed, cfg.train.batch_size, cfg.train.max_tokens, cfg.train.max_tokens_auto,
      {shard_text("train", train_shard), shard_text("val", val_shard)},
      "model=" + mc.arch + "/" + std::to_string(mc.layers) + "/" + std::to_string(mc.d_model) + "/" +
          std::to_string(mc.heads) + "/" + std::to_string(mc.ffn) + "/" + std::to_string(mc.max_len) + "/" +
          std::to_string(cfg.data.vocab_size) + "/" + std::to_string(cfg.data.num_classes));
  if (TrainPosition latest; checkpoints.PeekLatest(&latest, &resumed_from) &&
      !latest.fingerprint.empty() && latest.fingerprint != fingerprint)
    throw std::runtime_error("checkpoint " + resumed_from + " belongs to another run configuration (it has \"" +
                             latest.fingerprint + "\", this run is \"" + fingerprint +
                             "\"): resume with the same seed, batching, data and model, or delete " +
                             cfg.checkpoint_dir + " to start over");
  const bool resumed = checkpoints.LoadLatest(*model, optimizer, &pos, &resumed_from);
  if (resumed) {
    SetCpuRngState(pos.rng_cpu);  // dropout continues where the saved run was
    Log("resumed from %s (step %lld)", resumed_from.c_str(), static_cast<long long>(pos.step));
  }
  int64_t num_parameters = 0, non_embedding_params = 0;
  for (const auto& p : model->named_parameters()) {
    num_parameters += p.value().numel();
    if (p.key() != "tok_emb.weight" && p.key() != "pos_emb.weight") non_embedding_params += p.value().numel();
  }
  const BatchStager stage_batch = NewBatchStager(device);  // runs on the loader's thread
  // The loss of a batch, summed over its samples or predicted tokens (the mean is sum /
  // LossCount); the forward pass runs in the run's precision.
  const auto batch_loss_sum = [&](const Batch& b) {
    AutocastRegion autocast(cfg.train.precision, device);
    return ComputeLossSum(model->forward(b.tokens, b.pad_mask), b, next_token).sum;
  };

  // ---- data parallel (world_size > 1): join the group; every rank starts from rank 0's
  // parameters at rank 0's position. Gradients are averaged in buckets during backward.
  std::unique_ptr<GradientSync> ddp = StartDataParallel(cfg, rank, *model);
  if (ddp) {
    CheckRanksAgree(*ddp, {pos.step, pos.epoch, pos.batch_in_epoch,
                           static_cast<int64_t>(train_shard.num_samples()),
                           static_cast<int64_t>(pos.metrics.count("max_tokens"))});
    Log("data parallel: rank %d of %d, %d gradient buckets of up to %d MiB, timeout %d s", rank.rank,
        rank.world_size, ddp->num_buckets(), cfg.bucket_mb, cfg.timeout_seconds);
  }

  // ---- max_tokens: auto (probed once; a resumed run keeps the budget it started with;
  // under data parallelism every rank probes its own device and all take the smallest)
  if (cfg.train.max_tokens_auto) {
    if (pos.metrics.count("max_tokens")) {
      plan_options.max_tokens = static_cast<int64_t>(pos.metrics["max_tokens"]);
    } else {
      const std::string rng = GetCpuRngState();  // the probe must not change dropout's draws
      NoSync probe_only(ddp.get());              // nor reach the other ranks' gradients
      std::unique_ptr<MemoryMeter> meter = NewMemoryMeter(device);
      ProbeOptions probe;
      probe.limit_bytes = MemoryLimit(device, rank.memory_limit_bytes, rank.local_world_size);
      probe.max_len = max_len;
      probe.cap_tokens = static_cast<int64_t>(train_shard.num_samples()) * max_len;
      ProbeResult r;
      std::string probe_error;  // under data parallelism every rank reaches MinOverRanks
      try {
        r = ProbeMaxTokens(probe, *meter, [&](int64_t rows) {
          batch_loss_sum(ToDevice(WorstCaseBatch(rows, max_len, (pad_id + 1) % cfg.data.vocab_size), device)).backward();
          optimizer.zero_grad();
        });
      } catch (const std::exception& e) {
        if (!ddp) throw;
        probe_error = e.what();
      }
      SetCpuRngState(rng);
      plan_options.max_tokens = ddp ? ddp->group().MinOverRanks(r.max_tokens) : r.max_tokens;
      if (plan_options.max_tokens <= 0)
        throw std::runtime_error("max_tokens auto: " +
                                 (probe_error.empty() ? "the probe failed on another rank" : probe_error));
      Log("max_tokens auto: %lld (this rank: %lld, peak %lld of a %lld-byte target, %d probes)",
          static_cast<long long>(plan_options.max_tokens), static_cast<long long>(r.max_tokens),
          static_cast<long long>(r.peak_bytes), static_cast<long long>(r.target_bytes), r.probes);
    }
  }
  std::vector<int64_t> batches_per_epoch;
  int64_t total_steps = 0;
  for (int e = 0; e < cfg.train.epochs; ++e) {
    batches_per_epoch.push_back(static_cast<int64_t>(
        PlanEpoch(train_lengths, plan_options, seed, e, rank.rank, rank.world_size).size()));
    total_steps += batches_per_epoch.back();
  }
  if (cfg.train.max_steps > 0) total_steps = std::min(total_steps, cfg.train.max_steps);
  if (total_steps == 0) throw std::runtime_error("no training batches: the train shard is empty");
  if (ddp) CheckRanksAgree(*ddp, {plan_options.max_tokens, total_steps});
  const BatchPlan val_plan = PlanEval(val_lengths, plan_options);

  progress.Emit(ProgressRecord{
      "start",
      {{"world_size", rank.world_size}, {"rank", rank.rank}, {"resumed_step", double(pos.step)},
       {"num_parameters", double(num_parameters)}, {"train_samples", double(train_shard.num_samples())},
       {"val_samples", double(val_shard.num_samples())}, {"total_steps", double(total_steps)},
       {"blas_gflops", blas_gflops}, {"threads", threads}, {"peak_flops", peak_flops},
       {"non_embedding_parameters", double(non_embedding_params)},
       {"max_tokens", double(plan_options.max_tokens)}, {"batch_size", double(plan_options.batch_size)}},
      {{"device", device.str()}, {"job_id", cfg.job_id}, {"torch_version", compat::TorchVersion()}}});
  for (const std::string& w : warnings) Warn(progress, w);
  Log("job %s attempt %d: %lld parameters, %llu train / %llu val samples, %lld steps, "
      "%d threads, BLAS %.1f GFLOP/s",
      cfg.job_id.c_str(), cfg.attempt, static_cast<long long>(num_parameters),
      static_cast<unsigned long long>(train_shard.num_samples()),
      static_cast<unsigned long long>(val_shard.num_samples()), static_cast<long long>(total_steps),
      threads, blas_gflops);

  // ---- state of the run
  int64_t step = pos.step, epoch = pos.epoch, batch_in_epoch = pos.batch_in_epoch;
  const double seconds_before = pos.metrics.count("train_seconds") ? pos.metrics["train_seconds"] : 0;
  double tokens_seen = pos.metrics.count("tokens_seen") ? pos.metrics["tokens_seen"] : 0;
  int64_t last_saved_step = resumed ? step : -1, last_eval_step = -1;
  double lr_scale = pos.metrics.count("lr_scale") ? pos.metrics["lr_scale"] : 1.0;  // NaN roll-backs halve it
  // Mixed precision: fp16's loss scaler; the NaN guard (every precision).
  GradScalerOptions scaler_options;
  scaler_options.enabled = cfg.train.precision == "fp16";
  GradScaler scaler(scaler_options);
  if (pos.metrics.count("grad_scale"))
    scaler.Restore(pos.metrics["grad_scale"], static_cast<int64_t>(pos.metrics["grad_scale_growth_tracker"]));
  NanGuard nan_guard;
  EvalMetrics last_eval;
  const auto train_seconds = [&] { return seconds_before + Seconds(t_start); };

  const auto save_checkpoint = [&] {
    if (ddp) ddp->group().Barrier();  // every rank is done with this step; rank 0 writes
    if (!is_rank0) {
      last_saved_step = step;
      return;
    }
    TrainPosition p{step, epoch, batch_in_epoch, GetCpuRngState(),
                    {{"train_seconds", train_seconds()}, {"tokens_seen", tokens_seen}, {"lr_scale", lr_scale},
                     {"max_tokens", double(plan_options.max_tokens)},
                     {"grad_scale", scaler.scale()}, {"grad_scale_growth_tracker", double(scaler.growth_tracker())}}};
    p.fingerprint = fingerprint;
    SavedCheckpoint saved = checkpoints.Save(p, *model, optimizer);
    last_saved_step = step;
    progress.Emit(ProgressRecord{
        "checkpoint",
        {{"step", double(step)}, {"bytes", double(saved.bytes)}, {"seconds", saved.seconds}},
        {{"path", saved.path}}});
    Log("checkpoint step %lld: %s (%lld bytes, %.2f s)", static_cast<long long>(step),
        saved.path.c_str(), static_cast<long long>(saved.bytes), saved.seconds);
  };
  const auto evaluate = [&] {
    last_eval = Evaluate(*model, val_shard, val_plan, max_len, pad_id, cfg.data.num_classes, next_token,
                         ddp ? &ddp->group() : nullptr);
    last_eval_step = step;
    progress.Emit(ProgressRecord{"eval",
                                 {{"step", double(step)}, {"epoch", double(epoch)},
                                  {"val_loss", last_eval.loss}, {"val_accuracy", last_eval.accuracy},
                                  {"val_f1", last_eval.f1}, {"val_perplexity", last_eval.perplexity}},
                                 {}});
    Log("eval step %lld epoch %lld: val_loss %.4f val_accuracy %.4f val_f1 %.4f",
        static_cast<long long>(step), static_cast<long long>(epoch), last_eval.loss,
        last_eval.accuracy, last_eval.f1);
  };

  // ---- techniques
  // OOM resilience: a batch that runs out of memory is retried as micro-batches; under
  // data parallelism every rank retries when any rank ran out (ranks vote after each
  // attempt, once its gradient all-reduce is finished or discarded).
  SyncStats sync_stats;  // the last step's all-reduce
  OomOptions oom_options;
  oom_options.fault_above_tokens = rank.fault_oom_above_tokens;
  oom_options.vote = SyncAndVote(ddp.get(), &sync_stats);
  oom_options.release_memory = [&] { ReleaseCachedMemory(device); };
  MicroBatchRunner micro_batches(oom_options);
  int64_t oom_recoveries = 0;
  // One micro-batch: forward (autocast), its share of the batch's mean loss (loss_count:
  // the whole batch's samples or predicted tokens), backward of the scaled loss. Returns
  // that share's value. Only the last micro-batch's backward all-reduces gradients.
  const auto forward_backward = [&](const Batch& micro, bool last, int64_t loss_count) {
    NoSync accumulate_only(last ? nullptr : ddp.get());
    torch::Tensor loss = batch_loss_sum(micro) / double(loss_count);
    scaler.Scale(loss).backward();
    return loss.item<double>();
  };
  // After 5 non-finite losses in a row: back to the last complete checkpoint, lr halved.
  const auto roll_back = [&] {
    std::string path;
    if (!checkpoints.LoadLatest(*model, optimizer, &pos, &path))
      throw std::runtime_error("the loss was not finite for " + std::to_string(nan_guard.max_consecutive()) +
                               " steps in a row and there is no checkpoint to roll back to; lower "
                               "spec.train.lr or use precision fp32");
    SetCpuRngState(pos.rng_cpu);
    step = pos.step;
    epoch = pos.epoch;
    batch_in_epoch = pos.batch_in_epoch;
    lr_scale = 0.5 * (pos.metrics.count("lr_scale") ? pos.metrics["lr_scale"] : 1.0);
    Warn(progress, "the loss was not finite for " + std::to_string(nan_guard.max_consecutive()) +
                       " steps in a row: rolled back to " + path + " and halved the learning rate");
  };

  // ---- the loop
  StepWindow window;
  auto last_report = Clock::now(), last_log = Clock::now();
  const int64_t first_step = step;
  bool stop = false, stopped_by_signal = false;
  while (epoch < cfg.train.epochs) {
    bool rolled_back = false;
    const BatchPlan plan = PlanEpoch(train_lengths, plan_options, seed, epoch, rank.rank, rank.world_size);
    BatchPrefetcher loader(train_shard, plan, static_cast<size_t>(batch_in_epoch), max_len, pad_id,
                           cfg.train.prefetch, stage_batch);
    while (batch_in_epoch < static_cast<int64_t>(plan.size())) {
      if (cfg.train.max_steps > 0 && step >= cfg.train.max_steps) { stop = true; break; }
      if (rank.fault_abort_at_step == step + 1) {
        std::fprintf(stderr, "fault injection: aborting at step %lld\n", static_cast<long long>(step + 1));
        std::abort();
      }
      const auto t_step = Clock::now();
      double wait = 0;
      Batch batch = loader.Next(&wait);  // already on the device

      model->train();
      const double lr = lr_scale * LearningRate(step, cfg.train.warmup_steps, total_steps, cfg.train.lr);
      for (auto& group : optimizer.param_groups())
        static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
      // forward + backward, split into micro-batches if the batch runs out of memory
      const MicroBatchResult fb = micro_batches.Run(
          batch,
          [&](const Batch& micro, bool last) { return forward_backward(micro, last, LossCount(batch, next_token)); },
          [&] { optimizer.zero_grad(); });
      oom_recoveries += fb.oom_recoveries;
      // NaN guard (every precision), then fp16's unscale and overflow check; clip; step
      // (data parallel: ranks decide together, since one rank's NaN reaches every gradient)
      const bool injected_nan = rank.fault_nan_loss_from_step > 0 && step + 1 >= rank.fault_nan_loss_from_step;
      bool loss_finite = std::isfinite(fb.loss) && !injected_nan;
      if (ddp) loss_finite = !ddp->AnyRank(!loss_finite);
      const NanGuard::Action action = nan_guard.Observe(loss_finite);
      if (action == NanGuard::Action::kFail)
        throw std::runtime_error("the loss was not finite for " + std::to_string(nan_guard.max_consecutive()) +
                                 " steps in a row again after rolling back to a checkpoint with half the "
                                 "learning rate: the run diverges; lower spec.train.lr or use precision fp32");
      if (action == NanGuard::Action::kRollBack) { roll_back(); rolled_back = true; break; }
      bool apply_step = action == NanGuard::Action::kStep;
      if (apply_step && scaler.enabled()) {
        const bool grads_finite = scaler.UnscaleAndCheckFinite(model->parameters());
        scaler.Update(!grads_finite);
        if (!grads_finite) { apply_step = false; nan_guard.CountSkipped(); }
      }
      if (apply_step) {
        if (cfg.train.grad_clip > 0) torch::nn::utils::clip_grad_norm_(model->parameters(), cfg.train.grad_clip);
        optimizer.step();
      }
      ++step;
      ++batch_in_epoch;
      tokens_seen += batch.real_tokens;

      // report (at most ~2 step events a second, and at the end of each epoch)
      window.steps++;
      window.tokens += batch.real_tokens;
      window.padded += batch.padded_tokens;
      window.samples += batch.samples;
      window.seconds += Seconds(t_step);
      window.wait += wait;
      window.allreduce += sync_stats.allreduce_seconds;
      window.allreduce_hidden += sync_stats.hidden_fraction;
      window.loss += fb.loss;
      const bool epoch_end = batch_in_epoch == static_cast<int64_t>(plan.size());
      if (progress.wants_steps() &&
          (step == first_step + 1 || epoch_end || Seconds(last_report) >= 0.5 || StopRequested())) {
        const double mean_loss = window.loss / window.steps;
        const double tokens_per_second = window.tokens / window.seconds;
        const double row_len = double(window.padded) / double(std::max<int64_t>(window.samples, 1));
        const double mfu = tokens_per_second * TrainingFlopsPerToken(non_embedding_params, cfg.model, row_len) /
                           peak_flops;
        const DeviceMemory memory = GetDeviceMemory(device);
        progress.Emit(ProgressRecord{
            "step",
            {{"step", double(step)}, {"epoch", double(epoch)}, {"total_steps", double(total_steps)},
             {"loss", mean_loss}, {"lr", lr},
             {"tokens_per_second", tokens_per_second}, {"mfu", mfu},
             {"samples_per_second", window.samples / window.seconds},
             {"step_seconds", window.seconds / window.steps},
             {"data_wait_seconds", window.wait / window.steps},
             {"padding_efficiency", double(window.tokens) / double(window.padded)},
             {"batch_samples", double(batch.samples)}, {"batch_padded_tokens", double(batch.padded_tokens)},
             {"host_rss_bytes", double(std::max<int64_t>(0, ProcBytes("/proc/self/status", "VmRSS:")))},
             {"memory_peak_bytes", double(PeakMemoryBytes(device))},
             {"memory_allocated_bytes", double(memory.allocated)},
             {"memory_reserved_bytes", double(memory.reserved)},
             {"allreduce_seconds", window.allreduce / window.steps},
             {"allreduce_hidden_fraction", window.allreduce_hidden / window.steps},
             {"skipped_steps", double(nan_guard.skipped_steps())},
             {"oom_recoveries", double(oom_recoveries)}, {"micro_batches", double(fb.micro_batches)},
             {"grad_scale", scaler.scale()}},
            {{"precision", cfg.train.precision}}});
        if (Seconds(last_log) >= 10 || step == first_step + 1) {
          Log("step %lld/%lld epoch %lld loss %.4f lr %.3g %.0f tokens/s MFU %.3f", static_cast<long long>(step),
              static_cast<long long>(total_steps), static_cast<long long>(epoch), mean_loss, lr,
              tokens_per_second, mfu);
          last_log = Clock::now();
        }
        window = StepWindow{};
        last_report = Clock::now();
      }

      // checkpoint (and stop on SIGTERM)
      // (ranks decide together: a SIGTERM or a due checkpoint on any rank counts for all)
      bool stop_now = StopRequested(), save_now = is_rank0 && checkpoints.Due(step);
      if (ddp) {
        const std::vector<bool> any = ddp->group().AnyRank({stop_now, save_now});
        stop_now = any[0];
        save_now = any[1];
      }
      if (stop_now) stop = stopped_by_signal = true;
      if (stopped_by_signal || save_now) save_checkpoint();

      if (stop) break;
    }
    if (stop) break;
    if (rolled_back) continue;  // from the checkpoint's epoch and batch
    evaluate();
    ++epoch;
    batch_in_epoch = 0;
  }

  if (stopped_by_signal) {
    Warn(progress, "stopped by SIGTERM at step " + std::to_string(step) + " after a checkpoint");
    return kExitStopped;
  }
  if (last_eval_step != step) evaluate();
  if (last_saved_step != step) save_checkpoint();
  progress.Emit(ProgressRecord{"done",
                               {{"step", double(step)}, {"val_loss", last_eval.loss},
                                {"val_accuracy", last_eval.accuracy}, {"val_f1", last_eval.f1},
                                {"val_perplexity", last_eval.perplexity},
                                {"train_seconds", train_seconds()}},
                               {}});
  Log("done at step %lld: val_accuracy %.4f, %.1f s", static_cast<long long>(step),
      last_eval.accuracy, train_seconds());
  return kExitOk;
}

}  // namespace

int RunTraining(const TrainConfig& config, const RankInfo& rank, ProgressSink& progress) {
  try {
    return Train(config, rank, progress);
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

double LearningRate(int64_t step, int64_t warmup, int64_t total, double peak) {
  if (step < warmup) return peak * double(step + 1) / double(warmup);
  const double span = double(total - warmup);
  if (span <= 0) return peak;
  return peak * std::max(0.0, double(total - step) / span);
}

EvalMetrics Evaluate(SequenceModel& model, const format::ShardReader& shard, const BatchPlan& plan,
                     int64_t max_len, int64_t pad_id, int64_t num_classes, bool next_token,
                     ProcessGroup* group) {
  torch::NoGradGuard no_grad;
  model.eval();
  double loss_sum = 0;
  int64_t n = 0, terms = 0, correct = 0, tp = 0, fp = 0, fn = 0;
  torch::Device device = torch::kCPU;
  for (const auto& p : model.parameters()) {
    device = p.device();
    break;
  }
  const size_t stride = group ? static_cast<size_t>(group->size()) : 1;
  for (size_t b = group ? static_cast<size_t>(group->rank()) : 0; b < plan.size(); b += stride) {
    Batch batch = ToDevice(Collate(shard, plan[b], max_len, pad_id), device);
    torch::Tensor logits = model.forward(batch.tokens, batch.pad_mask);
    const LossSum loss = ComputeLossSum(logits, batch, next_token);
    loss_sum += loss.sum.item<double>();
    terms += loss.count;
    n += batch.samples;
    if (next_token) {
      const int64_t l = batch.tokens.size(1);
      if (l < 2) continue;
      torch::Tensor pred = logits.narrow(1, 0, l - 1).argmax(-1);
      torch::Tensor valid = batch.pad_mask.narrow(1, 1, l - 1).logical_not();
      correct += (pred.eq(batch.tokens.narrow(1, 1, l - 1)) & valid).sum().item<int64_t>();
      continue;
    }
    torch::Tensor pred = logits.argmax(1);
    correct += pred.eq(batch.labels).sum().item<int64_t>();
    if (num_classes == 2) {
      tp += (pred.eq(1) & batch.labels.eq(1)).sum().item<int64_t>();
      fp += (pred.eq(1) & batch.labels.eq(0)).sum().item<int64_t>();
      fn += (pred.eq(0) & batch.labels.eq(1)).sum().item<int64_t>();
    }
  }
  model.train();
  if (group) {  // the sums of every rank's share (exact: counts stay far below 2^53)
    torch::Tensor sums = torch::tensor({loss_sum, double(n), double(terms), double(correct), double(tp),
                                        double(fp), double(fn)}, torch::kFloat64);
    group->AllReduceSum(sums);
    loss_sum = sums[0].item<double>();
    n = sums[1].item<int64_t>();
    terms = sums[2].item<int64_t>();
    correct = sums[3].item<int64_t>();
    tp = sums[4].item<int64_t>();
    fp = sums[5].item<int64_t>();
    fn = sums[6].item<int64_t>();
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EvalMetrics m;
  m.samples = n;
  m.loss = terms > 0 ? loss_sum / terms : nan;
  m.accuracy = terms > 0 ? double(correct) / terms : nan;
  m.f1 = next_token || num_classes != 2 || n == 0 ? nan : (tp == 0 ? 0.0 : 2.0 * tp / double(2 * tp + fp + fn));
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
