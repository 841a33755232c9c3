// The trainer's configuration: the JSON file the worker writes (job id, the resolved
// JobSpec, the prepared data and the checkpoint directory), parsed once into plain
// structs and validated, and the torchrun-style environment of this rank.
#ifndef NIGHTSHIFT_WORKER_TRAINER_CONFIG_H_
#define NIGHTSHIFT_WORKER_TRAINER_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/format/shard.h"
#include "common/format/spec_limits.h"
#include "worker/trainer/fault_injection.h"

namespace nightshift::trainer {

namespace L = format::limits;

struct ModelConfig {
  std::string arch = "transformer_classifier";  // transformer_classifier | gpt_lm | torchscript
  std::string path;       // torchscript: the module file (forward(tokens, pad_mask) -> logits)
  std::string init_from;  // an exported model folder (export.h) whose weights start the run
  // Defaults and limits: common/format/spec_limits.h, shared with the coordinator.
  int layers = L::kLayers.fallback;    // transformer blocks
  int d_model = L::kDModel.fallback;   // hidden width; divisible by heads
  int heads = L::kHeads.fallback;      // attention heads
  int ffn = 0;                         // feed-forward width; 0 in the JSON means 4 * d_model
  double dropout = L::kDefaultDropout; // in [0, 1): embeddings, residual branches, the pooled output
  double attention_dropout = 0.0;  // in [0, 1): attention probabilities; 0 takes the fused
                                   // attention kernel (model.h)
  int max_len = L::kMaxLen.fallback;  // tokens per sample (longer ones are truncated)
};

struct TrainSection {
  int epochs = L::kEpochs.fallback;
  std::string optimizer = "adamw";
  double lr = L::kLr.fallback;                       // peak learning rate
  double weight_decay = L::kDefaultWeightDecay;
  int warmup_steps = L::kDefaultWarmupSteps;         // linear warm-up steps, then linear decay to 0
  uint64_t seed = 1234;
  int batch_size = L::kBatchSize.fallback;           // samples per batch when max_tokens == 0
  int64_t max_tokens = 0;       // padded tokens per batch; 0: fixed batch_size
  bool max_tokens_auto = false; // "auto" in the spec (falls back to a fixed budget)
  int prefetch = L::kPrefetch.fallback;              // batches prepared ahead
  std::string precision = L::kDefaultPrecision;
  double grad_clip = L::kDefaultGradClip;            // max global gradient norm; 0 disables
  std::string activation_checkpointing = "none";  // none | full | every_N
  int checkpoint_every_blocks = 0;  // parsed from it: 0 none, 1 full, N every N-th block
  int64_t max_steps = 0;        // optimizer steps; 0: no limit
  int threads = 0;              // intra-op threads; 0: cores / local ranks
};

struct CheckpointConfig {
  int every_steps = L::kDefaultEverySteps;  // 0 disables step-based checkpoints
  int every_seconds = 0;                    // 0 disables time-based checkpoints
  int keep_last = L::kKeepLast.fallback;    // complete checkpoints kept (>= 1)
};

struct DataConfig {
  std::string train_shard;   // absolute path of the training shard
  std::string val_shard;     // absolute path of the validation shard
  int vocab_size = 0;
  int num_classes = 0;
  int pad_id = format::kPadId;
  int bos_id = format::kBosId;  // classifier samples start with it (the CLS position)
  int eos_id = format::kEosId;
  std::vector<std::string> class_names;
  std::string tokenizer_model;  // the sentencepiece model (exported with the model); "": the
                                // tokenizer.model beside train_shard, when there is one
};

// Data parallelism (ddp.h), from spec.resources.
struct DataParallelConfig {
  int world_size = 1;                                 // must match WORLD_SIZE when above 1
  int timeout_seconds = L::kTimeoutSeconds.fallback;  // rendezvous and every collective
  int bucket_mb = L::kBucketMb.fallback;              // gradient all-reduce bucket, MiB
};

struct TrainConfig {
  std::string job_id;
  int attempt = 0;
  DataParallelConfig data_parallel;
  std::string device = L::kDefaultDevice;             // spec.resources.device: auto | cpu | cuda (device.h)
  ModelConfig model;
  TrainSection train;
  CheckpointConfig checkpoint;
  DataConfig data;
  std::string checkpoint_dir;  // this job's checkpoints: step-00000123/ directories
  // Whether every rank of the job sees the same checkpoint_dir (a shared checkpoint root;
  // the default): then rank 0 alone writes it. false: each worker's ranks have a folder of
  // their own (its disk), and the first rank on each (local rank 0) writes a complete
  // checkpoint there, so any worker's copy can resume the job.
  bool checkpoint_dir_shared = true;
};

// Fills *config from the JSON text; returns "" or a message naming the field. Absent
// spec fields take the JobSpec's documented defaults (so the worker should write zeros
// explicitly); int64/uint64 fields may be numbers or strings (protobuf JSON); field
// names may be snake_case or lowerCamelCase.
std::string ParseTrainConfig(const std::string& json_text, TrainConfig* config);
std::string LoadTrainConfig(const std::string& path, TrainConfig* config);

// This process's place in the job, from torchrun-style environment variables.
struct RankInfo {
  int rank = 0;                // RANK
  int world_size = 1;          // WORLD_SIZE
  int local_rank = 0;          // LOCAL_RANK
  int local_world_size = 1;    // LOCAL_WORLD_SIZE
  std::string master_addr;     // MASTER_ADDR
  int master_port = 0;         // MASTER_PORT
  bool use_agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE=True: torchrun hosts the
                                 // store at MASTER_PORT, so rank 0 joins it as a client
  int restart_count = 0;       // TORCHELASTIC_RESTART_COUNT: keys of each restart apart
  int64_t memory_limit_bytes = 0;  // NIGHTSHIFT_MEMORY_LIMIT_BYTES or --memory-limit: host
                                   // memory this rank may use (max_tokens: auto); 0: the
                                   // resident set plus MemAvailable
  FaultPlan faults;  // NIGHTSHIFT_FAULT_* (tests; fault_injection.h): off by default
};

// Reads the variables above (absent: the defaults); returns "" or what is wrong.
std::string ReadRankInfo(RankInfo* info);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_CONFIG_H_
