#include "worker/trainer/models/lora.h"

#include <cmath>
#include <map>
#include <set>

#include <ATen/autocast_mode.h>
#include <nlohmann/json.hpp>

#include "common/io/atomic_file.h"
#include "worker/trainer/errors.h"
#include "worker/trainer/models/common.h"
#include "worker/trainer/models/dropout.h"
#include "worker/trainer/models/hf_weights.h"

namespace nightshift::trainer::hf {

double LoraOptions::scaling() const { return rslora ? alpha / std::sqrt(double(r)) : alpha / double(r); }

void LoraBranch::Attach(torch::nn::Module& host, int64_t in, int64_t out, const LoraOptions& o,
                        const torch::TensorOptions& tensor_options) {
  // nn.Linear's own initialisation for A (kaiming_uniform, a = sqrt(5)), as PEFT's
  // reset_lora_parameters draws it; B zero. Float32 whatever the base's dtype.
  a_ = host.register_module("lora_A", torch::nn::Linear(torch::nn::LinearOptions(in, o.r).bias(false)));
  b_ = host.register_module("lora_B", torch::nn::Linear(torch::nn::LinearOptions(o.r, out).bias(false)));
  {
    torch::NoGradGuard no_grad;
    b_->weight.zero_();
  }
  a_->to(tensor_options.device());
  b_->to(tensor_options.device());
  dropout_ = o.dropout;
  scaling_ = o.scaling();
}

torch::Tensor LoraBranch::Apply(const torch::Tensor& x, bool training) {
  // Scaled at rank r, not at the output width: a product by a number keeps its input for
  // backward, and [tokens, r] is what the branch can afford to keep.
  return b_(a_(Dropout(x, dropout_, training)) * scaling_);
}

torch::Tensor LoraBranch::Delta() const {
  return torch::matmul(b_->weight, a_->weight) * scaling_;
}

void LoraBranch::Remove(torch::nn::Module& host) {
  host.unregister_module("lora_A");
  host.unregister_module("lora_B");
  a_ = nullptr;
  b_ = nullptr;
}

void ProjectionImpl::MergeLora() {
  if (!lora_.attached()) return;
  torch::NoGradGuard no_grad;
  weight.add_(lora_.Delta().to(weight.dtype()));
  lora_.Remove(*this);
}

void Conv1DImpl::MergeLora() {
  if (!lora_.attached()) return;
  torch::NoGradGuard no_grad;
  weight.add_(lora_.Delta().t().to(weight.dtype()));
  lora_.Remove(*this);
}

void BuildFrozenBaseIn(torch::nn::Module& model, torch::ScalarType dtype, const std::vector<std::string>& except) {
  torch::NoGradGuard no_grad;
  auto build = [&](torch::Tensor& t) {
    if (t.defined()) t.set_data(torch::empty(t.sizes(), t.options().dtype(dtype)));
  };
  for (const auto& m : model.named_modules("", /*include_self=*/false)) {
    if (std::any_of(except.begin(), except.end(), [&](const std::string& e) { return (m.key() + ".").rfind(e, 0) == 0; }))
      continue;
    if (auto* p = dynamic_cast<ProjectionImpl*>(m.value().get())) {
      build(p->weight);
      build(p->bias);
    }
    if (auto* c = dynamic_cast<Conv1DImpl*>(m.value().get())) {
      build(c->weight);
      build(c->bias);
    }
    if (auto* e = dynamic_cast<torch::nn::EmbeddingImpl*>(m.value().get())) build(e->weight);
  }
}

void CastFrozenBase(torch::nn::Module& model, torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  auto cast = [&](torch::Tensor& t) {
    if (!t.defined() || t.requires_grad() || t.scalar_type() == dtype) return;
    torch::Tensor converted = t.to(dtype);
    DropMappedPages(t);  // the float32 bytes of the file are no longer this process's to hold
    t.set_data(converted);
  };
  for (const auto& m : model.modules(/*include_self=*/false)) {
    if (auto* p = dynamic_cast<ProjectionImpl*>(m.get())) {
      cast(p->weight);
      cast(p->bias);
    }
    if (auto* c = dynamic_cast<Conv1DImpl*>(m.get())) {
      cast(c->weight);
      cast(c->bias);
    }
    if (auto* e = dynamic_cast<torch::nn::EmbeddingImpl*>(m.get())) cast(e->weight);
  }
}

std::vector<bool> CastByAutocast(torch::nn::Module& model, const std::vector<torch::Tensor>& params) {
  std::set<const c10::TensorImpl*> cast;
  for (const auto& m : model.modules(/*include_self=*/false)) {
    if (auto* l = dynamic_cast<torch::nn::LinearImpl*>(m.get()))
      for (const torch::Tensor& t : {l->weight, l->bias})
        if (t.defined()) cast.insert(t.unsafeGetTensorImpl());
    if (auto* c = dynamic_cast<Conv1DImpl*>(m.get())) cast.insert(c->weight.unsafeGetTensorImpl());
  }
  std::vector<bool> out;
  for (const torch::Tensor& p : params) out.push_back(cast.count(p.unsafeGetTensorImpl()) > 0);
  return out;
}

void MergeLora(torch::nn::Module& model) {
  for (const auto& m : model.modules(/*include_self=*/false)) {
    if (auto* p = dynamic_cast<ProjectionImpl*>(m.get())) p->MergeLora();
    if (auto* c = dynamic_cast<Conv1DImpl*>(m.get())) c->MergeLora();
  }
}

namespace {

// The dtype a projection's weight computes as: its own, but float32 for a trainable one. A
// trainable weight in half precision is a float32 weight's compute copy (sharding full)
// and computes as that one would.
torch::ScalarType ComputeDtype(const torch::Tensor& weight) {
  return weight.requires_grad() ? torch::kFloat32 : weight.scalar_type();
}

// Whether a projection's output stays in its weight's compute dtype: x has that dtype, or
// autocast to it is on for x's device (whose next op would cast an output converted back
// to x's dtype down again).
bool ComputesAsIs(const torch::Tensor& x, const torch::Tensor& weight) {
  const torch::ScalarType dtype = ComputeDtype(weight);
  if (dtype == x.scalar_type()) return true;
  const auto device = x.device().type();
  return at::autocast::is_autocast_enabled(device) && at::autocast::get_autocast_dtype(device) == dtype;
}

}  // namespace

torch::Tensor AsProjectionInput(const torch::Tensor& x, const torch::Tensor& weight) {
  const torch::ScalarType dtype = ComputeDtype(weight);
  return dtype != x.scalar_type() && ComputesAsIs(x, weight) ? x.to(dtype) : x;
}

// A base kept in half precision (CastFrozenBase) computes in it; its output is cast back
// to x's dtype unless ComputesAsIs. A float32 weight takes x in autocast's dtype as it is
// (a bf16 attention output, say): autocast casts the weight and bias to it, so x converted
// to float32 first would only add a copy and two casts, for the same output.
torch::Tensor ProjectionImpl::forward(const torch::Tensor& x) {
  const auto device = x.device().type();
  const bool autocast_casts = weight.scalar_type() == torch::kFloat32 && at::autocast::is_autocast_enabled(device) &&
                              at::autocast::get_autocast_dtype(device) == x.scalar_type();
  torch::Tensor y = autocast_casts || ComputesAsIs(x, weight)
                        ? torch::nn::LinearImpl::forward(x)
                        : torch::nn::functional::linear(x.to(weight.scalar_type()), weight, bias).to(x.scalar_type());
  return lora_.attached() ? y + lora_.Apply(x, is_training()) : y;
}

void ProjectionImpl::AttachLora(const LoraOptions& o) {
  lora_.Attach(*this, options.in_features(), options.out_features(), o, weight.options());
}

Conv1DImpl::Conv1DImpl(int64_t in, int64_t out) {
  weight = register_parameter("weight", torch::empty({in, out}));
  if (!DeferInit::active()) weight.data().normal_(0.0, 0.02);
  bias = register_parameter("bias", torch::zeros({out}));
}

torch::Tensor Conv1DImpl::forward(const torch::Tensor& x) {  // as ProjectionImpl::forward
  torch::Tensor y = ComputesAsIs(x, weight)
                        ? torch::matmul(x, weight) + bias
                        : (torch::matmul(x.to(weight.scalar_type()), weight) + bias).to(x.scalar_type());
  return lora_.attached() ? y + lora_.Apply(x, is_training()) : y;
}

void Conv1DImpl::AttachLora(const LoraOptions& o) {
  lora_.Attach(*this, weight.size(0), weight.size(1), o, weight.options());
}

std::vector<std::string> DefaultLoraTargets(const std::string& model_type) {
  static const std::map<std::string, std::vector<std::string>> kDefaults = {
      {"bert", {"query", "value"}},   {"roberta", {"query", "value"}}, {"gpt2", {"c_attn"}},
      {"llama", {"q_proj", "v_proj"}}, {"mistral", {"q_proj", "v_proj"}}, {"qwen2", {"q_proj", "v_proj"}}};
  const auto it = kDefaults.find(model_type);
  return it == kDefaults.end() ? std::vector<std::string>{} : it->second;
}

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), std::string::npos, suffix) == 0;
}

