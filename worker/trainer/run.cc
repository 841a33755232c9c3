#include "worker/trainer/run.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "common/format/checkpoint_layout.h"
#include "worker/trainer/compat.h"
#include "worker/trainer/errors.h"
#include "worker/trainer/checkpoint/export.h"
#include "worker/trainer/optim/clip.h"
#include "worker/trainer/optim/fused_adamw.h"
#include "worker/trainer/models/common.h"
#include "worker/trainer/models/dropout.h"
#include "worker/trainer/memory/memory_probe.h"
#include "worker/trainer/models/pretrained.h"

namespace nightshift::trainer {
namespace {

// An evaluation's value of `metric` (val_loss, val_accuracy, val_f1, val_perplexity).
double MetricValue(const EvalMetrics& m, const std::string& metric) {
  if (metric == "val_loss") return m.loss;
  if (metric == "val_accuracy") return m.accuracy;
  if (metric == "val_f1") return m.f1;
  if (metric == "val_perplexity") return m.perplexity;
  throw std::invalid_argument("unknown metric " + metric);
}

// Whether `a` is better than `b` for `metric`: lower loss and perplexity, higher accuracy
// and F1 (transformers' greater_is_better for metric_for_best_model).
bool Better(const std::string& metric, double a, double b) {
  return metric == "val_loss" || metric == "val_perplexity" ? a < b : a > b;
}

namespace fs = std::filesystem;
using format::ProgressRecord;

double Seconds(Run::Clock::time_point since) {
  return std::chrono::duration<double>(Run::Clock::now() - since).count();
}

std::string Str(int64_t v) { return std::to_string(v); }

void OpenShard(const std::string& path, const char* what, const DataConfig& data,
               format::ShardReader* shard) {
  std::string err = shard->Open(path, /*verify_checksum=*/false);
  if (!err.empty()) throw std::runtime_error(std::string(what) + " shard: " + err);
  const auto& h = shard->header();
  const std::string name = std::string(what) + " shard " + path;
  if (h.vocab_size > static_cast<uint32_t>(data.vocab_size))
    throw std::runtime_error(name + " has vocab_size " + Str(h.vocab_size) + " but data.vocab_size is " +
                             Str(data.vocab_size));
  if (h.num_classes != static_cast<uint32_t>(data.num_classes))
    throw std::runtime_error(name + " has " + Str(h.num_classes) + " classes but data.num_classes is " +
                             Str(data.num_classes));
  for (uint64_t i = 0; data.num_classes > 0 && i < shard->num_samples(); ++i)
    if (shard->label(i) < 0 || shard->label(i) >= data.num_classes)
      throw std::runtime_error(name + ": sample " + Str(static_cast<int64_t>(i)) + " has label " +
                               Str(shard->label(i)) + " outside [0, " + Str(data.num_classes) + ")");
}

std::vector<uint32_t> Lengths(const format::ShardReader& shard, int64_t max_len) {
  std::vector<uint32_t> lengths(shard.num_samples());
  for (uint64_t i = 0; i < lengths.size(); ++i)
    lengths[i] = static_cast<uint32_t>(std::min<uint64_t>(shard.length(i), max_len));
  return lengths;
}

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

// ---- the steps of BuildRun, in order

// Device and precision; threads; BLAS speed and the peak for MFU. Returns warnings for
// the `start` event.
std::vector<std::string> SetUpDevice(Run& run) {
  const TrainConfig& cfg = run.cfg;
  if (std::string err = PickDevice(cfg.device, run.rank.local_rank, &run.device); !err.empty())
    throw std::runtime_error(err);
  if (std::string err = CheckPrecision(cfg.train.precision, run.device); !err.empty())
    throw std::runtime_error(err);
  run.threads = cfg.train.threads > 0
                    ? cfg.train.threads
                    : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                      std::max(1, run.rank.local_world_size));
  torch::set_num_threads(run.threads);
  run.blas_gflops = MeasureBlasGflops();
  std::vector<std::string> warnings;
  // A reference BLAS does 1-3 GFLOP/s; the wheel's MKL does 100+ on two cores (a little
  // less on one thread of a small VM, hence the per-thread allowance).
  if (run.blas_gflops < std::min(20.0, 8.0 * run.threads))
    warnings.push_back("BLAS is slow (" + std::to_string(run.blas_gflops) +
                       " GFLOP/s on a 1024x1024 matmul): is this LibTorch built without MKL or OpenBLAS?");
  // MFU's denominator: the device's dense peak (CUDA), else the GEMM rate just measured.
  run.peak_flops = PeakFlops(run.device, cfg.train.precision, run.blas_gflops * 1e9);
  return warnings;
}

void OpenData(Run& run) {
  const TrainConfig& cfg = run.cfg;
  OpenShard(cfg.data.train_shard, "train", cfg.data, &run.train_shard);
  OpenShard(cfg.data.val_shard, "val", cfg.data, &run.val_shard);
  run.train_lengths = Lengths(run.train_shard, cfg.model.max_len);
  run.val_lengths = Lengths(run.val_shard, cfg.model.max_len);
  run.plan_options.batch_size = cfg.train.batch_size;
  run.plan_options.max_tokens = cfg.train.max_tokens;
  run.plan_options.pack_len = cfg.train.rows == "packed" ? cfg.model.max_len : 0;
}

// num_parameters, and non_embedding_parameters (MFU's FLOPs count).
void CountParameters(Run& run) {
  const TrainConfig& cfg = run.cfg;
  for (const auto& p : run.model->named_parameters()) {
    run.num_parameters += p.value().numel();
    auto ends_with = [&](const char* suffix) {
      const std::string& k = p.key();
      return k.size() >= std::strlen(suffix) && k.compare(k.size() - std::strlen(suffix), std::string::npos, suffix) == 0;
    };
    const bool embedding = p.key() == "tok_emb.weight" || p.key() == "pos_emb.weight" ||  // ours; Hugging Face's:
                           p.key().find("_embeddings.weight") != std::string::npos ||
                           ends_with(".wte.weight") || ends_with(".wpe.weight") || ends_with(".embed_tokens.weight");
    if (!embedding) run.non_embedding_parameters += p.value().numel();
  }
  // gpt_lm's head and a tied Hugging Face LM head are the token embedding: their matmul is
  // model FLOPs all the same.
  const bool tied_head = cfg.model.arch == "gpt_lm" || (cfg.model.task == "causal_lm" &&
                                                         !run.model->named_parameters().contains("lm_head.weight"));
  if (tied_head) run.non_embedding_parameters += int64_t{cfg.data.vocab_size} * cfg.model.d_model;
}

// Which block of the model (SequenceModel::blocks) each of `params` belongs to; -1: none.
std::vector<int64_t> BlockOf(SequenceModel& model, const std::vector<torch::Tensor>& params) {
  const std::vector<std::shared_ptr<torch::nn::Module>> blocks = model.blocks();
  std::map<const void*, int64_t> block_of_param;
  for (size_t b = 0; b < blocks.size(); ++b)
    for (const torch::Tensor& p : blocks[b]->parameters()) block_of_param[p.unsafeGetTensorImpl()] = static_cast<int64_t>(b);
  std::vector<int64_t> block_of;
  for (const torch::Tensor& p : params) {
    auto it = block_of_param.find(p.unsafeGetTensorImpl());
    block_of.push_back(it == block_of_param.end() ? -1 : it->second);
  }
  return block_of;
}

// resources.sharding: full with several ranks (FullyShardedAdamW; the model is placed on
// the device only once cut).
bool ShardsFully(const Run& run) { return run.cfg.data_parallel.sharding == "full" && run.rank.world_size > 1; }

// The model's trainable parameters, in its order.
std::vector<torch::Tensor> Trainable(const Run& run) {
  std::vector<torch::Tensor> trainable;
  for (const torch::Tensor& p : run.model->parameters())
    if (p.requires_grad()) trainable.push_back(p);
  return trainable;
}

// The fused AdamW over the trainable parameters: whole, or cut across the ranks as
// resources.sharding says.
void BuildOptimizer(Run& run) {
  const TrainConfig& cfg = run.cfg;
  // Only what trains has optimizer state (with an adapter: its A and B and the modules to
  // save; the frozen base has neither gradients nor moments).
  const std::vector<torch::Tensor> trainable = Trainable(run);
  const auto adamw = torch::optim::AdamWOptions(cfg.train.lr).weight_decay(cfg.train.weight_decay);
  if (cfg.data_parallel.sharding == "optimizer" && run.rank.world_size > 1) {
    auto sharded = ShardedAdamW::Create(trainable, adamw, run.rank.rank, run.rank.world_size,
                                        int64_t{cfg.data_parallel.bucket_mb} << 20);
    sharded->set_reduce_bf16(cfg.data_parallel.reduce_bf16);
    run.sharded = sharded.get();
    run.optimizer = std::move(sharded);
  } else if (ShardsFully(run)) {
    BlockPlan* plan = run.model->block_plan();
    if (plan == nullptr)
      throw PermanentError("resources.sharding: full shards a model's transformer blocks; model.arch " + cfg.model.arch +
                           " has none (use optimizer)");
    auto full = FullyShardedAdamW::Create(trainable, BlockOf(*run.model, trainable), adamw, run.rank.rank,
                                          run.rank.world_size);
    std::vector<torch::Tensor> frozen;  // an adapter's base: its blocks' part sharded too
    for (const torch::Tensor& p : run.model->parameters())
      if (!p.requires_grad()) frozen.push_back(p);
    full->AddFrozen(frozen, BlockOf(*run.model, frozen));
    plan->sharded = full->block_params(static_cast<int64_t>(run.model->blocks().size()));
    full->set_reduce_bf16(cfg.data_parallel.reduce_bf16);
    if (cfg.train.precision != "fp32")  // autocast's dtype: the blocks' projections gathered in it for a step
      full->GatherInDtype(cfg.train.precision == "bf16" ? torch::kBFloat16 : torch::kHalf,
                          hf::CastByAutocast(*run.model, trainable));
    run.full = full.get();
    run.optimizer = std::move(full);
  } else {
    run.optimizer = std::make_unique<FusedAdamW>(trainable, adamw);
  }
}

// What a checkpoint must match to be resumed: seed, batching, data, model.
std::string FingerprintOf(const Run& run) {
  const TrainConfig& cfg = run.cfg;
  const auto shard_text = [](const char* name, const format::ShardReader& s) {
    return std::string(name) + "=" + std::to_string(s.num_samples()) + "/" + std::to_string(s.header().num_tokens) +
           "/" + std::to_string(s.header().payload_checksum);
  };
  const ModelConfig& mc = cfg.model;
  return RunFingerprint(
      cfg.train.seed, cfg.train.batch_size, cfg.train.max_tokens, cfg.train.max_tokens_auto,
      {shard_text("train", run.train_shard), shard_text("val", run.val_shard)},
      "model=" + mc.arch + "/" + Str(mc.layers) + "/" + Str(mc.d_model) + "/" + Str(mc.heads) + "/" +
          Str(mc.ffn) + "/" + Str(mc.max_len) + "/" + Str(cfg.data.vocab_size) + "/" + Str(cfg.data.num_classes) +
          // gpt_lm became GPT-2 (tied head, tanh GELU): its earlier checkpoints do not fit
          (mc.arch == "gpt_lm" ? "/gpt2" : "") + (mc.arch == "pretrained" ? "/" + mc.pretrained : "") + (mc.pooling == "mean" ? "/mean" : "") +
          (mc.adapter.type.empty() ? "" : "/lora-" + Str(mc.adapter.r) + "-" + mc.adapter.init_from) +
          (mc.base_precision.empty() || mc.base_precision == "fp32" ? "" : "/base-" + mc.base_precision));
}

// The model on its device (before the optimizer sees its parameters), the optimizer, the
// checkpoint manager, and the fingerprint a checkpoint must match to be resumed.
void BuildModel(Run& run) {
  const TrainConfig& cfg = run.cfg;
  // The build seeds the process-wide generator and draws from it to its end: ranks that
  // share a process (threads, in tests) take turns, or their draws would interleave.
  static std::mutex generator;
  std::lock_guard<std::mutex> draws(generator);
  torch::manual_seed(cfg.train.seed);
  SetDropoutStream(static_cast<uint64_t>(run.rank.rank));  // ranks draw different dropout masks
  hf::DeferredWeights folder;  // sharding full: the folder's weights, loaded into the shards
  // Sharding full, a model from scratch: built unwritten, its draws made once it is cut
  // into shards as they are (InitAsBuilt), from the generator's state here.
  const bool draw_later = ShardsFully(run) && cfg.model.arch != "pretrained" && cfg.model.arch != "torchscript";
  const std::string build_rng = draw_later ? GetCpuRngState() : std::string();
  if (cfg.model.arch == "pretrained") {
    run.model = hf::JobModel(cfg, /*load_weights=*/true, &run.adapter, ShardsFully(run) ? &folder : nullptr);
  } else {
    std::optional<hf::DeferInit> unwritten;
    if (draw_later) unwritten.emplace();
    run.model = BuildSequenceModel(cfg.model, cfg.data.vocab_size, cfg.data.num_classes, cfg.data.pad_id);
  }
  run.next_token = cfg.model.arch == "gpt_lm" || cfg.data.num_classes == 0;
  run.model->set_activation_checkpointing(cfg.train.checkpoint_every_blocks);
  // Sharding full: built, loaded and cut on the host, then placed (PlaceShardedModel), so
  // the device never holds the whole model.
  if (!ShardsFully(run)) run.model->to(run.device);
  CountParameters(run);
  BuildOptimizer(run);
  if (run.full) {  // cut before anything reads the model: a folder's blocks one at a time as they load
    const auto cut_before = [&](const torch::Tensor& p) { run.full->ShardBefore(p); };
    if (folder.weights) LoadHfWeights(*folder.weights, folder.rules, *run.model, cut_before);
    if (draw_later) {
      SetCpuRngState(build_rng);  // the build's own draws (of 1 x 1 placeholders) undone
      hf::InitAsBuilt(*run.model, cut_before);
    }
    run.full->Shard();
  }
  run.checkpoints = std::make_unique<CheckpointManager>(CheckpointOptions{
      cfg.checkpoint_dir, cfg.checkpoint.every_steps, cfg.checkpoint.every_seconds, cfg.checkpoint.keep_last,
      cfg.attempt});
  run.fingerprint = FingerprintOf(run);
}

// A checkpoint written by another number of ranks: the epoch goes on after the samples
// trained (BatchesDoneOnResize: the deals differ); where no step of every new rank ends
// there, the resume is refused (it would train a sample twice or skip one).
void ToThisWorldSize(const Run& run, RunPosition* p, const std::string& path) {
  const int world_size = run.rank.world_size;
  if (p->world_size > 0 && p->world_size != world_size) {
    BatchPlanOptions options = run.plan_options;
    if (p->max_tokens > 0) options.max_tokens = p->max_tokens;  // what the writer's run planned with
    const int64_t done = BatchesDoneOnResize(run.train_lengths, options, run.cfg.train.seed, p->epoch,
                                             static_cast<int>(p->world_size), p->batch_in_epoch, world_size);
    if (done < 0)
      throw PermanentError("checkpoint " + path + " was written by " + std::to_string(p->world_size) +
                           " ranks after " + std::to_string(p->batch_in_epoch) + " batches each of epoch " +
                           std::to_string(p->epoch) + "; " + std::to_string(world_size) +
                           " ranks cut that epoch's batches so that no batch of each of them ends where those did: "
                           "resume on " + std::to_string(p->world_size) + " ranks (or from a checkpoint at an epoch's end)");
    p->batch_in_epoch = done;
  }
  p->world_size = world_size;
}

// Claims the checkpoint folder for this attempt (its writer), then resumes from the newest
// complete checkpoint of this or an earlier attempt, unless it belongs to another run
// configuration (another seed, batching, data or model cannot continue this run).
// Returns the checkpoint it resumed from; "" when it did not.
std::string Resume(Run& run) {
  if (run.WritesCheckpoints()) run.checkpoints->Claim();  // the writer fences off older attempts
  std::string path;
  if (RunPosition latest; run.checkpoints->PeekLatest(&latest, &path) && !latest.fingerprint.empty() &&
                          latest.fingerprint != run.fingerprint)
    throw PermanentError("checkpoint " + path + " belongs to another run configuration (it has \"" +
                             latest.fingerprint + "\", this run is \"" + run.fingerprint +
                             "\"): resume with the same seed, batching, data and model, or delete " +
                             run.cfg.checkpoint_dir + " to start over");
  bool loaded = false;
  try {
    loaded = run.checkpoints->LoadLatest(*run.model, *run.optimizer, &run.position, &path);
  } catch (const WholeParametersNeeded& e) {  // sharding full from a checkpoint written without
    if (run.full == nullptr) throw;
    Log("%s: loaded whole, then cut", e.what());
    run.full->Reopen();
    loaded = run.checkpoints->LoadLatest(*run.model, *run.optimizer, &run.position, &path);
    run.full->Shard();
  }
  if (!loaded) return "";
  ToThisWorldSize(run, &run.position, path);
  SetCpuRngState(run.position.rng_cpu);  // dropout continues where the saved run was
  SetDeviceRngState(run.device, run.position.rng_device);
  run.nan_guard.Restore(run.position.nan_guard);  // not in a roll-back: its count must stand
  Log("resumed from %s (step %lld)", path.c_str(), static_cast<long long>(run.position.step));
  return path;
}

// A checkpoint's files over the group, from `root` to every rank (sizes, then the bytes).
void BroadcastFiles(ProcessGroup& group, int root, std::map<std::string, std::string>* files) {
  std::string names, blob;
  std::vector<int64_t> sizes;
  for (const auto& [name, bytes] : *files) {
    names += name + '\n';
    sizes.push_back(static_cast<int64_t>(bytes.size()));
    blob += bytes;
  }
  torch::Tensor counts = torch::tensor({static_cast<int64_t>(names.size()), static_cast<int64_t>(blob.size())});
  group.Broadcast(counts, root);
  torch::Tensor name_bytes = torch::zeros({counts[0].item<int64_t>()}, torch::kUInt8);
  torch::Tensor data = torch::zeros({counts[1].item<int64_t>()}, torch::kUInt8);
  if (group.rank() == root) {
    std::memcpy(name_bytes.data_ptr(), names.data(), names.size());
    std::memcpy(data.data_ptr(), blob.data(), blob.size());
  }
  group.Broadcast(name_bytes, root);
  std::vector<std::string> received_names;
  std::string text(static_cast<const char*>(name_bytes.data_ptr()), name_bytes.numel());
  for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
    received_names.push_back(text.substr(at, nl - at));
  torch::Tensor size_tensor = torch::zeros({static_cast<int64_t>(received_names.size())}, torch::kInt64);
  if (group.rank() == root) size_tensor = torch::tensor(sizes);
  group.Broadcast(size_tensor, root);
  group.Broadcast(data, root);
  if (group.rank() == root) return;
  files->clear();
  const char* p = static_cast<const char*>(data.data_ptr());
  for (size_t i = 0; i < received_names.size(); ++i) {
    const int64_t n = size_tensor[i].item<int64_t>();
    (*files)[received_names[i]] = std::string(p, n);
    p += n;
  }
}

// After AdoptNewestCheckpoint sent the newest step from rank `source`: the export.best
// step it names (format::CheckpointManifest::best_step), sent the same way to each writer
// that lacks it, so that rank 0 can export it. Optional: nothing when the source cannot
// read it, and a writer that cannot install it goes on without it (the export then says so).
void SendBestStep(Run& run, int source, const std::string& newest_dir) {
  ProcessGroup& group = run.ddp->group();
  const auto dir_of = [&](int64_t step) { return (fs::path(run.cfg.checkpoint_dir) / format::StepDirName(step)).string(); };
  const auto held = [&](int64_t step) { return format::IsComplete(dir_of(step)); };
  std::map<std::string, std::string> files;
  torch::Tensor best = torch::zeros({1}, torch::kInt64);
  if (format::CheckpointManifest m; group.rank() == source && format::ReadManifest(newest_dir, &m).empty() &&
                                    m.best_step > 0 && held(m.best_step)) {
    try {
      files = ReadCheckpointFiles(dir_of(m.best_step));
      best[0] = m.best_step;
    } catch (const std::exception& e) {
      Log("export.best's step %lld not sent: %s", static_cast<long long>(m.best_step), e.what());
    }
  }
  group.Broadcast(best, source);
  const int64_t step = best[0].item<int64_t>();
  if (step <= 0 || !group.AnyRank(run.WritesCheckpoints() && !held(step))) return;
  BroadcastFiles(group, source, &files);
  if (!run.WritesCheckpoints() || held(step)) return;
  try {
    Log("received export.best's step %lld from rank %d into %s", static_cast<long long>(step), source,
        run.checkpoints->Install(step, files).c_str());
  } catch (const std::exception& e) {
    Log("export.best's step %lld not installed: %s", static_cast<long long>(step), e.what());
  }
}

// Without a shared checkpoint folder the ranks may have resumed from different steps
// (each worker's writer keeps the checkpoints it saved, or one copied to its disk; a new
// worker has none). Every rank learns each one's step; when they differ, the lowest rank
// at the newest step sends that checkpoint's files over the group, each folder's writer
// that lacks it installs it, and every rank resumes from it, so a job survives losing any
// worker but the newest checkpoint's every holder. With a shared folder every rank stands
// at the same step and nothing is sent.
void AdoptNewestCheckpoint(Run& run, std::string* resumed_from) {
  ProcessGroup& group = run.ddp->group();
  torch::Tensor steps = torch::zeros({group.size()}, torch::kInt64);
  steps[group.rank()] = resumed_from->empty() ? -1 : run.position.step;
  group.AllReduceSum(steps);
  const int64_t newest = steps.max().item<int64_t>();
  if (newest < 0 || steps.min().item<int64_t>() == newest) return;
  const int source = static_cast<int>((steps == newest).nonzero()[0][0].item<int64_t>());
  std::map<std::string, std::string> files;
  if (group.rank() == source) files = ReadCheckpointFiles(*resumed_from);
  BroadcastFiles(group, source, &files);
  if (steps[group.rank()].item<int64_t>() != newest && run.WritesCheckpoints()) {
    const std::string installed = run.checkpoints->Install(newest, files);
    Log("received the checkpoint of step %lld from rank %d into %s", static_cast<long long>(newest), source,
        installed.c_str());
  }
  SendBestStep(run, source, group.rank() == source ? *resumed_from : "");
  group.Barrier();  // a folder's other ranks load what its writer installed
  // Every rank loads it, those that had it too: joining copied rank 0's older parameters.
  *resumed_from = Resume(run);
}

// Data parallel (world_size > 1): joins the group; every rank starts from rank 0's
// parameters, or from the newest checkpoint any rank holds, and must then stand where
// rank 0 stands. Gradients are averaged in buckets during backward.
void JoinDataParallel(Run& run, std::string* resumed_from) {
  const bool as_loaded = resumed_from->empty() && run.cfg.model.init_from.empty();  // nothing written into the weights
  run.ddp = StartDataParallel(run.cfg, run.rank, *run.model, as_loaded, run.device);
  if (!run.ddp) return;
  if (run.sharded) run.sharded->set_group(&run.ddp->group());
  if (run.full) run.full->set_group(&run.ddp->group());
  AdoptNewestCheckpoint(run, resumed_from);
  const RunPosition& p = run.position;
  CheckRanksAgree(*run.ddp, {p.step, p.epoch, p.batch_in_epoch, static_cast<int64_t>(run.train_shard.num_samples()),
                             p.max_tokens});
  Log("data parallel: rank %d of %d, %d gradient buckets of up to %d MiB, timeout %d s", run.rank.rank,
      run.rank.world_size, run.ddp->num_buckets(), run.cfg.data_parallel.bucket_mb, run.cfg.data_parallel.timeout_seconds);
}

// Sharding full: the model, cut into this rank's shards on the host (BuildModel), is
// placed on the device: the shards, the resident units, the moments a resume loaded, and
// what no unit holds (an adapter's frozen embeddings, buffers).
void PlaceShardedModel(Run& run) {
  run.full->MoveTo(run.device);
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : run.model->parameters())
    if (p.device() != run.device) p.set_data(p.to(run.device));
  for (torch::Tensor& b : run.model->buffers())
    if (b.device() != run.device) b.set_data(b.to(run.device));
}

