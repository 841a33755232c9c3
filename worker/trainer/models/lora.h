// LoRA as PEFT defines it (peft/tuners/lora/layer.py, lora.Linear): a frozen projection
// plus a trainable low-rank update,
//
//   y = base(x) + scaling * B(A(dropout(x))),   scaling = alpha / r  (alpha / sqrt(r): rslora)
//
// A [r, in] drawn as nn.Linear draws it (kaiming_uniform, a = sqrt(5)), B [out, r] zero, so
// a new adapter starts as the base model; dropout only on the update's input. The update
// is registered on the projection it adapts as `lora_A` and `lora_B`, so its parameters are
// named as PEFT names them (`...q_proj.lora_A.weight`, less PEFT's `base_model.model.`
// prefix and adapter name). GPT-2's Conv1D (weight [in, out]) gets the same A and B: PEFT
// never transposes them in the forward, only when merging (fan_in_fan_out).
//
// Which projections: AttachLora matches module names as PEFT's check_target_module_exists
// does (a name equal to a target or ending in "." + target; "all-linear": every projection
// but the output head), never inside modules_to_save (the classification head by
// default, trained whole, as PEFT's ModulesToSaveWrapper does).
#ifndef NIGHTSHIFT_WORKER_TRAINER_MODELS_LORA_H_
#define NIGHTSHIFT_WORKER_TRAINER_MODELS_LORA_H_

#include <torch/torch.h>

#include <string>
#include <vector>

#include "worker/trainer/models/hf_config.h"

namespace nightshift::trainer::hf {

struct LoraOptions {
  int64_t r = 8;
  double alpha = 8;
  double dropout = 0;
  bool rslora = false;
  double scaling() const;
};

// The update of one projection; its two Linears are registered on the host module.
class LoraBranch {
 public:
  void Attach(torch::nn::Module& host, int64_t in, int64_t out, const LoraOptions& options,
              const torch::TensorOptions& tensor_options);
  bool attached() const { return !a_.is_empty(); }
  // scaling * B(A(dropout(x))); x [..., in] -> [..., out].
  torch::Tensor Apply(const torch::Tensor& x, bool training);
  // scaling * B A, [out, in]: what merging adds to a Linear's weight.
  torch::Tensor Delta() const;
  // Unregisters lora_A and lora_B from `host`; the branch is then detached.
  void Remove(torch::nn::Module& host);

 private:
  torch::nn::Linear a_{nullptr}, b_{nullptr};
  double dropout_ = 0, scaling_ = 0;
};

// Every Linear of the Hugging Face models: a torch::nn::Linear that may carry a LoRA update.
class ProjectionImpl : public torch::nn::LinearImpl {
 public:
  using torch::nn::LinearImpl::LinearImpl;
  torch::Tensor forward(const torch::Tensor& x);
  void AttachLora(const LoraOptions& options);
  bool has_lora() const { return lora_.attached(); }
  // weight += scaling * B A, then the update is removed (PEFT's merge_and_unload).
  void MergeLora();

 private:
  LoraBranch lora_;
};
TORCH_MODULE(Projection);

// transformers' Conv1D (GPT-2): y = x W + b with W [in, out], and its LoRA update.
class Conv1DImpl : public torch::nn::Module {
 public:
  Conv1DImpl(int64_t in, int64_t out);
  torch::Tensor forward(const torch::Tensor& x);
  void AttachLora(const LoraOptions& options);
  bool has_lora() const { return lora_.attached(); }
  void MergeLora();  // weight [in, out] += (scaling * B A)^T (fan_in_fan_out), then removed
  torch::Tensor weight, bias;

