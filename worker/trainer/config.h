// The trainer's configuration: the JSON file the worker writes (job id, the resolved
// JobSpec, the prepared data and the checkpoint directory), parsed once into plain
// structs and validated, and the torchrun-style environment of this rank.
#ifndef NIGHTSHIFT_WORKER_TRAINER_CONFIG_H_
#define NIGHTSHIFT_WORKER_TRAINER_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/format/shard.h"
#include "common/spec_rules/spec_rules.h"
#include "worker/trainer/fault_injection.h"

namespace nightshift::trainer {

namespace L = spec_rules::limits;

// The structs' defaults are the spec's (common/spec_rules/spec_rules.h): a TrainConfig built
// in code starts as a parsed spec with every field absent would.
constexpr double Default(const spec_rules::SpecField& f) { return f.fallback; }

struct ModelConfig {
  std::string arch = "transformer_classifier";  // transformer_classifier | gpt_lm | torchscript | pretrained
  std::string path;       // torchscript: the module file (forward(tokens, pad_mask) -> logits)
  std::string init_from;  // an exported model folder (export.h) whose weights start the run
  // arch pretrained: a Hugging Face model folder (models/pretrained.h) and its task
  // (classification, or causal_lm for a decoder). The sizes below are then 0 where config.json gives them, and
  // dropout -1 / attention_dropout 0 keep config.json's.
  std::string pretrained, task;
  std::string base_precision;  // with an adapter: fp32 ("" too) | bf16 | fp16, the frozen projections' dtype
  bool pretrained_decoder = false;  // set by hf::ResolvePretrained: config.json's model is a decoder
  std::string pooling = L::kPooling.text_default;  // transformer_classifier: cls | mean
  // model.adapter (arch pretrained): type "lora" trains a LoRA adapter on the frozen model
  // (models/lora.h); "" trains every weight. Lists are the spec's comma-separated text, split.
  struct Adapter {
    std::string type;
    int r = Default(L::kAdapterR);
    double alpha = Default(L::kAdapterAlpha);
    double dropout = 0;
    std::vector<std::string> target_modules, modules_to_save;
    std::string init_from;  // a PEFT adapter folder to continue from
    bool rslora = false;    // scaling alpha / sqrt(r)
  } adapter;
  int layers = Default(L::kLayers);    // transformer blocks
  int d_model = Default(L::kDModel);   // hidden width; divisible by heads
  int heads = Default(L::kHeads);      // attention heads
  int ffn = 4 * Default(L::kDModel);   // feed-forward width; the spec's default: 4 * d_model
  double dropout = Default(L::kDropout); // in [0, 1): embeddings, residual branches, the pooled output;
                                         // -1: config.json's (pretrained)
  double attention_dropout = 0.0;  // in [0, 1): attention probabilities; 0 takes the fused
                                   // attention kernel (model.h)
  int max_len = Default(L::kMaxLen);  // tokens per sample (longer ones are truncated)
  // The worker's data roots (config.data_roots: absolute, resolved; "/" under
  // --allow-any-path): the files of path, init_from and pretrained are opened beneath
  // them (io::OpenFileBeneath), whatever links appeared since the worker checked the
  // paths. Empty: anywhere (the trainer run by hand, tests).
  std::vector<std::string> data_roots;
};

struct TrainSection {
  int epochs = Default(L::kEpochs);
  std::string optimizer = L::kOptimizer.text_default;
  double lr = Default(L::kLr);                       // peak learning rate
  double weight_decay = Default(L::kWeightDecay);
  int warmup_steps = Default(L::kWarmupSteps);       // warm-up steps, then `schedule`
  uint64_t seed = Default(L::kSeed);
  int batch_size = Default(L::kBatchSize);           // samples per batch when max_tokens == 0
  int64_t max_tokens = 0;       // padded tokens per batch; 0: fixed batch_size
  bool max_tokens_auto = false; // "auto" in the spec (falls back to a fixed budget)
  int prefetch = Default(L::kPrefetch);              // batches prepared ahead
  std::string rows = "padded";  // packed: samples fill rows of max_len (causal_lm); padded: one per row
  std::string precision = L::kPrecision.text_default;
  double grad_clip = Default(L::kGradClip);            // max global gradient norm; 0 disables
  std::string activation_checkpointing = L::kActivationCheckpointing.text_default;  // none | full | every_N
  int checkpoint_every_blocks = 0;  // parsed from it: 0 none, 1 full, N every N-th block
  int64_t max_steps = 0;        // optimizer steps; 0: no limit
  int threads = 0;              // intra-op threads; 0: cores / local ranks
  int accumulate_steps = 1;     // batches per optimizer step
  std::string schedule = L::kSchedule.text_default;  // linear | cosine | constant (schedule.h)
  struct EarlyStopping {
    std::string metric;  // "": off; val_loss | val_accuracy | val_f1 | val_perplexity
    int patience = 1;    // evaluations without improvement before the run ends
    double min_delta = 0;
  } early_stopping;
};

struct CheckpointConfig {
  int every_steps = Default(L::kEverySteps);  // 0 disables step-based checkpoints
  int every_seconds = 0;                    // 0 disables time-based checkpoints
  int keep_last = Default(L::kKeepLast);    // complete checkpoints kept (>= 1)
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
  int timeout_seconds = Default(L::kTimeoutSeconds);  // rendezvous and every collective
  int bucket_mb = Default(L::kBucketMb);              // gradient all-reduce bucket, MiB
  std::string sharding = L::kSharding.text_default;   // none | optimizer (sharded_adamw.h) | full
  bool reduce_bf16 = false;                           // resources.reduce_precision bf16
  std::string accumulate_gradients = L::kAccumulateGradients.text_default;  // auto | sharded | whole (fully_sharded.h)
};

struct TrainConfig {
  std::string job_id;
  int attempt = 0;
  DataParallelConfig data_parallel;
  std::string device = L::kDevice.text_default;             // spec.resources.device: auto | cpu | cuda (device.h)
  ModelConfig model;
  TrainSection train;
  CheckpointConfig checkpoint;
  int64_t eval_every_steps = 0;  // 0: evaluate at every epoch's end
  std::string export_best;       // "": export the last step; else the best evaluated checkpoint by it
  bool export_merge = false;     // with an adapter: also export the merged model (model-merged/)
  DataConfig data;
  std::string checkpoint_dir;  // this job's checkpoints: step-00000123/ directories
  // Whether every rank of the job sees the same checkpoint_dir (a shared checkpoint root;
  // the default): then rank 0 alone writes it. false: each worker's ranks have a folder of
  // their own (its disk), and the first rank on each (local rank 0) writes a complete
  // checkpoint there, so any worker's copy can resume the job.
  bool checkpoint_dir_shared = true;
  // An ASHA trial's rungs by steps (config.await_steps, from its assignment): after the
  // evaluation at each, the ranks wait until judged_file (the worker writes it from the
  // coordinator's heartbeat reply) holds that step or more, or a stop comes, for at most
  // await_seconds (half the group's timeout at most); then a stop ends the run there
  // (Run::AwaitJudgement).
  std::vector<int64_t> await_steps;
  std::vector<int64_t> await_epochs;  // the same after the evaluation at these epochs' ends
  std::string judged_file;
  int await_seconds = 30;
};

// Fills *config from the JSON text; returns "" or a message naming the field. The spec
// goes through the JobSpec's one set of rules (spec_rules::ApplySpecRules), as on submit:
// the same defaults, verdicts and messages as the coordinator's, and a key the JobSpec
// does not have is refused. int64/uint64 fields may be numbers or strings (protobuf
// JSON); field names may be snake_case or lowerCamelCase.
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