// Fault injection (oom_in_backward): the injected out-of-memory error thrown halfway through
// a backward, as the gradient of the middle trainable parameter is computed.
void HookBackwardFault(Run& run) {
  const std::vector<torch::Tensor> trainable = Trainable(run);
  const FaultInjector* faults = &run.faults;
  if (!trainable.empty()) trainable[trainable.size() / 2].register_hook([faults](const torch::Tensor&) { faults->InBackward(); });
}

// Sharding full's lockstep (oom.h) on the run's group.
Lockstep GroupLockstep(ProcessGroup* group) {
  return Lockstep{[group](int64_t n) { return -group->MinOverRanks(-n); }, [group] { return group->issued(); },
                  [group](int64_t n) { group->Skip(n); }, [group] { return group->skipping(); }};
}

// max_tokens: auto, probed once (a resumed run keeps the budget it started with). Under
// data parallelism every rank probes its own device and all take the smallest; with
// sharding full the ranks probe in lockstep (each probe gathers and reduces the blocks as
// a training step does, compute copies too; a rank whose probe ran out of memory inside
// them catches up, as a training step's attempt does: oom.h).
void ChooseTokenBudget(Run& run, bool resumed) {
  const TrainConfig& cfg = run.cfg;
  if (!cfg.train.max_tokens_auto) return;
  if (resumed && run.position.max_tokens > 0) {
    run.plan_options.max_tokens = run.position.max_tokens;
    return;
  }
  const int64_t max_len = cfg.model.max_len;
  const std::string rng = GetCpuRngState();  // the probe must not change dropout's draws
  const std::string device_rng = GetDeviceRngState(run.device);
  NoSync probe_only(run.ddp.get());          // nor reach the other ranks' gradients
  std::unique_ptr<MemoryMeter> meter = NewMemoryMeter(run.device);
  ProbeOptions probe;
  probe.limit_bytes = MemoryLimit(run.device, run.rank.memory_limit_bytes, run.rank.local_world_size);
  probe.max_len = max_len;
  probe.cap_tokens = static_cast<int64_t>(run.train_shard.num_samples()) * max_len;
  if (run.full) probe.agree = [&run](bool yes) { return !run.ddp->AnyRank(!yes); };
  ProbeResult r;
  // Under data parallelism every rank reaches MinOverRanks; in lockstep (full) an error
  // other than running out of memory (or running out again while catching up) leaves the
  // others in the probe's collectives: it ends the run.
  std::string probe_error;
  try {
    const int64_t token = (cfg.data.pad_id + 1) % cfg.data.vocab_size;
    r = ProbeMaxTokens(probe, *meter, [&](int64_t rows) {
      ComputeGathers compute_copies(run.full);
      const auto probe_rows = [&](int64_t n, int64_t len) {
        run.faults.BeforeProbe(n * len);
        run.BatchLossSum(ToDevice(WorstCaseBatch(n, len, token), run.device)).backward();
      };
      const int64_t issued = run.full ? run.ddp->group().issued() : 0;
      try {
        probe_rows(rows, max_len);
        run.faults.AfterProbe(rows * max_len);
      } catch (const std::exception& e) {  // an out-of-memory error too: no gradient, count or sum left behind
        if (!run.full || !IsOutOfMemory(e)) {
          run.ZeroGrad();
          throw;
        }
        // The others are in the blocks' collectives: this rank issues the rest first, on a
        // stand-in of one short row (oom.h).
        CatchUp(GroupLockstep(&run.ddp->group()), run.ddp->group().issued() - issued, "a max_tokens auto probe", [&] {
          run.ZeroGrad();
          ReleaseCachedMemory(run.device);
          probe_rows(1, std::min<int64_t>(max_len, 2));
          run.ZeroGrad();
        });
        throw;
      }
      run.ZeroGrad();
    });
  } catch (const std::exception& e) {
    if (!run.ddp || run.full) throw;
    probe_error = e.what();
  }
  SetCpuRngState(rng);
  SetDeviceRngState(run.device, device_rng);
  run.plan_options.max_tokens = run.ddp ? run.ddp->group().MinOverRanks(r.max_tokens) : r.max_tokens;
  if (run.plan_options.max_tokens <= 0)
    throw std::runtime_error("max_tokens auto: " +
                             (probe_error.empty() ? "the probe failed on another rank" : probe_error));
  Log("max_tokens auto: %lld (this rank: %lld, peak %lld of a %lld-byte target, %d probes)",
      static_cast<long long>(run.plan_options.max_tokens), static_cast<long long>(r.max_tokens),
      static_cast<long long>(r.peak_bytes), static_cast<long long>(r.target_bytes), r.probes);
}