// PEFT's list match: the whole name, or a '.'-separated suffix of it.
bool MatchesTarget(const std::string& name, const std::string& target) {
  return name == target || EndsWith(name, "." + target);
}

// PEFT's guard: a module inside (or equal to) a module to save never gets an update.
bool InsideModuleToSave(const std::string& name, const std::vector<std::string>& modules_to_save) {
  for (const std::string& m : modules_to_save)
    if (name == m || name.rfind(m + ".", 0) == 0 || name.find("." + m + ".") != std::string::npos ||
        EndsWith(name, "." + m))
      return true;
  return false;
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// A projection AttachLora may adapt, in model order (PEFT's named_modules order).
struct Candidate {
  std::string name;
  ProjectionImpl* linear;
  Conv1DImpl* conv;
};

// The model's projections, and the output head all-linear leaves out: lm_head for
// causal_lm, else the first of score and classifier.
std::vector<Candidate> Candidates(torch::nn::Module& model, const std::string& task, std::string* output_head) {
  std::vector<Candidate> candidates;
  std::set<std::string> names;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    names.insert(item.key());
    if (auto* p = dynamic_cast<ProjectionImpl*>(item.value().get())) candidates.push_back({item.key(), p, nullptr});
    else if (auto* v = dynamic_cast<Conv1DImpl*>(item.value().get())) candidates.push_back({item.key(), nullptr, v});
  }
  output_head->clear();
  if (names.count("lm_head")) *output_head = "lm_head";
  else if (task == "classification") *output_head = names.count("score") ? "score" : "classifier";
  return candidates;
}

