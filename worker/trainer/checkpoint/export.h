// The trained model out: a folder in the layout the ecosystem reads (Hugging Face's), written
// by the trainer when a job succeeds and read by nightshift-predict, the Python package
// (python/nightshift) and model.init_from.
//
//   model.safetensors  the weights: an 8-byte little-endian header length N, N bytes of
//                      JSON {name: {"dtype": "F32", "shape": [...], "data_offsets": [b, e]},
//                      "__metadata__": {"format": "pt"}}, then the raw little-endian data
//                      (offsets relative to the end of the header, in the model's
//                      parameter order, 8-aligned).
//   config.json        {"format": "nightshift-model", "version": 1, "arch", "layers",
//                      "d_model", "heads", "ffn", "max_len", "dropout", "attention_dropout",
//                      "vocab_size", "num_classes", "labels" (class names in index order),
//                      "pad_id", "bos_id", "eos_id", "tensor_names" ("nightshift" | "gpt2"),
//                      "job_id", "step", "metrics" {val_accuracy, ...}}; for gpt_lm also the
//                      keys GPT2LMHeadModel reads (model_type "gpt2", n_embd, n_layer, n_head,
//                      n_inner, n_positions, activation_function "gelu_new", ...).
//   tokenizer.model    the sentencepiece model the job trained on (when it had one).
//   model.pt           torchscript jobs: the trained TorchScript module as well.
//   checksums.json     {"algorithm": "sha256", "files": {name: {"bytes": N, "sha256": hex}}}
//                      for every other file; every reader verifies it (and still accepts
//                      "sha1", which folders written before SHA-256 hold).
//
// arch pretrained (a model.pretrained job) writes the folder transformers saves for a
// fine-tuned model, which AutoModelForSequenceClassification and AutoTokenizer load:
//   model.safetensors  the parameters under their checkpoint names (bert.encoder..., classifier.*), F32.
//   config.json        the source folder's, with architectures [Bert|Roberta|DistilBert
//                      ForSequenceClassification], id2label/label2id of the data's labels,
//                      dtype float32, the spec's dropout under the model's keys; and ours
//                      beside (format, version, arch, max_len, labels, num_classes, job_id,
//                      step, metrics), which transformers keeps as plain attributes.
//   tokenizer.json, tokenizer_config.json, special_tokens_map.json, added_tokens.json,
//   vocab.txt, vocab.json, merges.txt   the source folder's, those it has (tokenizer.json must be).
//   checksums.json     as above.
//
// Tensor names: transformer_classifier uses the module's own names (tok_emb.weight,
// pos_emb.weight, blocks.N.{ln1,qkv,proj,ln2,fc1,fc2}.{weight,bias}, ln_f.{weight,bias},
// head.{weight,bias}; Linear weights [out, in]). gpt_lm uses GPT-2's (transformer.wte,
// transformer.wpe, transformer.h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
// mlp.c_proj}, transformer.ln_f; Conv1D weights [in, out], i.e. our Linear's transposed;
// the head is tied to wte and not stored), so transformers' GPT2LMHeadModel loads it.
//
// Written to a temporary folder, every file fsynced, then renamed into place: a folder
// named `model` is always whole.
#ifndef NIGHTSHIFT_WORKER_TRAINER_CHECKPOINT_EXPORT_H_
#define NIGHTSHIFT_WORKER_TRAINER_CHECKPOINT_EXPORT_H_

#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "worker/trainer/config.h"
#include "worker/trainer/models/hf_weights.h"
#include "worker/trainer/models/lora.h"
#include "worker/trainer/models/model.h"