// The number of steps (every epoch's plan, capped by max_steps; the same on every rank)
// and the validation plan.
// export.best and train.early_stopping name a metric this job's evaluation has.
void CheckMetrics(const Run& run) {
  const TrainConfig& cfg = run.cfg;
  for (const auto& [field, metric] : {std::pair<std::string, std::string>{"export.best", cfg.export_best},
                                      {"train.early_stopping.metric", cfg.train.early_stopping.metric}}) {
    if (metric == "val_perplexity" && !run.next_token)
      throw PermanentError(field + ": val_perplexity only for a language model; this job classifies");
    if (metric == "val_f1" && (run.next_token || cfg.data.num_classes != 2))
      throw PermanentError(field + ": val_f1 only for a classifier of two classes");
  }
}

void PlanSteps(Run& run) {
  const TrainConfig& cfg = run.cfg;
  const int64_t k = cfg.train.accumulate_steps;  // batches per step; an epoch's last step takes the rest
  for (int e = 0; e < cfg.train.epochs; ++e)
    run.total_steps +=
        (static_cast<int64_t>(
             PlanEpoch(run.train_lengths, run.plan_options, cfg.train.seed, e, run.rank.rank, run.rank.world_size).size()) +
         k - 1) /
        k;
  if (cfg.train.max_steps > 0) run.total_steps = std::min(run.total_steps, cfg.train.max_steps);
  if (run.total_steps == 0) throw std::runtime_error("no training batches: the train shard is empty");
  if (run.ddp) CheckRanksAgree(*run.ddp, {run.plan_options.max_tokens, run.total_steps});
  run.val_plan = PlanEval(run.val_lengths, run.plan_options);
}