// Throws naming the targets that matched no candidate, with the candidates' last name parts.
void CheckEveryTargetMatched(const std::vector<std::string>& targets, const std::set<std::string>& matched,
                             const std::vector<Candidate>& candidates, const std::string& model_type) {
  std::vector<std::string> unmatched;
  for (const std::string& t : targets)
    if (!matched.count(t)) unmatched.push_back(t);
  if (unmatched.empty()) return;
  std::set<std::string> suffixes;  // as a user writes them
  for (const Candidate& cand : candidates) suffixes.insert(cand.name.substr(cand.name.rfind('.') + 1));
  throw PermanentError("model.adapter.target_modules: " + Join(unmatched) + " matches no projection of this " +
                       model_type + " model (its projections: " +
                       Join(std::vector<std::string>(suffixes.begin(), suffixes.end())) + ", or all-linear)");
}

// Only the updates and the modules to save train. PEFT matches modules_to_save with a plain
// suffix (no dot: DistilBERT's pre_classifier ends in "classifier" and trains too).
// Returns the trainable parameters' count.
int64_t FreezeAllButTheAdapter(torch::nn::Module& model, const std::vector<std::string>& modules_to_save) {
  int64_t trainable_parameters = 0;
  for (auto& p : model.named_parameters()) {
    const std::string& name = p.key();
    bool trainable = name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
    const std::string module = name.substr(0, name.rfind('.'));
    for (const std::string& m : modules_to_save)
      for (std::string prefix = module; !trainable && !prefix.empty();) {
        trainable = EndsWith(prefix, m);
        const size_t dot = prefix.rfind('.');
        prefix = dot == std::string::npos ? "" : prefix.substr(0, dot);
      }
    p.value().set_requires_grad(trainable);
    if (trainable) trainable_parameters += p.value().numel();
  }
  return trainable_parameters;
}

}  // namespace