namespace nightshift::trainer {

inline constexpr char kModelFormat[] = "nightshift-model";
inline constexpr int kModelFormatVersion = 1;

// What a job's export records besides the weights.
struct ExportInfo {
  std::string job_id;
  int64_t step = 0;
  std::map<std::string, double> metrics;  // final validation metrics (NaN ones left out)
  std::string tokenizer_model;            // path of the tokenizer to copy; "": none (arch
                                          // pretrained: unused, its folder's files are copied)
};

// The tokenizer the run trained on: data.tokenizer_model, else the tokenizer.model beside
// train_shard (data preparation's), else the final export's copy (after the cache entry
// was evicted); "" when there is none.
std::string TokenizerOf(const TrainConfig& config);

// Writes the folder `dir` (replacing one that is there). Throws std::runtime_error naming
// the file on failure. The weights are read a tensor at a time, in the model's parameter
// order, each after `before(parameter)` (resources.sharding full: there the block that
// holds it is gathered, the one before freed).
void ExportModel(const std::string& dir, const TrainConfig& config, SequenceModel& model,
                 const ExportInfo& info, const std::function<void(const torch::Tensor&)>& before = {});

// A tensor of the export: its name (see above) and the model's parameter it comes from
// (GPT-2's Conv1D weights transposed; the tied head is not one).
struct ExportEntry {
  std::string name;
  torch::Tensor param;
  bool transposed = false;
  torch::Tensor Values() const;  // on the CPU, float32, contiguous, transposed if it is
};
std::vector<ExportEntry> ExportEntries(const std::string& arch, SequenceModel& model);
// The tensors of `model` under their export names, on the CPU, contiguous.
std::map<std::string, torch::Tensor> ExportTensors(const std::string& arch, SequenceModel& model);
// Copies export-named tensors into `model`'s parameters (the inverse of ExportTensors), in
// the model's order, calling `before` (when set) with each parameter just before it is
// written (sharding full reopens the blocks one at a time: FullyShardedAdamW::ReopenFor).
// Throws naming the first missing, extra or mis-shaped tensor.
void LoadExportTensors(const std::string& arch, const HfWeights& weights, SequenceModel& model,
                       const std::function<void(const torch::Tensor&)>& before = {});

// safetensors: F32, BF16 and F16 tensors out in their own dtype (exports are float32), and
// any file back as float32 tensors (hf_weights.h reads it, beneath `roots`). WriteSafetensors writes `path`
// atomically, a tensor at a time (never the whole file in memory), and returns its
// SHA-256 (hex); both throw naming the file and what is wrong.
// A LoRA adapter out (models/lora.h), as PEFT's save_pretrained writes one:
// adapter_config.json (PEFT's keys), adapter_model.safetensors (every trainable tensor
// under PEFT's name: the updates and the modules to save) and checksums.json, into `dir`
// atomically. PeftModel.from_pretrained(base, dir) loads it.
void ExportPeftAdapter(const std::string& dir, torch::nn::Module& model, const hf::AdapterConfig& adapter,
                       const std::string& task, const std::string& base_model);

std::string WriteSafetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors);
// The export's float32 weights, `entries` in their order, each read after `before(param)`.
std::string WriteExportSafetensors(const std::string& path, const std::vector<ExportEntry>& entries,
                                   const std::function<void(const torch::Tensor&)>& before = {});
std::map<std::string, torch::Tensor> ReadSafetensors(const std::string& path,
                                                     const std::vector<std::string>& roots = {});

// model.init_from: verifies the folder and loads its weights into `model` (built from
// `config`). An arch pretrained export is refused (model.pretrained reads it). Its config.json sizes must equal the spec's (a mismatch names the spec field);
// the architecture must be the same, or a transformer_classifier may start from a gpt_lm's
// trunk (its head stays as initialised). Its files are opened beneath config.model.data_roots,
// its checksums computed as they are read (no file whole in memory) and its tensors read
// from the file's mapping one at a time, each after `before(param)` (LoadExportTensors).
// Throws std::runtime_error with the reason.
void InitFromExport(const std::string& dir, const TrainConfig& config, SequenceModel& model,
                    const std::function<void(const torch::Tensor&)>& before = {});

// `nightshift job artifacts --step N`: exports the complete checkpoint at `step` of the run
// `config` describes (config.checkpoint_dir) to `dir`, as the final model is exported but
// with no metrics in config.json (they are in the job's metric history). On the CPU.
// Throws naming the step (and the steps kept) when there is no such checkpoint.
// A job's adapter as AttachLora resolved it (defaults filled), exported as PEFT saves
// one (ExportPeftAdapter) for config.model.task and config.model.pretrained.
void ExportJobAdapter(const std::string& dir, const TrainConfig& config, torch::nn::Module& model,
                      const hf::AttachedAdapter& attached);

void ExportCheckpoint(const std::string& dir, const TrainConfig& config, int64_t step);

// Verifies dir/checksums.json against the files, opened beneath `roots` (empty: anywhere,
// but not through a link in the folder); returns "" or what does not match.
std::string VerifyModelFolder(const std::string& dir, const std::vector<std::string>& roots = {});

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_CHECKPOINT_EXPORT_H_