// The techniques the loop calls: fp16's loss scaler, the step's one collective, and
// OOM resilience (a batch that runs out of memory is retried as micro-batches; under
// data parallelism every rank retries when any rank ran out).
void ComposeTechniques(Run& run, bool resumed) {
  GradScalerOptions scaler_options;
  scaler_options.enabled = run.cfg.train.precision == "fp16";
  run.scaler = std::make_unique<GradScaler>(scaler_options);
  if (resumed) run.scaler->Restore(run.position.scaler.scale, run.position.scaler.growth_tracker);
  run.agreement = std::make_unique<StepAgreement>(run.ddp.get());
  OomOptions oom;
  StepAgreement* agreement = run.agreement.get();
  oom.vote = [agreement](bool o, bool u, double loss) { return agreement->Vote(o, u, loss); };
  const torch::Device device = run.device;
  oom.release_memory = [device] { ReleaseCachedMemory(device); };
  if (run.full) oom.lockstep = GroupLockstep(&run.ddp->group());  // a micro-batch's blocks are collectives
  run.micro_batches = std::make_unique<MicroBatchRunner>(std::move(oom));
  // This rank's own where the world size is the writer's; else the smallest any rank kept.
  const std::vector<int64_t>& kept = run.position.micro_batch_tokens;
  if (resumed && kept.size() == static_cast<size_t>(run.rank.world_size)) run.micro_batches->Resume(kept[run.rank.rank]);
  else if (resumed && !kept.empty()) run.micro_batches->Resume(*std::min_element(kept.begin(), kept.end()));
  run.stage_batch = NewBatchStager(run.device);  // runs on the loader's thread
}