 private:
  LoraBranch lora_;
};
TORCH_MODULE(Conv1D);

// torch::nn::Embedding whose rows are float32 whatever the table's dtype: a frozen table
// kept in half precision (model.base_precision, CastFrozenBase below) feeds the
// float32 activations of every other layer.
class HfEmbeddingImpl : public torch::nn::EmbeddingImpl {
 public:
  using torch::nn::EmbeddingImpl::EmbeddingImpl;
  torch::Tensor forward(const torch::Tensor& ids) {
    torch::Tensor rows = torch::nn::EmbeddingImpl::forward(ids);
    return rows.scalar_type() == torch::kFloat32 ? rows : rows.to(torch::kFloat32);
  }
};
TORCH_MODULE(HfEmbedding);

struct AdapterConfig {
  LoraOptions lora;
  // Module names or suffixes, or {"all-linear"}; empty: PEFT's default for the model type.
  std::vector<std::string> target_modules;
  // Modules trained whole (names ending so); empty: the classification head ("classifier",
  // "score") for task classification, nothing for causal_lm.
  std::vector<std::string> modules_to_save;
};

// PEFT's default target_modules for `model_type` (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_
// MAPPING); empty for distilbert, which has none.
std::vector<std::string> DefaultLoraTargets(const std::string& model_type);

struct AttachedAdapter {
  LoraOptions lora;                          // the update's settings, as attached
  std::vector<std::string> adapted;          // module names that carry an update, in model order
  std::vector<std::string> modules_to_save;  // what was resolved (defaults filled)
  std::vector<std::string> target_modules;   // likewise
  int64_t trainable_parameters = 0;          // as PEFT's print_trainable_parameters counts
};

// Attaches an update to every matching projection of `model` (a Hugging Face model of
// model type `c.model_type` for `task`), then freezes every parameter but the updates' and
// those of modules_to_save. Throws PermanentError naming model.adapter.target_modules
// when a target matches no projection (listing the candidates).
AttachedAdapter AttachLora(torch::nn::Module& model, const HfConfig& c, const std::string& task,
                           const AdapterConfig& config);

// A PEFT adapter folder (PeftModel.save_pretrained's, or our export's) in:
// adapter_config.json's LoRA settings (peft_type LORA; r, lora_alpha, lora_dropout,
// use_rslora, target_modules, modules_to_save), throwing naming the file and key.
AdapterConfig ReadPeftAdapterConfig(const std::string& dir, const std::vector<std::string>& roots = {});
// adapter_model.safetensors into `model` after AttachLora: PEFT's names less
// "base_model.model.", each onto the trainable tensor of that name. Throws naming the
// first tensor the model lacks, or the first trainable tensor the file lacks.
void LoadPeftAdapter(const std::string& dir, torch::nn::Module& model, const std::vector<std::string>& roots = {});

// For a model built under DeferInit (models/common.h), before its weights are loaded:
// gives the weight and bias of every projection (Projection, Conv1D) and the table of
// every embedding whose module name starts with none of `except` (the head) new
// unwritten tensors of `dtype`, so that LoadHfWeights maps a file of that dtype into
// them, shared by every process that maps it, or converts into them (hf_weights.h): an
// adapter's base is never held in float32.
void BuildFrozenBaseIn(torch::nn::Module& model, torch::ScalarType dtype, const std::vector<std::string>& except);

// Keeps the frozen weight and bias of every projection (Projection, Conv1D) and the
// frozen table of every embedding of `model` in `dtype` (model.base_precision); the
// projections then compute in it on float32 activations (the input cast in, the output
// cast back), the embeddings look up rows that they return in float32 (HfEmbedding). The
// norms stay float32 (a few thousand values per block). Trainable tensors are left as
// they are.
void CastFrozenBase(torch::nn::Module& model, torch::ScalarType dtype);

// Which of `params` autocast casts to its dtype wherever `model` uses them: the weight and
// bias of every linear layer (a Projection, an adapter's A and B) and a Conv1D's weight (its
// bias is added to the product and keeps float32). A copy of them in that dtype computes
// what autocast computes (parallel/fully_sharded.h's compute copies); the rest (norms,
// embeddings) would not.
std::vector<bool> CastByAutocast(torch::nn::Module& model, const std::vector<torch::Tensor>& params);

// `x` as the projections of `weight`'s dtype that read it will take it: cast to that dtype
// once when each would cast it on its own (a half-precision frozen base under autocast to
// that dtype: ComputesAsIs), else `x` itself. For an input that several projections read
// (q, k and v; gate and up), so they share one cast and one cast back in backward instead
// of one each, their input gradients summed in that dtype (as PEFT's half-precision model
// sums them). Float32 weights (a full fine-tune, a float32 base) and trainable ones (a
// float32 weight's compute copy under sharding full) take `x` as it is.
torch::Tensor AsProjectionInput(const torch::Tensor& x, const torch::Tensor& weight);

// Folds every update of `model` into the weight it adapts and removes it, leaving the
// base model's parameter names: the model PEFT's merge_and_unload() returns.
void MergeLora(torch::nn::Module& model);

// PEFT's name of trainable tensor `name` in adapter_model.safetensors.
inline std::string PeftTensorName(const std::string& name) { return "base_model.model." + name; }

}  // namespace nightshift::trainer::hf

#endif  // NIGHTSHIFT_WORKER_TRAINER_MODELS_LORA_H_
