// Checkpoints: one directory per saved step, step-00000123/, holding
//   model.pt       the model's parameters and buffers (torch::serialize archive); for a
//                  model with frozen parameters (an adapter on its base), only the
//                  parameters that train, the base being read from its folder again;
//                  with sharding full, not the blocks' parameters (their values are in
//                  the optimizer's shard files, ShardedOptimizerState::ParametersInShards)
//   optimizer.pt   the optimizer state (its options, e.g. lr, are rebuilt, not loaded);
//                  with resources.sharding optimizer, instead one file per rank
//                  (optimizer_shards.h), read back by any number of ranks
//   manifest.json  common/format/checkpoint_manifest.h: the RunPosition (position.h;
//                  rng_cpu and rng_device as hex), the run's fingerprint, the attempt, and every
//                  file's size and FNV-1a 64, checked before a load
//   COMPLETE       written last: a checkpoint without it does not exist.
// Every file is written to a temporary name, fsynced and renamed. A save (or an install
// of a received checkpoint) writes them into a staging folder of its attempt's own
// (.staging-step-00000123.attempt4), then renames that, complete, onto the step's folder:
// an attempt never writes into a step folder another attempt may be reading or
// committing. Deletion mirrors writing: the marker goes first, then the rest.
//
// Fencing (CheckpointOptions::attempt >= 0). The job's folder holds FENCE, the number of
// the newest attempt that claimed it (Claim, before training). An attempt commits a
// checkpoint (writes COMPLETE), prunes, and exports only while FENCE holds no later
// attempt than its own; otherwise it throws FencedError ("fenced by attempt N") and
// leaves no marker.
// Loads skip checkpoints written by a later attempt than this one, and neither Prune nor
// a save of the same step deletes them (a save checks the fence before it writes and
// again, with the step folder's writer, before its rename). What this guarantees: on a local disk (one writer process per folder at
// a time) nothing; it is there for a shared checkpoint root, where a cut-off attempt
// (the "zombie") keeps running beside its successor. There, once the new attempt's claim
// is visible, the old one commits nothing more; a zombie that wakes in the middle of a
// save finds its staging folder removed (the successor's Prune) or the fence, and fails.
// The window: the check and the rename are two steps, so an old attempt that read FENCE
// just before the claim can still commit one checkpoint (and prune) after it. Such a checkpoint is of the same run
// (same fingerprint, deterministic training), so resuming from it is still exact.
// Versions: 2 is written; 1 (step, epoch, batch_in_epoch, rng_cpu and a "metrics" map of
// train_seconds, tokens_seen, lr_scale, max_tokens, grad_scale, grad_scale_growth_tracker
// at the top level) is still read. Any other version is refused naming it
// (CheckpointVersionError), never skipped for an older checkpoint.
#ifndef NIGHTSHIFT_WORKER_TRAINER_CHECKPOINT_CHECKPOINT_H_
#define NIGHTSHIFT_WORKER_TRAINER_CHECKPOINT_CHECKPOINT_H_

#include <torch/torch.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/format/checkpoint_manifest.h"
#include "worker/trainer/errors.h"
#include "worker/trainer/position.h"

namespace nightshift::trainer {

// A checkpoint whose manifest version this trainer does not read. Not damage: resuming
// from an older checkpoint instead would silently drop the newer one's steps.
class CheckpointVersionError : public PermanentError {
 public:
  using PermanentError::PermanentError;
};

// A load into an optimizer whose ParametersInShards are freed (sharding full between steps)
// of a checkpoint that holds their values whole in model.pt (written without sharding
// full): the caller gathers them (FullyShardedAdamW::Unshard) and loads again. Not damage.
class WholeParametersNeeded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// This attempt was superseded: a later attempt claimed the checkpoint folder.
class FencedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An optimizer whose state is cut across the ranks (parallel/sharded_adamw.h) is this as
// well; Save and the loads then go through it instead of optimizer.pt.
class ShardedOptimizerState {
 public:
  // Receives each rank's shard file, in rank order, a piece at a time.
  class ShardSink {
   public:
    virtual ~ShardSink() = default;
    virtual void Open(const std::string& file) = 0;
    virtual void Append(const char* data, size_t n) = 0;
    virtual void Close() = 0;
  };
  virtual ~ShardedOptimizerState() = default;
  // A collective: every rank calls it at the same point (the writers from Save, with a
  // sink; the others with null), and every rank's shard file goes to every sink.
  virtual void ExchangeShards(ShardSink* sink) = 0;
  // Loads this rank's state from the checkpoint in `dir`: from `shards`, its manifest's
  // shard files (written by any number of ranks), or, when there are none, from an
  // unsharded run's optimizer.pt. With `value_ranges` (ranges of the flat layout,
  // optimizer_shards.h: parameters model.pt left out), returns their values too, in
  // order, read in the same pass over the shard files (a sharding-full checkpoint resumed
  // with sharding optimizer, or while the blocks are whole).
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  virtual std::vector<torch::Tensor> LoadShards(const std::string& dir, const std::vector<std::string>& shards,
                                                const Ranges& value_ranges) = 0;
  // The parameters whose values ExchangeShards writes into the shard files, left out of
  // model.pt (sharding full: the blocks', whole on no rank between their runs, so saving
  // gathers none of them); every load reads them back from the shards.
  virtual std::vector<torch::Tensor> ParametersInShards() const { return {}; }
  // Whether ParametersInShards are freed now (each rank holds its shards only): a load then
  // reads their values from the shard files into the shards (LoadShards) and never writes
  // the parameters, or throws WholeParametersNeeded when the checkpoint has no such files.
  virtual bool ParametersFreed() const { return false; }
};

struct CheckpointOptions {
  std::string dir;         // this job's checkpoint directory (created if missing)
  int every_steps = 0;     // save when step % every_steps == 0; 0: off
  int every_seconds = 0;   // save when this long has passed since the last save; 0: off
  int keep_last = 3;       // complete checkpoints kept
  int attempt = -1;        // the job attempt this run is; -1: no fencing (see above)
};

struct SavedCheckpoint {
  std::string path;  // the step directory
  int64_t bytes = 0;
  double seconds = 0;
};

class CheckpointManager {
 public:
  explicit CheckpointManager(CheckpointOptions options);

