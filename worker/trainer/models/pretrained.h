// A Hugging Face model folder as a classifier or a language model: the architecture its
// config.json names (encoders: bert.h, roberta.h, distilbert.h, classification only;
// decoders: gpt2.h, llama.h with decoder.h's heads, classification or causal_lm), built
// from its config and loaded with its weights.
#ifndef NIGHTSHIFT_WORKER_TRAINER_MODELS_PRETRAINED_H_
#define NIGHTSHIFT_WORKER_TRAINER_MODELS_PRETRAINED_H_

#include <memory>
#include <optional>
#include <string>

#include "worker/trainer/config.h"
#include "worker/trainer/models/hf_weights.h"
#include "worker/trainer/models/lora.h"
#include "worker/trainer/models/model.h"

namespace nightshift::trainer::hf {

// model.task: "classification" (...ForSequenceClassification) or "causal_lm"
// (...ForCausalLM, GPT2LMHeadModel; decoders only).
// transformers' name of that class (config.json "architectures"); throws PermanentError
// for a model_type (or a task of it) we do not build.
std::string PretrainedClassName(const std::string& model_type, const std::string& task = "classification");

// The model of `config.model_type` for `task`, freshly initialised.
std::shared_ptr<SequenceModel> BuildPretrained(const HfConfig& config, const std::string& task = "classification");

// What a job changes in the folder's model, as from_pretrained(dir, **overrides) would.
struct PretrainedOptions {
  std::string task = "classification";  // or causal_lm
  // The data's label names (id order). The folder's head is kept when its id2label names
  // these labels in this order; otherwise the whole head is new, for these labels. Empty:
  // the folder's labels and head.
  std::vector<std::string> labels;
  double dropout = -1;            // >= 0: replaces the hidden and the classifier's dropout
  double attention_dropout = -1;  // >= 0: replaces the attention probabilities' dropout
  // bf16 or fp16: the projections outside the head are built in it and loaded into it
  // (lora.h's BuildFrozenBaseIn; an adapter's base, model.base_precision).
  torch::ScalarType base_dtype = torch::kFloat32;
};

// dir/config.json's model for options.task with dir's weights (hf_weights.h: mapped, converted to float32
// per tensor; a missing or replaced classification head is initialised as transformers
// initialises one). On the CPU, in training mode. *config (when set) is the config the
// model was built from, options applied. The folder's files are opened beneath `roots`
// (hf_weights.h; empty: anywhere). Throws PermanentError naming the file, key or tensor.
// With `later` set the weights are not written: the model is built unwritten
// (models/common.h's DeferInit) and *later holds the folder, for LoadHfWeights.
struct DeferredWeights {
  std::optional<HfWeights> weights;  // unset: nothing deferred
  HfNameRules rules;
};
std::shared_ptr<SequenceModel> LoadPretrained(const std::string& dir, const PretrainedOptions& options = {},
                                              HfConfig* config = nullptr, const std::vector<std::string>& roots = {},
                                              DeferredWeights* later = nullptr);

// The longest row (tokens) the folder's model takes: max_position_embeddings, less
// RoBERTa's offset (its positions start after pad_token_id); at most a sliding window.
int64_t MaxRowLength(const HfConfig& config);

// model.arch pretrained: reads model.pretrained's config.json, checks the spec against it
// and fills in what the spec leaves to it, so the rest of the trainer sees the model's
// true sizes. Sizes set in the spec must equal config.json's; max_len must fit the
// position table; the tokenizer's ids (data.vocab_size) must have embedding rows. Returns
// "" or the error (a user error: no restart fixes it), naming the spec field and the
// config.json key. Other archs: nothing to do.
std::string ResolvePretrained(TrainConfig* config);

// The job's model of a resolved config (arch pretrained): the folder's weights, the data's
// labels (class_names) and the spec's dropout (PretrainedOptions); load_weights false: as
// initialised only, for a checkpoint to fill.
// With model.adapter: the LoRA adapter attached (lora.h: the base frozen), from
// model.adapter.init_from's folder when it names one; *attached (when set) says what it
// adapted.
// `later` (sharding full, with load_weights): the folder's weights are left to the caller,
// to load once the optimizer can cut each block as it is written (LoadHfWeights' `before`):
// the model is built unwritten with its adapter attached, and *later holds the folder and
// its rules (what the adapter wrote left out: its A and B, and with its init_from folder
// every trainable tensor, modules_to_save too, as PEFT loads the adapter over the base).
std::shared_ptr<SequenceModel> JobModel(const TrainConfig& config, bool load_weights,
                                        AttachedAdapter* attached = nullptr, DeferredWeights* later = nullptr);
// The adapter settings of a resolved config: its init_from folder's, else the spec's.
AdapterConfig JobAdapter(const ModelConfig& model);

}  // namespace nightshift::trainer::hf

#endif  // NIGHTSHIFT_WORKER_TRAINER_MODELS_PRETRAINED_H_