// This rank's bytes of model state: every parameter; the gradients of the trainable ones
// (whole until the step, sharded or not); AdamW's two float32 moments of what this rank
// updates (with resources.sharding optimizer, its shard only).
struct ModelStateBytes {
  double parameters = 0, gradients = 0, optimizer_state = 0;
  double total() const { return parameters + gradients + optimizer_state; }
};
ModelStateBytes StateBytes(const Run& run) {
  ModelStateBytes b;
  for (const torch::Tensor& p : run.model->parameters()) {
    b.parameters += double(p.numel()) * double(p.element_size());
    if (p.requires_grad()) b.gradients += 4.0 * double(p.numel());
  }
  b.optimizer_state = run.sharded ? double(run.sharded->state_bytes()) : 2 * b.gradients;
  // Unsharded data parallelism also holds a flat copy of every gradient, all-reduced in
  // place (GradientSync's buckets, allocated at the first backward).
  if (run.ddp) b.gradients += double(run.ddp->bucket_bytes());
  if (run.full) {  // the trainable tensors: shards, resident units whole, and two blocks at a time
    // (parameters: one computing, the next being gathered, as compute copies under AMP;
    // gradients: one accumulating, the one before being reduce-scattered in float32)
    const double whole = b.gradients, kept = double(run.full->shard_bytes() + run.full->resident_bytes());
    b.parameters += kept + 2.0 * double(run.full->largest_gathered_bytes()) - whole;
    b.gradients = kept + 2.0 * double(run.full->largest_block_bytes());
    b.optimizer_state = double(run.full->state_bytes());
    // An adapter's frozen base in the blocks: its shards, and up to two blocks whole
    // (fully_sharded.h)
    const FullyShardedAdamW::FrozenBytes frozen = run.full->frozen_bytes();
    b.parameters += double(frozen.held - frozen.whole);
    if (run.full->holds_gradients()) b.gradients += double(run.full->held_bytes());
  }
  return b;
}

std::string GiB(double bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GiB", bytes / double(int64_t{1} << 30));
  return text;
}

// --memory-limit, else the RLIMIT_DATA its worker set from resources.memory_gb; 0: none.
int64_t RankMemoryLimit(const Run& run) {
  int64_t limit = run.rank.memory_limit_bytes;
  if (struct rlimit rl; limit <= 0 && getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    limit = static_cast<int64_t>(rl.rlim_cur);
  return limit;
}

// On the CPU, before the first step allocates gradients and AdamW's moments: a rank whose
// parameters, gradients and optimizer state alone exceed its memory limit (--memory-limit,
// else the RLIMIT_DATA its worker set from resources.memory_gb) fails now, naming the
// limit and what sharding would need, instead of running out of memory at the first step.
// Under data parallelism every rank fails when one does (the others would wait for it).
void CheckModelStateFits(Run& run) {
  const int64_t limit = RankMemoryLimit(run);
  const ModelStateBytes b = StateBytes(run);
  const bool fits = !run.device.is_cpu() || limit <= 0 || b.total() <= double(limit);
  if (run.ddp ? !run.ddp->AnyRank(!fits) : fits) return;
  if (fits)
    throw PermanentError("resources.memory_gb: another rank's parameters, gradients and AdamW state exceed its limit");
  const int world = run.rank.world_size;
  // Sharded, the buckets go too (the gradients are reduce-scattered at the step).
  const double sharded = b.total() - b.optimizer_state * (1.0 - 1.0 / world) - double(run.ddp ? run.ddp->bucket_bytes() : 0);
  std::string hint = world > 1 && !run.sharded && !run.full
                         ? "; with resources.sharding: optimizer each of the " + std::to_string(world) +
                               " ranks would keep " + GiB(b.optimizer_state / world) + " of optimizer state instead, " +
                               GiB(sharded) + " in all"
                         : "";
  if (run.full && run.full->holds_gradients())  // forced, or auto's choice kept from the run's start
    hint = "; with resources.accumulate_gradients: sharded it would not hold the blocks' gradients whole between "
           "micro-batches (" + GiB(double(run.full->held_bytes())) + " of them), " +
           GiB(b.total() - double(run.full->held_bytes())) + " in all";
  throw PermanentError("resources.memory_gb: rank " + std::to_string(run.rank.rank) + " needs " + GiB(b.total()) +
                       " for its parameters (" + GiB(b.parameters) + "), their gradients (" + GiB(b.gradients) +
                       ") and AdamW's state (" + GiB(b.optimizer_state) + ") before any activation, more than its " +
                       GiB(double(limit)) + " limit" + hint);
}

// resources.accumulate_gradients under sharding full with accumulation: the blocks'
// gradients summed whole between a step's micro-batches (fully_sharded.h), forced, or
// (auto) where this rank's memory (its limit, else what the device or host has for it)
// holds its model state and that sum with half of it left; every rank the same way (a
// rank that reduced each micro-batch would meet the others' last reductions instead). A
// resumed run keeps auto's choice (the position's): the same order of sums.
void ChooseGradientAccumulation(Run& run, bool resumed) {
  const std::string& mode = run.cfg.data_parallel.accumulate_gradients;
  if (!run.full || run.cfg.train.accumulate_steps < 2 || mode == "sharded") return;
  bool whole = mode == "whole";
  if (mode == "auto" && resumed && !run.position.accumulate_gradients.empty()) {
    whole = run.position.accumulate_gradients == "whole";  // as the run began
  } else if (mode == "auto") {
    const double need = StateBytes(run).total() + double(run.full->held_bytes());
    const double limit = double(MemoryLimit(
        run.device, run.device.is_cpu() ? RankMemoryLimit(run) : run.rank.memory_limit_bytes, run.rank.local_world_size));
    whole = need <= 0.5 * limit;
    if (run.ddp) whole = !run.ddp->AnyRank(!whole);
  }
  run.position.accumulate_gradients = whole ? "whole" : "sharded";
  if (!whole) return;
  run.full->HoldGradients();
  Log("sharding full: the blocks' gradients summed whole over the %d micro-batches of a step (%s; %s of them)",
      run.cfg.train.accumulate_steps, mode.c_str(), GiB(double(run.full->held_bytes())).c_str());
}

void EmitStart(Run& run, const std::vector<std::string>& warnings) {
  const TrainConfig& cfg = run.cfg;
  const double train_samples = double(run.train_shard.num_samples()), val_samples = double(run.val_shard.num_samples());
  const ModelStateBytes bytes = StateBytes(run);
  run.progress.Emit(ProgressRecord{
      "start",
      {{"world_size", run.rank.world_size}, {"rank", run.rank.rank}, {"resumed_step", double(run.position.step)},
       {"num_parameters", double(run.num_parameters)}, {"train_samples", train_samples},
       {"val_samples", val_samples}, {"total_steps", double(run.total_steps)},
       {"blas_gflops", run.blas_gflops}, {"threads", run.threads}, {"peak_flops", run.peak_flops},
       {"non_embedding_parameters", double(run.non_embedding_parameters)},
       {"max_tokens", double(run.plan_options.max_tokens)}, {"batch_size", double(run.plan_options.batch_size)},
       {"parameter_bytes", bytes.parameters}, {"gradient_bytes", bytes.gradients},
       {"optimizer_state_bytes", bytes.optimizer_state},
       // the host's peak resident set so far: building, loading, cutting and resuming the model
       {"host_peak_bytes", double(std::max<int64_t>(0, ProcBytes("/proc/self/status", "VmHWM:")))}},
      {{"device", run.device.str()}, {"job_id", cfg.job_id}, {"torch_version", compat::TorchVersion()}}});
  for (const std::string& w : warnings) Warn(run.progress, w);
  Log("job %s attempt %d: %lld parameters, %.0f train / %.0f val samples, %lld steps, %d threads, BLAS %.1f GFLOP/s",
      cfg.job_id.c_str(), cfg.attempt, static_cast<long long>(run.num_parameters), train_samples, val_samples,
      static_cast<long long>(run.total_steps), run.threads, run.blas_gflops);
}

}  // namespace

