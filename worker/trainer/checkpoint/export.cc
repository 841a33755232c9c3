#include "worker/trainer/checkpoint/export.h"

#include <c10/util/hash.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/io/atomic_file.h"
#include "common/format/checkpoint_manifest.h"
#include "common/format/safetensors.h"
#include "common/crypto/sha256.h"
#include "worker/trainer/checkpoint/checkpoint.h"
#include "worker/trainer/errors.h"
#include "worker/trainer/models/pretrained.h"

namespace nightshift::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The file at `path`, opened beneath `roots` (io::OpenFileBeneath; empty: anywhere).
std::string ReadFile(const std::string& path, const std::vector<std::string>& roots = {}) {
  std::string bytes;
  if (std::string e = io::ReadFileBeneath(roots, path, uint64_t{1} << 34, &bytes); !e.empty())
    throw std::runtime_error(e);
  return bytes;
}

bool StartsWith(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// gpt_lm: our names -> GPT-2's, and whether the tensor is a Conv1D weight (stored [in, out]).
struct Gpt2Name {
  std::string name;
  bool transposed = false;
};

// "" when the tensor is not stored (the head, tied to wte).
Gpt2Name ToGpt2(const std::string& ours) {
  if (ours == "tok_emb.weight") return {"transformer.wte.weight"};
  if (ours == "pos_emb.weight") return {"transformer.wpe.weight"};
  if (ours == "ln_f.weight" || ours == "ln_f.bias") return {"transformer." + ours};
  if (ours == "head.weight") return {""};
  if (!StartsWith(ours, "blocks.")) throw std::runtime_error("export: unexpected gpt_lm tensor " + ours);
  const size_t dot = ours.find('.', 7);
  const std::string layer = ours.substr(7, dot - 7), rest = ours.substr(dot + 1);
  const std::string module = rest.substr(0, rest.find('.')), kind = rest.substr(rest.find('.') + 1);
  static const std::map<std::string, std::string> kModules = {
      {"ln1", "ln_1"}, {"qkv", "attn.c_attn"}, {"proj", "attn.c_proj"},
      {"ln2", "ln_2"}, {"fc1", "mlp.c_fc"},    {"fc2", "mlp.c_proj"}};
  const auto it = kModules.find(module);
  if (it == kModules.end()) throw std::runtime_error("export: unexpected gpt_lm tensor " + ours);
  const bool linear = module != "ln1" && module != "ln2";
  return {"transformer.h." + layer + "." + it->second + "." + kind, linear && kind == "weight"};
}

// checksums.json's digest of `bytes`: SHA-256 for what we write; SHA-1 in folders written
// before it (c10's, as LibTorch has it).
std::string DigestHex(const std::string& algorithm, const std::string& bytes) {
  return algorithm == "sha1" ? c10::sha1(bytes).str() : crypto::Sha256Hex(bytes);
}

json ConfigJson(const TrainConfig& c, const ExportInfo& info) {
  const ModelConfig& m = c.model;
  const DataConfig& d = c.data;
  json metrics = json::object();
  for (const auto& [k, v] : info.metrics)
    if (std::isfinite(v)) metrics[k] = v;
  json j = {{"format", kModelFormat}, {"version", kModelFormatVersion}, {"arch", m.arch},
            {"layers", m.layers}, {"d_model", m.d_model}, {"heads", m.heads}, {"ffn", m.ffn},
            {"max_len", m.max_len}, {"dropout", m.dropout}, {"attention_dropout", m.attention_dropout},
            {"vocab_size", d.vocab_size}, {"num_classes", d.num_classes}, {"labels", d.class_names},
            {"pad_id", d.pad_id}, {"bos_id", d.bos_id}, {"eos_id", d.eos_id},
            {"tensor_names", m.arch == "gpt_lm" ? "gpt2" : "nightshift"},
            {"job_id", info.job_id}, {"step", info.step}, {"metrics", metrics}};
  if (m.arch == "transformer_classifier") j["pooling"] = m.pooling;
  if (m.arch == "gpt_lm") {  // what transformers' GPT2Config reads
    j.update({{"model_type", "gpt2"}, {"architectures", {"GPT2LMHeadModel"}}, {"n_embd", m.d_model},
              {"n_layer", m.layers}, {"n_head", m.heads}, {"n_inner", m.ffn}, {"n_positions", m.max_len},
              {"n_ctx", m.max_len}, {"activation_function", "gelu_new"}, {"layer_norm_epsilon", 1e-5},
              {"resid_pdrop", m.dropout}, {"embd_pdrop", m.dropout}, {"attn_pdrop", m.attention_dropout},
              {"tie_word_embeddings", true}, {"bos_token_id", d.bos_id}, {"eos_token_id", d.eos_id},
              {"pad_token_id", d.pad_id}, {"torch_dtype", "float32"}});
  }
  return j;
}

json ReadJsonFile(const std::string& path, const std::vector<std::string>& roots = {}) {
  try {
    return json::parse(ReadFile(path, roots));
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

// The spec's dropout (hf::JobModel applies it) under the model type's config.json keys,
// so that training on in transformers uses what the job used.
void SetDropout(const ModelConfig& m, const std::string& model_type, json* j) {
  const bool distil = model_type == "distilbert";
  if (model_type == "gpt2") {
    if (m.dropout >= 0) (*j)["resid_pdrop"] = (*j)["embd_pdrop"] = m.dropout;
    if (m.attention_dropout > 0) (*j)["attn_pdrop"] = m.attention_dropout;
    return;
  }
  if (model_type == "llama" || model_type == "mistral" || model_type == "qwen2") {
    if (m.attention_dropout > 0) (*j)["attention_dropout"] = m.attention_dropout;
    return;
  }
  if (m.dropout >= 0) {
    (*j)[distil ? "dropout" : "hidden_dropout_prob"] = m.dropout;
    (*j)[distil ? "seq_classif_dropout" : "classifier_dropout"] = m.dropout;
  }
  if (m.attention_dropout > 0) (*j)[distil ? "attention_dropout" : "attention_probs_dropout_prob"] = m.attention_dropout;
}

// arch pretrained: the source folder's config.json as transformers saves a fine-tuned
// model's (its ...ForSequenceClassification with the data's labels, or its ...ForCausalLM;
// float32 weights), with our keys beside for our readers (transformers keeps keys it does
// not know as attributes).
json PretrainedConfigJson(const TrainConfig& c, const ExportInfo& info) {
  const std::string source = c.model.pretrained + "/config.json";
  json j = ReadJsonFile(source, c.model.data_roots);
  if (!j.is_object()) throw std::runtime_error("export: " + source + " is not a JSON object");
  const std::string task = c.model.task.empty() ? "classification" : c.model.task;
  j["architectures"] = json::array({hf::PretrainedClassName(j.value("model_type", ""), task)});
  if (task == "classification") {
    json id2label = json::object(), label2id = json::object();
    for (size_t i = 0; i < c.data.class_names.size(); ++i) {
      id2label[std::to_string(i)] = c.data.class_names[i];
      label2id[c.data.class_names[i]] = i;
    }
    j["id2label"] = id2label;
    j["label2id"] = label2id;
    j.erase("num_labels");  // transformers derives it from id2label
  }
  for (const char* key : {"torch_dtype", "dtype"}) j.erase(key);
  j["dtype"] = "float32";
  SetDropout(c.model, j.value("model_type", ""), &j);
  json metrics = json::object();
  for (const auto& [k, v] : info.metrics)
    if (std::isfinite(v)) metrics[k] = v;
  j.update({{"format", kModelFormat}, {"version", kModelFormatVersion}, {"arch", c.model.arch},
            {"max_len", c.model.max_len}, {"labels", c.data.class_names}, {"num_classes", c.data.num_classes},
            {"task", task},
            {"job_id", info.job_id}, {"step", info.step}, {"metrics", metrics}});
  return j;
}

void WriteChecked(const fs::path& path, const std::string& bytes, json* files) {
  if (std::string err = io::WriteFileAtomically(path.string(), bytes); !err.empty())
    throw std::runtime_error("export: " + err);
  const std::string digest = DigestHex(crypto::kChecksumAlgorithm, bytes);
  (*files)[path.filename().string()] = {{"bytes", bytes.size()}, {crypto::kChecksumAlgorithm, digest}};
}

// arch pretrained: the tokenizer files of the source folder that are there (and its
// generation settings), so that AutoTokenizer.from_pretrained(export) is the job's tokenizer
// and generate() stops where the folder's did; tokenizer.json or tokenizer.model must be.
void CopyTokenizerFiles(const std::string& source, const std::vector<std::string>& roots, const fs::path& dir,
                        json* files) {
  static const char* kFiles[] = {"tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                                 "special_tokens_map.json", "added_tokens.json", "vocab.txt", "vocab.json",
                                 "merges.txt", "generation_config.json"};
  bool tokenizer = false;
  for (const char* name : kFiles) {
    const fs::path from = fs::path(source) / name;
    std::error_code ec;
    if (!fs::is_regular_file(from, ec)) continue;
    WriteChecked(dir / name, ReadFile(from.string(), roots), files);
    tokenizer |= std::string(name) == "tokenizer.json" || std::string(name) == "tokenizer.model";
  }
  if (!tokenizer) throw std::runtime_error("export: " + source + " has neither tokenizer.json nor tokenizer.model");
}

// Copies tensor `name` of `weights` (stored [in, out] when transposed) into `param`,
// checking its shape.
void CopyTensor(const HfWeights& weights, const std::string& name, bool transposed, torch::Tensor& param) {
  if (!weights.contains(name)) throw std::runtime_error("model.safetensors has no tensor " + name);
  std::vector<int64_t> shape = weights.shape(name);
  if (transposed && shape.size() == 2) std::swap(shape[0], shape[1]);
  if (c10::IntArrayRef(shape) != param.sizes())
    throw std::runtime_error("model.safetensors: " + name + " has shape " + c10::str(c10::IntArrayRef(weights.shape(name))) +
                             " but the model's is " + c10::str(param.sizes()));
  torch::Tensor into = transposed ? param.t() : param;
  weights.CopyTo(name, into);
}

}  // namespace

std::vector<ExportEntry> ExportEntries(const std::string& arch, SequenceModel& model) {
  std::vector<ExportEntry> out;
  for (const auto& p : model.named_parameters()) {
    const Gpt2Name g = arch == "gpt_lm" ? ToGpt2(p.key()) : Gpt2Name{p.key()};
    if (!g.name.empty()) out.push_back({g.name, p.value(), g.transposed});  // empty: tied
  }
  return out;
}

torch::Tensor ExportEntry::Values() const {
  torch::Tensor t = param.detach().to(torch::kCPU, torch::kFloat32);
  return (transposed ? t.t() : t).contiguous();
}

std::map<std::string, torch::Tensor> ExportTensors(const std::string& arch, SequenceModel& model) {
  std::map<std::string, torch::Tensor> out;
  for (const ExportEntry& e : ExportEntries(arch, model)) out[e.name] = e.Values();
  return out;
}

void LoadExportTensors(const std::string& arch, const HfWeights& weights, SequenceModel& model,
                       const std::function<void(const torch::Tensor&)>& before) {
  torch::NoGradGuard no_grad;
  size_t used = 0;
  for (auto& p : model.named_parameters()) {
    Gpt2Name g = arch == "gpt_lm" ? ToGpt2(p.key()) : Gpt2Name{p.key()};
    if (g.name.empty()) continue;  // tied
    if (before) before(p.value());
    CopyTensor(weights, g.name, g.transposed, p.value());
    ++used;
  }
  if (used != weights.names().size()) {
    for (const std::string& name : weights.names()) {
      bool known = false;
      for (const auto& p : model.named_parameters())
        known |= (arch == "gpt_lm" ? ToGpt2(p.key()).name : p.key()) == name;
      if (!known) throw std::runtime_error("model.safetensors has a tensor the model lacks: " + name);
    }
  }
}

namespace {

// The file `path` of `entries` in their order, entry i's data from tensor(i) (CPU,
// contiguous, of the entry's dtype and shape), read one at a time: never the whole
// model in memory. Returns the file's SHA-256.
std::string WriteSafetensorsEntries(const std::string& path, std::vector<format::SafetensorsTensor> entries,
                                    const std::function<torch::Tensor(size_t)>& tensor) {
  io::AtomicFileWriter out(path);
  crypto::Sha256 sha;
  auto append = [&](const char* data, size_t n) {
    if (std::string err = out.Append(data, n); !err.empty()) throw std::runtime_error("export: " + err);
    sha.Update(std::string_view(data, n));
  };
  const std::string header = format::SafetensorsHeaderBytes(&entries, {{"format", "pt"}});
  append(header.data(), header.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const torch::Tensor c = tensor(i);
    if (static_cast<uint64_t>(c.nbytes()) != entries[i].end - entries[i].begin)
      throw std::logic_error("export: " + entries[i].name + " has " + std::to_string(c.nbytes()) + " bytes, not its header's");
    append(static_cast<const char*>(c.data_ptr()), c.nbytes());
  }
  if (std::string err = out.Commit(); !err.empty()) throw std::runtime_error("export: " + err);
  return sha.HexDigest();
}

}  // namespace

std::string WriteSafetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors) {
  std::vector<format::SafetensorsTensor> entries;
  std::vector<const torch::Tensor*> values;
  for (const auto& [name, t] : tensors) {
    const torch::ScalarType type = t.scalar_type();
    if (type != torch::kFloat32 && type != torch::kBFloat16 && type != torch::kFloat16)
      throw std::runtime_error("safetensors: " + name + " is not float32, bfloat16 or float16");
    entries.push_back({name, type == torch::kFloat32 ? format::DType::kF32 : type == torch::kBFloat16 ? format::DType::kBF16 : format::DType::kF16,
                       t.sizes().vec()});
    values.push_back(&t);
  }
  return WriteSafetensorsEntries(path, std::move(entries), [&](size_t i) { return values[i]->cpu().contiguous(); });
}

std::string WriteExportSafetensors(const std::string& path, const std::vector<ExportEntry>& entries,
                                   const std::function<void(const torch::Tensor&)>& before) {
  std::vector<format::SafetensorsTensor> header;
  for (const ExportEntry& e : entries) {
    std::vector<int64_t> shape = e.param.sizes().vec();
    if (e.transposed) std::reverse(shape.begin(), shape.end());
    header.push_back({e.name, format::DType::kF32, shape});
  }
  return WriteSafetensorsEntries(path, std::move(header), [&](size_t i) {
    if (before) before(entries[i].param);
    return entries[i].Values();
  });
}

std::map<std::string, torch::Tensor> ReadSafetensors(const std::string& path, const std::vector<std::string>& roots) {
  const HfWeights weights = HfWeights::OpenFile(path, roots);  // one reader of safetensors: hf_weights.h
  std::map<std::string, torch::Tensor> out;
  for (const std::string& name : weights.names()) out[name] = weights.Float(name);
  return out;
}

std::string VerifyModelFolder(const std::string& dir, const std::vector<std::string>& roots) {
  json sums;
  try {
    sums = json::parse(ReadFile(dir + "/checksums.json", roots));
    const std::string algorithm = sums.value("algorithm", "");
    if (algorithm != crypto::kChecksumAlgorithm && algorithm != "sha1")
      return dir + "/checksums.json: algorithm \"" + algorithm + "\" is neither \"sha256\" nor \"sha1\"";
    for (const auto& [name, f] : sums.at("files").items()) {
      // A name is a file in this folder: "../../../../dev/zero" would read without end.
      if (!format::IsPlainFileName(name) || name == "checksums.json")
        return dir + "/checksums.json lists '" + name + "', which is not a plain file name in the folder";
      const std::string path = dir + "/" + name;
      const uint64_t size = f.at("bytes").get<uint64_t>();
      // SHA-256 as the file streams in (a model's weights are never in memory whole);
      // SHA-1 (c10's, of the whole bytes) only for folders written before it.
      std::string bytes;
      crypto::Sha256 sha;
      uint64_t read = 0;
      const auto chunk = [&](std::string_view piece) {
        read += piece.size();
        if (algorithm == "sha1") bytes.append(piece);
        else sha.Update(piece);
      };
      if (std::string err = io::ScanFileBeneath(roots, path, size, chunk); !err.empty())
        return err + " (by checksums.json)";
      if (read != size)
        return path + " has " + std::to_string(read) + " bytes, checksums.json says " + f.at("bytes").dump();
      if ((algorithm == "sha1" ? DigestHex(algorithm, bytes) : sha.HexDigest()) != f.at(algorithm).get<std::string>())
        return path + " does not match its " + algorithm + " in checksums.json";
    }
  } catch (const std::exception& e) {
    return dir + "/checksums.json: " + e.what();
  }
  return "";
}

void InitFromExport(const std::string& dir, const TrainConfig& config, SequenceModel& model,
                    const std::function<void(const torch::Tensor&)>& before) {
  const std::string what = "model.init_from " + dir;
  const std::vector<std::string>& roots = config.model.data_roots;
  if (std::string err = VerifyModelFolder(dir, roots); !err.empty()) throw PermanentError(what + ": " + err);
  const json c = ReadJsonFile(dir + "/config.json", roots);
  if (c.value("format", "") != kModelFormat || c.value("version", 0) != kModelFormatVersion)
    throw PermanentError(what + ": config.json is not a nightshift-model version " +
                             std::to_string(kModelFormatVersion));
  const std::string source = c.value("arch", ""), target = config.model.arch;
  if (source == "pretrained")
    throw PermanentError(what + ": a Hugging Face folder: start from it with model.pretrained: " + dir);
  const bool trunk_only = target == "transformer_classifier" && source == "gpt_lm";
  if (target == "torchscript" || (source != target && !trunk_only))
    throw PermanentError(what + ": a " + source + " model cannot start a " + target +
                             " job (same architecture, or a transformer_classifier from a gpt_lm trunk)");
  const ModelConfig& m = config.model;
  const std::pair<const char*, int64_t> sizes[] = {
      {"model.layers", m.layers},   {"model.d_model", m.d_model},           {"model.heads", m.heads},
      {"model.ffn", m.ffn},         {"model.max_len", m.max_len},
      {"data.tokenizer.vocab_size", config.data.vocab_size},
      {"data.num_classes", trunk_only ? -1 : config.data.num_classes}};
  for (const auto& [field, ours] : sizes) {
    const std::string key = std::string(field).substr(std::string(field).rfind('.') + 1);
    if (ours < 0 || !c.contains(key)) continue;
    if (c.at(key).get<int64_t>() != ours)
      throw PermanentError(what + ": spec." + field + " is " + std::to_string(ours) +
                               " but the exported model's " + key + " is " + c.at(key).dump());
  }
  // The file mapped: each tensor read as it is copied (its pages dropped after).
  const HfWeights weights = HfWeights::OpenFile(dir + "/model.safetensors", roots);
  if (!trunk_only) return LoadExportTensors(source, weights, model, before);
  torch::NoGradGuard no_grad;  // the classifier's trunk from GPT-2's names; its head stays new
  for (auto& p : model.named_parameters()) {
    if (StartsWith(p.key(), "head.")) continue;
    const Gpt2Name g = ToGpt2(p.key());
    if (before) before(p.value());
    CopyTensor(weights, g.name, g.transposed, p.value());
  }
}

// An empty folder beside `dir` that an export fills before CommitExportFolder.
fs::path NewExportFolder(const std::string& dir) {
  const fs::path tmp = dir + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (!fs::create_directories(tmp, ec)) throw std::runtime_error("export: cannot create " + tmp.string() + ": " + ec.message());
  return tmp;
}

// Writes checksums.json of `files` into `tmp`, then puts `tmp` in the place of `dir` at once.
void CommitExportFolder(const fs::path& tmp, const std::string& dir, const json& files) {
  const json sums = {{"algorithm", crypto::kChecksumAlgorithm}, {"files", files}};
  if (std::string err = io::WriteFileAtomically((tmp / "checksums.json").string(), sums.dump(2) + "\n"); !err.empty())
    throw std::runtime_error("export: " + err);
  const fs::path final_dir = dir;
  std::error_code ec;
  fs::remove_all(final_dir, ec);
  fs::rename(tmp, final_dir, ec);
  if (ec) throw std::runtime_error("export: cannot rename " + tmp.string() + " to " + final_dir.string() + ": " + ec.message());
  if (std::string err = io::SyncDirectory(final_dir.parent_path().string()); !err.empty())
    throw std::runtime_error("export: " + err);
}

void ExportModel(const std::string& dir, const TrainConfig& config, SequenceModel& model, const ExportInfo& info,
                 const std::function<void(const torch::Tensor&)>& before) {
  const fs::path tmp = NewExportFolder(dir);
  json files = json::object();
  const bool pretrained = config.model.arch == "pretrained";
  const fs::path weights = tmp / "model.safetensors";
  const std::string digest =
      WriteExportSafetensors(weights.string(), ExportEntries(config.model.arch, model), before);
  files["model.safetensors"] = {{"bytes", fs::file_size(weights)}, {crypto::kChecksumAlgorithm, digest}};
  const json config_json = pretrained ? PretrainedConfigJson(config, info) : ConfigJson(config, info);
  WriteChecked(tmp / "config.json", config_json.dump(2) + "\n", &files);
  if (pretrained) {
    CopyTokenizerFiles(config.model.pretrained, config.model.data_roots, tmp, &files);
  } else if (!info.tokenizer_model.empty()) {
    WriteChecked(tmp / "tokenizer.model", ReadFile(info.tokenizer_model), &files);
  }
  if (std::ostringstream scripted; model.SaveScripted(scripted))
    WriteChecked(tmp / "model.pt", scripted.str(), &files);
  CommitExportFolder(tmp, dir, files);
}

void ExportPeftAdapter(const std::string& dir, torch::nn::Module& model, const hf::AdapterConfig& adapter,
                       const std::string& task, const std::string& base_model) {
  const fs::path tmp = NewExportFolder(dir);
  json files = json::object();
  std::map<std::string, torch::Tensor> tensors;
  bool conv1d = false;
  for (const auto& p : model.named_parameters()) {
    if (!p.value().requires_grad()) continue;
    tensors[hf::PeftTensorName(p.key())] = p.value().detach().to(torch::kCPU, torch::kFloat32);
  }
  for (const auto& m : model.named_modules("", false)) conv1d = conv1d || dynamic_cast<hf::Conv1DImpl*>(m.value().get());
  const fs::path weights = tmp / "adapter_model.safetensors";
  const std::string digest = WriteSafetensors(weights.string(), tensors);
  files["adapter_model.safetensors"] = {{"bytes", fs::file_size(weights)}, {crypto::kChecksumAlgorithm, digest}};
  // PEFT's keys for a LoRA adapter (LoraConfig.to_dict): what PeftModel.from_pretrained
  // reads; keys left out take PEFT's defaults there.
  const json config = {
      {"peft_type", "LORA"},
      {"task_type", task == "causal_lm" ? "CAUSAL_LM" : "SEQ_CLS"},
      {"base_model_name_or_path", base_model},
      {"r", adapter.lora.r},
      {"lora_alpha", adapter.lora.alpha},
      {"lora_dropout", adapter.lora.dropout},
      {"use_rslora", adapter.lora.rslora},
      {"target_modules", adapter.target_modules},
      {"modules_to_save", adapter.modules_to_save.empty() ? json(nullptr) : json(adapter.modules_to_save)},
      {"fan_in_fan_out", conv1d},  // PEFT sets it for Conv1D (GPT-2), whatever was asked
      {"bias", "none"},
      {"lora_bias", false},
      {"use_dora", false},
      {"init_lora_weights", true},
      {"inference_mode", true}};
  WriteChecked(tmp / "adapter_config.json", config.dump(2, ' ', false) + "\n", &files);
  CommitExportFolder(tmp, dir, files);
}

std::string TokenizerOf(const TrainConfig& config) {
  if (!config.data.tokenizer_model.empty()) return config.data.tokenizer_model;
  std::error_code ec;
  for (const fs::path p : {fs::path(config.data.train_shard).parent_path() / "tokenizer.model",
                           fs::path(config.checkpoint_dir) / "model" / "tokenizer.model"})
    if (p.has_parent_path() && fs::is_regular_file(p, ec)) return p.string();
  return "";
}

void ExportJobAdapter(const std::string& dir, const TrainConfig& config, torch::nn::Module& model,
                      const hf::AttachedAdapter& attached) {
  hf::AdapterConfig a;
  a.lora = attached.lora;
  a.target_modules = attached.target_modules;
  a.modules_to_save = attached.modules_to_save;
  ExportPeftAdapter(dir, model, a, config.model.task.empty() ? "classification" : config.model.task,
                    config.model.pretrained);
}

void ExportCheckpoint(const std::string& dir, const TrainConfig& config, int64_t step) {
  hf::AttachedAdapter adapter;
  auto model = config.model.arch == "pretrained"
                   // an adapter's checkpoint holds what trains; the base comes from its folder
                   ? hf::JobModel(config, /*load_weights=*/!config.model.adapter.type.empty(), &adapter)
                   : BuildSequenceModel(config.model, config.data.vocab_size, config.data.num_classes, config.data.pad_id);
  CheckpointManager(CheckpointOptions{config.checkpoint_dir}).LoadModelAt(step, *model);
  ExportInfo info;
  info.job_id = config.job_id;
  info.step = step;
  info.tokenizer_model = TokenizerOf(config);
  if (!config.model.adapter.type.empty()) return ExportJobAdapter(dir, config, *model, adapter);
  ExportModel(dir, config, *model, info);
}

}  // namespace nightshift::trainer