AttachedAdapter AttachLora(torch::nn::Module& model, const HfConfig& c, const std::string& task,
                           const AdapterConfig& config) {
  AttachedAdapter out;
  out.lora = config.lora;
  out.modules_to_save = config.modules_to_save;
  if (out.modules_to_save.empty() && task == "classification") out.modules_to_save = {"classifier", "score"};
  out.target_modules = config.target_modules.empty() ? DefaultLoraTargets(c.model_type) : config.target_modules;
  if (out.target_modules.empty())
    throw PermanentError("model.adapter.target_modules: " + c.model_type +
                         " has no default target modules (nor in PEFT): name them, e.g. q_lin,v_lin");
  const bool all_linear = out.target_modules.size() == 1 && out.target_modules[0] == "all-linear";
  if (config.lora.r < 1) throw PermanentError("model.adapter.r: must be at least 1");

  std::string output_head;
  const std::vector<Candidate> candidates = Candidates(model, task, &output_head);
  std::set<std::string> matched_targets;
  for (const Candidate& cand : candidates) {
    if (InsideModuleToSave(cand.name, out.modules_to_save)) continue;
    bool match = all_linear && cand.name != output_head;
    if (!all_linear)
      for (const std::string& t : out.target_modules)
        if (MatchesTarget(cand.name, t)) {
          match = true;
          matched_targets.insert(t);
        }
    if (!match) continue;
    if (cand.linear) cand.linear->AttachLora(config.lora);
    else cand.conv->AttachLora(config.lora);
    out.adapted.push_back(cand.name);
  }
  if (!all_linear) CheckEveryTargetMatched(out.target_modules, matched_targets, candidates, c.model_type);
  if (out.adapted.empty())
    throw PermanentError("model.adapter.target_modules: no projection left to adapt outside modules_to_save");
  out.trainable_parameters = FreezeAllButTheAdapter(model, out.modules_to_save);
  return out;
}

AdapterConfig ReadPeftAdapterConfig(const std::string& dir, const std::vector<std::string>& roots) {
  const std::string path = dir + "/adapter_config.json";
  std::string text;
  if (std::string err = roots.empty() ? io::ReadRegularFile(path, 1 << 20, &text)
                                      : io::ReadFileBeneath(roots, path, 1 << 20, &text);
      !err.empty())
    throw PermanentError("model.adapter.init_from: " + err);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw PermanentError("model.adapter.init_from: " + path + " is not a JSON object");
  if (j.value("peft_type", "") != "LORA")
    throw PermanentError("model.adapter.init_from: " + path + ": peft_type is not LORA (only LoRA adapters are supported)");
  AdapterConfig c;
  auto number = [&](const char* key, double fallback) {
    if (!j.contains(key)) return fallback;
    if (!j[key].is_number()) throw PermanentError("model.adapter.init_from: " + path + ": " + key + " is not a number");
    return j[key].get<double>();
  };
  auto names = [&](const char* key) {
    std::vector<std::string> out;
    if (!j.contains(key) || j[key].is_null()) return out;
    if (j[key].is_string()) return std::vector<std::string>{j[key].get<std::string>()};
    if (!j[key].is_array()) throw PermanentError("model.adapter.init_from: " + path + ": " + key + " is not a list");
    for (const auto& v : j[key]) {
      if (!v.is_string()) throw PermanentError("model.adapter.init_from: " + path + ": " + key + " holds a non-string");
      out.push_back(v.get<std::string>());
    }
    return out;
  };
  c.lora.r = static_cast<int64_t>(number("r", 8));
  c.lora.alpha = number("lora_alpha", 8);
  c.lora.dropout = number("lora_dropout", 0);
  c.lora.rslora = j.value("use_rslora", false);
  c.target_modules = names("target_modules");
  c.modules_to_save = names("modules_to_save");
  for (const char* unsupported : {"use_dora", "lora_bias"})
    if (j.value(unsupported, false))
      throw PermanentError("model.adapter.init_from: " + path + ": " + unsupported + " is not supported");
  if (j.value("bias", std::string("none")) != "none")
    throw PermanentError("model.adapter.init_from: " + path + ": bias other than \"none\" is not supported");
  return c;
}

void LoadPeftAdapter(const std::string& dir, torch::nn::Module& model, const std::vector<std::string>& roots) {
  const HfWeights weights = HfWeights::OpenFile(dir + "/adapter_model.safetensors", roots);
  auto params = model.named_parameters();
  std::set<std::string> seen;
  for (const std::string& file_name : weights.names()) {
    const std::string prefix = "base_model.model.";
    const std::string name = file_name.rfind(prefix, 0) == 0 ? file_name.substr(prefix.size()) : file_name;
    torch::Tensor* p = params.find(name);
    if (p == nullptr || !p->requires_grad())
      throw PermanentError("model.adapter.init_from: " + dir + "/adapter_model.safetensors holds " + file_name +
                           ", which is no trainable tensor of this model and adapter");
    torch::NoGradGuard no_grad;
    torch::Tensor value = torch::empty(p->sizes(), p->options().dtype(torch::kFloat32).device(torch::kCPU));
    weights.CopyTo(file_name, value);
    p->copy_(value);
    seen.insert(name);
  }
  for (const auto& p : params)
    if (p.value().requires_grad() && !seen.count(p.key()))
      throw PermanentError("model.adapter.init_from: " + dir + "/adapter_model.safetensors lacks " +
                           PeftTensorName(p.key()));
}

}  // namespace nightshift::trainer::hf