std::unique_ptr<Run> BuildRun(const TrainConfig& cfg, const RankInfo& rank, ProgressSink& progress) {
  auto run = std::make_unique<Run>(cfg, rank, progress);
  const std::vector<std::string> warnings = SetUpDevice(*run);
  OpenData(*run);
  BuildModel(*run);
  std::string resumed_from = Resume(*run);
  if (resumed_from.empty() && !cfg.model.init_from.empty()) {  // a resumed run has its own weights
    std::function<void(const torch::Tensor&)> reopen;  // sharding full: written a block at a time
    if (run->full) reopen = [&](const torch::Tensor& p) { run->full->ReopenFor(p); };
    InitFromExport(cfg.model.init_from, cfg, *run->model, reopen);
    if (run->full) run->full->EndReopen();
    Log("initialised from %s", cfg.model.init_from.c_str());
  }
  JoinDataParallel(*run, &resumed_from);
  if (run->full) PlaceShardedModel(*run);  // from here on each rank's shards are on its device
  const bool resumed = !resumed_from.empty();
  ChooseGradientAccumulation(*run, resumed);
  CheckModelStateFits(*run);
  if (run->faults.oom_in_backward()) HookBackwardFault(*run);
  ChooseTokenBudget(*run, resumed);
  CheckMetrics(*run);
  PlanSteps(*run);
  ComposeTechniques(*run, resumed);
  run->position.max_tokens = run->plan_options.max_tokens;
  run->seconds_before_ = run->position.train_seconds;
  run->last_saved_step_ = resumed ? run->position.step : -1;
  EmitStart(*run, warnings);
  return run;
}

Run::Run(const TrainConfig& c, const RankInfo& r, ProgressSink& p)
    : cfg(c), rank(r), progress(p), faults(r.faults) {}

void Run::Export(const std::function<void(const torch::Tensor&)>& before) {
  const auto t0 = Clock::now();
  ExportInfo info;
  info.job_id = cfg.job_id;
  info.step = position.step;
  info.metrics = {{"val_loss", last_eval.loss}, {"val_accuracy", last_eval.accuracy},
                  {"val_f1", last_eval.f1}, {"val_perplexity", last_eval.perplexity}};
  if (position.best_step >= 0) {  // export.best: the model is that step's
    info.step = position.best_step;
    info.metrics = {{cfg.export_best, position.best_metric}};
  }
  info.tokenizer_model = TokenizerOf(cfg);
  const std::string dir = cfg.checkpoint_dir + "/model";
  checkpoints->CheckFence();  // a superseded attempt does not replace the model either
  if (cfg.model.adapter.type.empty()) {
    ExportModel(dir, cfg, *model, info, before);
  } else {  // the adapter alone, as PEFT saves one, for PeftModel.from_pretrained(base, dir)
    ExportJobAdapter(dir, cfg, *model, adapter);
    if (cfg.export_merge) {  // the run is over: the adapter can go into the weights in place
      hf::CastFrozenBase(*model, torch::kFloat32);  // a half-precision base merges in float32
      hf::MergeLora(*model);
      ExportModel(cfg.checkpoint_dir + "/model-merged", cfg, *model, info);
      Log("exported the merged model to %s/model-merged", cfg.checkpoint_dir.c_str());
    }
  }
  progress.Emit(ProgressRecord{"export", {{"step", double(info.step)}, {"seconds", Seconds(t0)}}, {{"path", dir}}});
  Log("exported the model to %s", dir.c_str());
}

double Run::TrainSeconds() const { return seconds_before_ + Seconds(started_); }

void Run::OpenEpoch() {
  loader_.reset();  // it reads epoch_plan_
  epoch_plan_ = PlanEpoch(train_lengths, plan_options, cfg.train.seed, position.epoch, rank.rank, rank.world_size);
  loader_ = std::make_unique<BatchPrefetcher>(train_shard, epoch_plan_, static_cast<size_t>(position.batch_in_epoch),
                                              cfg.model.max_len, cfg.data.pad_id, cfg.train.prefetch, stage_batch,
                                              plan_options.pack_len > 0);
}

bool Run::WritesCheckpoints() const {
  return cfg.checkpoint_dir_shared ? rank.rank == 0 : rank.local_rank == 0;
}