  // Fencing: writes FENCE = this attempt, unless it holds a later one (FencedError).
  // Does nothing without an attempt.
  void Claim();
  // FencedError when FENCE holds a later attempt than this one (nothing without one).
  void CheckFence() const;

  // Whether a checkpoint is due after `step` (by step count or by time since the last save).
  bool Due(int64_t step) const;

  // Writes the checkpoint of `position`, then deletes the oldest beyond keep_last.
  // Throws std::runtime_error naming the file on failure, FencedError (nothing
  // committed) when a later attempt claimed the folder.
  SavedCheckpoint Save(const RunPosition& position, torch::nn::Module& model,
                       torch::optim::Optimizer& optimizer);

  // Loads the newest complete checkpoint that reads back whole (manifest parses, every
  // file matches its recorded size and checksum, archives load) into model, optimizer
  // (built as when saved) and *position; a damaged one is skipped, with a warning on
  // stderr, for the one before it. False when there is none; throws when every one is
  // damaged, and CheckpointVersionError at the first of a version it does not read
  // (WholeParametersNeeded likewise: see there).
  bool LoadLatest(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                  RunPosition* position, std::string* path = nullptr);

  // Reads only the manifest of the checkpoint LoadLatest would pick (newest readable)
  // into *position and its directory into *path; false when there is none.
  bool PeekLatest(RunPosition* position, std::string* path = nullptr) const;

  // Loads only the model of the complete checkpoint at `step` (verified as LoadLatest
  // verifies) onto the model's device and returns its position. Throws naming the step
  // and the steps kept when there is none at `step`.
  RunPosition LoadModelAt(int64_t step, torch::nn::Module& model) const;

  // Writes `files` (ReadCheckpointFiles of another rank's checkpoint) as the complete
  // checkpoint of `step` here: verified as a load verifies, then the marker. Returns its
  // directory. Throws naming what is wrong (nothing committed then), FencedError as Save.
  std::string Install(int64_t step, const std::map<std::string, std::string>& files);

  // Prune keeps the checkpoint of `step` whatever keep_last says (export.best's); -1: none.
  // Save names it, with its manifest's SHA-256, in every later manifest ("best"): a worker
  // that resumes from one of those keeps it, and fetches it with it (worker/checkpoint_copy.h).
  void Keep(int64_t step) { kept_step_ = step; }

  // Step directories with their COMPLETE marker, oldest first. Fenced, without those
  // a later attempt wrote.
  std::vector<std::string> ListComplete() const;

 private:
  // After the checkpoint of step `saved` committed: keep_last of those up to it (and
  // Keep's), the rest removed; none after it (an unloadable one a resume went past) counts.
  void Prune(int64_t saved);
  // Sets manifest->best to Keep's step and its manifest's digest when that checkpoint is
  // complete here and is not `step`, the one being written.
  void NameKeptStep(int64_t step, format::CheckpointManifest* manifest) const;
  int FenceHolder() const;  // FENCE's attempt; -1 when there is none
  bool WrittenByALaterAttempt(const std::string& dir) const;
  // Renames `staged` (a complete checkpoint of `step`: FreshStagingDir) onto the step's
  // folder, which an older one of this attempt or an earlier one may hold (removed first);
  // FencedError, `staged` removed, when a later attempt claimed the folder or wrote that
  // step. The step's folder.
  std::string Commit(const std::filesystem::path& staged, int64_t step);

  const CheckpointOptions options_;
  std::chrono::steady_clock::time_point last_save_;
  int64_t kept_step_ = -1;
};

// What a checkpoint is only valid for: the seed, the batching options, the data shards
// (sizes and checksums) and the model's dimensions, as readable "key=value;" text. A
// resumed run must have the same one (else the data order or the shapes differ).
std::string RunFingerprint(uint64_t seed, int64_t batch_size, int64_t max_tokens, bool max_tokens_auto,
                           const std::vector<std::string>& shard_descriptions,
                           const std::string& model_description);

// The files of the checkpoint in `step_dir` (manifest.json and those it lists) by name,
// for a rank that lacks it (ranks without a shared checkpoint folder, run.cc).
std::map<std::string, std::string> ReadCheckpointFiles(const std::string& step_dir);

// The CPU generator's state (dropout, init) as bytes, and back.
std::string GetCpuRngState();
void SetCpuRngState(const std::string& state);
// The generator of an accelerator `device` (CUDA: its seed and offset, which dropout's
// masks there draw from) as bytes, and back: "" for the CPU, and "" is not set (a
// checkpoint written on the CPU, or before this was saved).
std::string GetDeviceRngState(const torch::Device& device);
void SetDeviceRngState(const torch::Device& device, const std::string& state);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_CHECKPOINT_CHECKPOINT_H_