double Run::SetLearningRate() {
  const double lr =
      position.lr_scale * LearningRate(cfg.train.schedule, position.lr_steps, cfg.train.warmup_steps, total_steps, cfg.train.lr);
  for (auto& group : optimizer->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  return lr;
}

StepIntent Run::Intent() const {
  const int64_t next = position.step + 1;
  return StepIntent{faults.PoisonsLoss(next), StopRequested(), WritesCheckpoints() && checkpoints->Due(next)};
}

torch::Tensor Run::BatchLossSum(const Batch& b) {
  AutocastRegion autocast(cfg.train.precision, device);
  return next_token ? NextTokenLossSum(*model, b).sum : ComputeLossSum(Logits(*model, b), b, false).sum;
}

StepBatches Run::NextBatches(double* wait_seconds) {
  StepBatches step;
  *wait_seconds = 0;
  const int64_t left = static_cast<int64_t>(epoch_plan_.size()) - position.batch_in_epoch;
  for (int64_t i = 0; i < std::min<int64_t>(cfg.train.accumulate_steps, left); ++i) {
    double wait = 0;
    step.batches.push_back(loader_->Next(&wait));
    *wait_seconds += wait;
    step.real_tokens += step.batches.back().real_tokens;
    step.padded_tokens += step.batches.back().padded_tokens;
    step.samples += step.batches.back().samples;
  }
  return step;
}

MicroBatchResult Run::ForwardBackward(const StepBatches& step) {
  model->train();
  // Each micro-batch's loss is its share of the whole step's mean (loss_count: the
  // samples or predicted tokens of all its batches, as transformers normalises an
  // accumulated step); only the last one's backward all-reduces.
  // Under data parallelism the count is every rank's (one all-reduce of a number, as
  // transformers gathers num_items_in_batch), and the loss is multiplied by the world size
  // that the gradient average divides by again: the step is the gradient of the mean over
  // every sample or token of the step on all ranks, whatever each rank's share, so any
  // split of the same global batch (ranks x accumulate_steps) takes the same step.
  double loss_count = 0;
  for (const Batch& batch : step.batches) loss_count += double(LossCount(batch, next_token));
  if (ddp) loss_count = ddp->group().SumOverRanks(loss_count) / ddp->group().size();  // times world_size
  ComputeGathers compute_copies(full);
  const MicroBatchResult fb = micro_batches->Run(
      step.batches,
      [&](const Batch& micro, bool last, bool stand_in) {
        faults.BeforeMicroBatch(micro.padded_tokens);
        NoSync accumulate_only(last ? nullptr : ddp.get());
        if (full) full->set_holding(!last);  // summed whole until the last, where held
        torch::Tensor loss = BatchLossSum(micro) / loss_count;
        if (stand_in) loss = loss * 0;  // keeps this rank in its blocks' collectives, adding nothing
        scaler->Scale(loss).backward();
        return loss.item<double>();
      },
      [&] { ZeroGrad(); });
  oom_recoveries += fb.oom_recoveries;
  stand_ins += fb.stand_ins;
  // On a GPU always: a dropout mask advances the CUDA generator by an amount that grows
  // with the tensor's size, so ranks with batches of other shapes drift apart (on the CPU
  // our Dropout draws one seed a mask, whatever its size: models/dropout.h).
  if (ddp && (micro_batches->micro_batch_tokens() > 0 || device.is_cuda())) AgreeGenerators();
  return fb;
}

void Run::AgreeGenerators() {
  const std::string cpu = GetCpuRngState(), accelerator = GetDeviceRngState(device);  // sizes alike on every rank
  torch::Tensor bytes = torch::empty({static_cast<int64_t>(cpu.size() + accelerator.size())}, torch::kUInt8);
  char* b = static_cast<char*>(bytes.data_ptr());
  std::memcpy(b, cpu.data(), cpu.size());
  std::memcpy(b + cpu.size(), accelerator.data(), accelerator.size());
  ddp->group().Broadcast(bytes);  // in place
  SetCpuRngState(std::string(b, cpu.size()));
  SetDeviceRngState(device, std::string(b + cpu.size(), accelerator.size()));
}

std::vector<int64_t> Run::MicroBatchTokensOfRanks() {
  if (micro_batches->micro_batch_tokens() == 0) return {};  // every rank's is 0 (oom.h)
  torch::Tensor all = torch::zeros({rank.world_size}, torch::kLong);
  all[rank.rank] = micro_batches->micro_batch_tokens();
  if (ddp) ddp->group().AllReduceSum(all);
  const int64_t* t = all.data_ptr<int64_t>();
  return std::vector<int64_t>(t, t + all.numel());
}

void Run::ZeroGrad() {
  // sharding full: a block's reduction still under way (a skipped step never reduced its
  // last block) would add its gradients to the next step's: ended here, then cleared.
  if (full) {
    full->Settle();
    full->DropAccumulated();
  }
  model->zero_grad();  // a sharded optimizer's own gradients are its pieces'
  optimizer->zero_grad();
}

void Run::ClipAndStep() {
  if (sharded) sharded->ReduceGradients();  // from here on this rank's shard holds the gradients
  if (full) full->ReduceGradients();
  const bool cut = sharded || full;
  const std::vector<torch::Tensor> stepped = sharded ? sharded->pieces() : full ? full->shards() : model->parameters();
  if (scaler->enabled()) {
    bool grads_finite = scaler->UnscaleAndCheckFinite(stepped);
    if (cut) grads_finite = !ddp->AnyRank(!grads_finite);
    scaler->Update(!grads_finite);
    if (!grads_finite) {
      nan_guard.CountSkipped();
      return;
    }
  }
  if (cfg.train.grad_clip > 0)
    ClipGradNorm(stepped, cfg.train.grad_clip,
                 cut ? [this](double local) { return ddp->group().SumOverRanks(local); } : std::function<double(double)>());
  optimizer->step();
  ++position.lr_steps;
}

void Run::Advance(const StepBatches& step) {
  ++position.step;
  position.batch_in_epoch += static_cast<int64_t>(step.batches.size());
  position.tokens_seen += step.real_tokens;
}

bool Run::AwaitJudgement(bool epoch_end) {
  const int64_t step = position.step;
  const std::vector<int64_t>& rungs = epoch_end ? cfg.await_epochs : cfg.await_steps;
  if (!std::binary_search(rungs.begin(), rungs.end(), epoch_end ? position.epoch : step) || step >= total_steps ||
      !stop_early.empty())  // ends here anyway, exported as an early stop
    return false;
  const auto judged = [&] {
    std::ifstream in(cfg.judged_file);
    int64_t through = 0;
    return in >> through && through >= step;
  };
  // Ranks whose waits end differently (one judged, one stopped or out of time) meet in the
  // collective below: the longest a rank waits there must stay under the group's timeout.
  const int seconds = ddp ? std::min(cfg.await_seconds, cfg.data_parallel.timeout_seconds / 2) : cfg.await_seconds;
  const auto deadline = Clock::now() + std::chrono::seconds(seconds);
  while (!StopRequested() && !judged() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!StopRequested() && !judged())
    Warn(progress, "no judgement of the evaluation at step " + std::to_string(step) + " within " +
                       std::to_string(seconds) + " s: going on");
  const bool stop = ddp ? ddp->group().SumOverRanks(StopRequested() ? 1.0 : 0.0) > 0 : StopRequested();
  if (stop) SaveCheckpoint();
  return stop;
}

namespace {

// A roll-back load's failure as the ranks vote it (the lowest wins): -4 permanent, -3 out
// of memory, -2 any other; -1 is nothing to load.
int64_t FailureVote(const std::exception_ptr& failed) {
  try {
    std::rethrow_exception(failed);
  } catch (const PermanentError&) {
    return -4;
  } catch (const std::exception& e) {
    return IsOutOfMemory(e) ? -3 : -2;
  } catch (...) {
    return -2;
  }
}

}  // namespace

void Run::RollBack() {
  const std::string times = std::to_string(nan_guard.max_consecutive());
  std::string path;
  std::exception_ptr failed;  // this rank's load threw: data parallel, rethrown after the vote
  bool loaded = false, whole = false;
  const auto load = [&] {
    loaded = false;
    try {
      loaded = checkpoints->LoadLatest(*model, *optimizer, &position, &path);
    } catch (const WholeParametersNeeded& e) {  // sharding full, a checkpoint written unsharded
      if (whole) throw;
      Log("%s", e.what());
      whole = true;
    } catch (...) {
      if (!ddp) throw;
      failed = std::current_exception();
    }
  };
  load();  // sharding full: each rank reads its shards, no block gathered
  // Every rank loads whole if one must (its copy of the newest checkpoint may be damaged,
  // and the one before it unsharded), so that all load the same checkpoint the same way.
  if (full && ddp) whole = ddp->group().SumOverRanks(whole ? 1.0 : 0.0) > 0;
  std::string gathered;
  if (whole && !failed) {  // no gather: the load writes every block whole (Reopen), Shard() cuts them again
    gathered = " (written without sharding full: loaded whole on each rank, then cut again)";
    full->Reopen();
    load();
  }
  // Data parallel, every rank votes before any throws (FailureVote). Folders per worker: a
  // rank whose newest copy is damaged loaded an older step; the ranks must stand at one,
  // and a restart puts them there (AdoptNewestCheckpoint). The others fail as the failed
  // rank does (permanent, out of memory), whichever exits first.
  const int64_t at = failed ? FailureVote(failed) : loaded ? position.step : -1;
  const int64_t lowest = ddp ? ddp->group().MinOverRanks(at) : at;
  if (ddp && ddp->AnyRank(lowest != at)) {
    if (failed) std::rethrow_exception(failed);
    const std::string another = "rolling back, another rank could not load its checkpoint";
    if (lowest == -4) throw PermanentError(another + ", and no restart can (its log says why)");
    if (lowest == -3) throw std::runtime_error(another + ": out of memory (its log says more)");
    if (lowest == -2) throw std::runtime_error(another + " (its log says why)");
    throw std::runtime_error("rolling back, the ranks loaded checkpoints of different steps (this rank: " +
                             (path.empty() ? std::string("none") : path) +
                             "): a damaged copy on one worker; the restart resumes every rank from the newest");
  }
  if (failed) std::rethrow_exception(failed);  // every rank's load failed
  if (!loaded)
    throw std::runtime_error("the loss was not finite for " + times +
                             " steps in a row and there is no checkpoint to roll back to; lower "
                             "spec.train.lr or use precision fp32");
  last_saved_step_ = position.step;  // a newer one (damaged, or a later save) is written again
  ToThisWorldSize(*this, &position, path);
  if (full) full->Shard();
  SetCpuRngState(position.rng_cpu);
  SetDeviceRngState(device, position.rng_device);
  scaler->Restore(position.scaler.scale, position.scaler.growth_tracker);  // fp16's, as at that step
  position.lr_scale *= 0.5;
  Warn(progress, "the loss was not finite for " + times + " steps in a row: rolled back to " + path + gathered +
                     " and halved the learning rate");
}

bool Run::CatchUp() {
  StopIfPatienceRanOut();  // an early stop whose export was cut short
  if (!stop_early.empty() || position.step == 0 || !EvalDue() || position.evaluated_step == position.step)
    return false;
  Evaluate();
  return AwaitJudgement();
}

void Run::SaveCheckpoint() {
  if (last_saved_step_ == position.step) return;  // the same ranks saw the same steps: all return
  if (ddp) ddp->group().Barrier();  // every rank is done with this step; the writers write
  last_saved_step_ = position.step;
  position.micro_batch_tokens = MicroBatchTokensOfRanks();
  if (!WritesCheckpoints()) {  // full: the blocks' values travel in the shards, never gathered
    if (auto* cut = dynamic_cast<ShardedOptimizerState*>(optimizer.get()))
      cut->ExchangeShards(nullptr);  // the writers' Save receives them
    return;
  }
  position.rng_cpu = GetCpuRngState();
  position.rng_device = GetDeviceRngState(device);
  position.scaler = ScalerState{scaler->scale(), scaler->growth_tracker()};
  position.nan_guard = nan_guard.state();
  position.train_seconds = TrainSeconds();
  position.fingerprint = fingerprint;
  position.world_size = rank.world_size;
  checkpoints->Keep(position.best_step);  // export.best's checkpoint outlives keep_last
  const SavedCheckpoint saved = checkpoints->Save(position, *model, *optimizer);
  progress.Emit(ProgressRecord{
      "checkpoint",
      {{"step", double(position.step)}, {"bytes", double(saved.bytes)}, {"seconds", saved.seconds}},
      {{"path", saved.path}}});
  Log("checkpoint step %lld: %s (%lld bytes, %.2f s)", static_cast<long long>(position.step), saved.path.c_str(),
      static_cast<long long>(saved.bytes), saved.seconds);
}

void Run::Evaluate(bool track) {
  last_eval = trainer::Evaluate(*model, val_shard, val_plan, cfg.model.max_len, cfg.data.pad_id,
                                cfg.data.num_classes, next_token, ddp ? &ddp->group() : nullptr, full != nullptr);
  last_eval_step_ = position.step;
  position.evaluated_step = position.step;
  progress.Emit(ProgressRecord{"eval",
                               {{"step", double(position.step)}, {"epoch", double(position.epoch)},
                                {"val_loss", last_eval.loss}, {"val_accuracy", last_eval.accuracy},
                                {"val_f1", last_eval.f1}, {"val_perplexity", last_eval.perplexity}},
                               {}});
  Log("eval step %lld epoch %lld: val_loss %.4f val_accuracy %.4f val_f1 %.4f",
      static_cast<long long>(position.step), static_cast<long long>(position.epoch), last_eval.loss,
      last_eval.accuracy, last_eval.f1);
  if (!track) return;
  TrackEarlyStopping();  // first: a new best saves at once (TrackBest), with this count
  TrackBest();
}

void Run::TrackBest() {
  if (cfg.export_best.empty()) return;
  const double v = MetricValue(last_eval, cfg.export_best);
  if (position.best_step >= 0 && !Better(cfg.export_best, v, position.best_metric)) return;
  position.best_step = position.step;
  position.best_metric = v;
  SaveCheckpoint();  // the model export.best will export
}

// As transformers' EarlyStoppingCallback: an evaluation better than the best so far by
// more than min_delta resets the count, any other adds one; the best moves on any gain.
void Run::TrackEarlyStopping() {
  const auto& es = cfg.train.early_stopping;
  if (es.metric.empty()) return;
  const double v = MetricValue(last_eval, es.metric);
  if (!position.has_stop_best ||
      (Better(es.metric, v, position.stop_best) && std::abs(v - position.stop_best) > es.min_delta))
    position.evals_without_improvement = 0;
  else
    ++position.evals_without_improvement;
  if (!position.has_stop_best || Better(es.metric, v, position.stop_best)) position.stop_best = v;
  position.has_stop_best = true;
  StopIfPatienceRanOut();
}

void Run::StopIfPatienceRanOut() {
  const auto& es = cfg.train.early_stopping;
  if (es.metric.empty() || !position.has_stop_best || position.evals_without_improvement < es.patience) return;
  char text[256];
  std::snprintf(text, sizeof text,
                "early stopping at step %lld: %s has not improved on its best (%.6g) by more than %g for %lld "
                "evaluations (train.early_stopping.patience %d)",
                static_cast<long long>(position.step), es.metric.c_str(), position.stop_best, es.min_delta,
                static_cast<long long>(position.evals_without_improvement), es.patience);
  stop_early = text;
}

void Run::Finish() {
  // Resumed at the last step (an export cut short): evaluated again for the export's
  // metrics, not counted again (early stopping would count it twice).
  if (last_eval_step_ != position.step) Evaluate(/*track=*/position.evaluated_step != position.step);
  SaveCheckpoint();
  const bool best_elsewhere = position.best_step >= 0 && position.best_step != position.step;
  // Sharding full: the model is exported a block at a time, rank 0 writing each block the
  // walk gathers, the others taking part in the same gathers. Another step's model
  // (export.best) and an adapter's export are read whole: gathered on rank 0.
  const bool walk = full && !best_elsewhere && cfg.model.adapter.type.empty();
  if (full && !walk) full->Unshard(/*only_rank=*/0);
  if (!stop_early.empty()) Warn(progress, stop_early);
  if (rank.rank == 0) {
    if (best_elsewhere) {
      try {
        // export.best: the best evaluated step's model (its checkpoint was kept for this).
        checkpoints->LoadModelAt(position.best_step, *model);
        Log("export.best: exporting step %lld (%s %.6g)", static_cast<long long>(position.best_step),
            cfg.export_best.c_str(), position.best_metric);
      } catch (const std::exception& e) {
        if (IsOutOfMemory(e)) throw;
        // Not here (the run resumed on a worker that could not fetch it with the newest
        // step: worker/checkpoint_copy.h), or unreadable. As
        // transformers' Trainer when the best checkpoint is gone: the final model (the step
        // just saved, read again: a failed load may have written part of the model), said
        // in a warning and in the export's step and metrics.
        Warn(progress, "export.best: the checkpoint of the best step (" + std::to_string(position.best_step) + ", " +
                           cfg.export_best + " " + std::to_string(position.best_metric) + ") cannot be read here (" +
                           std::string(e.what()).substr(0, 300) + "); exporting the final model (step " +
                           std::to_string(position.step) + ")");
        checkpoints->LoadModelAt(position.step, *model);
        position.best_step = -1;  // Export describes the model it exports
      }
    }
    if (walk) {
      try {
        Export([this](const torch::Tensor& p) { full->GatherFor(p); });
      } catch (...) {  // the other ranks are in the walk's gathers: end them, then fail
        try {
          full->EndWalk();
        } catch (...) {
        }
        throw;
      }
    } else {
      Export();
    }
  }
  if (walk) {
    full->EndWalk();
    // NCCL's waits only order the stream: no rank leaves (and tears its communicator
    // down) before rank 0 has taken its part of every gather.
    ddp->group().Barrier();
  }
  progress.Emit(ProgressRecord{"done",
                               {{"step", double(position.step)}, {"val_loss", last_eval.loss},
                                {"val_accuracy", last_eval.accuracy}, {"val_f1", last_eval.f1},
                                {"val_perplexity", last_eval.perplexity}, {"train_seconds", TrainSeconds()}},
                               {{"stop_reason", stop_early}}});
  Log("done at step %lld: val_accuracy %.4f, %.1f s", static_cast<long long>(position.step), last_eval.accuracy,
      TrainSeconds());
}

}  // namespace nightshift::trainer
