#include "worker/predict/predict.h"

#include <cstring>

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>

#include "common/format/text.h"
#include "tokenizer/folder.h"
#include "worker/trainer/data/batching.h"
#include "worker/trainer/device.h"
#include "worker/trainer/checkpoint/export.h"
#include "worker/trainer/models/decoder.h"
#include "worker/trainer/models/pretrained.h"

namespace nightshift::trainer {

namespace {

// Padded tokens [B, L] and the padding mask, as batching.cc's Collate builds them.
std::pair<torch::Tensor, torch::Tensor> CollateRows(const std::vector<std::vector<int32_t>>& rows,
                                                    const std::vector<uint32_t>& indices, int64_t max_len,
                                                    int64_t pad_id) {
  const int64_t b = static_cast<int64_t>(indices.size());
  int64_t l = 1;
  for (uint32_t i : indices) l = std::max<int64_t>(l, std::min<int64_t>(rows[i].size(), max_len));
  auto tokens = torch::full({b, l}, pad_id, torch::kLong);
  auto pad = torch::ones({b, l}, torch::kBool);
  int64_t* tok = tokens.data_ptr<int64_t>();
  bool* p = pad.data_ptr<bool>();
  for (int64_t r = 0; r < b; ++r) {
    const auto& row = rows[indices[r]];
    const int64_t n = std::min<int64_t>(row.size(), max_len);
    for (int64_t c = 0; c < n; ++c) {
      tok[r * l + c] = row[c];
      p[r * l + c] = false;
    }
    p[r * l] = false;  // never a whole row of padding
  }
  return {tokens, pad};
}

template <typename T>
T Get(const nlohmann::json& j, const char* key, T fallback) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : it->get<T>();
}

// A Hugging Face folder without our max_len: the position table's rows, or fewer when
// tokenizer_config.json's model_max_length says so (what transformers truncates to when
// asked for truncation without a length; a folder without one saves a huge number).
int64_t HfMaxLen(const std::string& dir, const HfConfig& config) {
  int64_t max_len = hf::MaxRowLength(config);
  std::ifstream in(dir + "/tokenizer_config.json");
  const auto tc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  const auto it = tc.is_object() ? tc.find("model_max_length") : tc.end();
  if (it != tc.end() && it->is_number() && it->get<double>() >= 1 && it->get<double>() < max_len)
    max_len = static_cast<int64_t>(it->get<double>());
  return max_len;
}

}  // namespace

Predictor::Predictor() : device_(torch::kCPU) {}
Predictor::~Predictor() = default;

std::string Predictor::Open(const std::string& dir, const PredictorOptions& options,
                            std::unique_ptr<Predictor>* out) {
  namespace fs = std::filesystem;
  std::unique_ptr<Predictor> p(new Predictor());
  p->options_ = options;
  if (!fs::is_directory(dir)) return dir + ": not a directory (a model folder from `nightshift job artifacts`)";
  const std::string config_path = dir + "/config.json";
  std::ifstream in(config_path);
  if (!in) return "cannot read " + config_path;
  nlohmann::json c = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!c.is_object()) return config_path + ": not a JSON object";
  // Our native folders always have checksums.json; a Hugging Face folder has one when we
  // exported it, but not once transformers saved it again (our keys stay in its config).
  const bool native = Get<std::string>(c, "format", "") == kModelFormat && Get<std::string>(c, "arch", "") != "pretrained";
  if (options.verify && (native || fs::exists(dir + "/checksums.json"))) {
    if (std::string err = VerifyModelFolder(dir); !err.empty()) return dir + ": " + err;
  }
  if (native && !options.adapter.empty())
    return "--adapter: only on a Hugging Face model folder; " + dir + " is a native one";
  if (std::string err = native ? p->OpenNative(dir, c) : p->OpenHf(dir, c); !err.empty()) return err;
  if (std::string err = PickDevice(options.device, 0, &p->device_); !err.empty()) return "--device: " + err;
  p->model_->eval();
  p->model_->to(p->device_);
  *out = std::move(p);
  return "";
}

std::string Predictor::OpenNative(const std::string& dir, const nlohmann::json& c) {
  namespace fs = std::filesystem;
  const std::string config_path = dir + "/config.json";
  if (Get<int>(c, "version", 0) > kModelFormatVersion)
    return config_path + ": not a " + std::string(kModelFormat) + " folder of version <= " +
           std::to_string(kModelFormatVersion);
  try {
    ModelConfig& m = model_config_;
    m.arch = Get<std::string>(c, "arch", "");
    if (m.arch != "transformer_classifier" && m.arch != "gpt_lm")
      return config_path + ": arch '" + m.arch + "' cannot be run here (transformer_classifier, gpt_lm, pretrained)";
    m.layers = c.at("layers").get<int>();
    m.d_model = c.at("d_model").get<int>();
    m.heads = c.at("heads").get<int>();
    m.ffn = Get<int>(c, "ffn", 0);
    if (m.ffn == 0) m.ffn = 4 * m.d_model;
    m.max_len = c.at("max_len").get<int>();
    m.pooling = c.value("pooling", "cls");  // folders from before model.pooling pool cls
    m.dropout = Get<double>(c, "dropout", 0.0);
    m.attention_dropout = Get<double>(c, "attention_dropout", 0.0);
    vocab_size_ = c.at("vocab_size").get<int64_t>();
    num_classes_ = Get<int64_t>(c, "num_classes", 0);
    pad_id_ = Get<int64_t>(c, "pad_id", format::kPadId);
    bos_id_ = Get<int64_t>(c, "bos_id", format::kBosId);
    eos_id_ = Get<int64_t>(c, "eos_id", format::kEosId);
    labels_ = Get<std::vector<std::string>>(c, "labels", {});
  } catch (const nlohmann::json::exception& e) {
    return config_path + ": " + e.what();
  }
  if (labels_.empty())
    for (int64_t i = 0; i < num_classes_; ++i) labels_.push_back(std::to_string(i));
  try {
    model_ = BuildSequenceModel(model_config_, vocab_size_, num_classes_, pad_id_);
    LoadExportTensors(model_config_.arch, HfWeights::OpenFile(dir + "/model.safetensors"), *model_);
  } catch (const std::exception& e) {
    return dir + ": " + e.what();
  }
  const std::string tokenizer = dir + "/tokenizer.model";
  if (fs::exists(tokenizer)) {
    sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
    if (auto st = sp_->Load(tokenizer); !st.ok()) return "cannot load " + tokenizer + ": " + st.ToString();
  }
  return "";
}

std::string Predictor::OpenHf(const std::string& dir, const nlohmann::json& c) {
  if (tokenizer::Error e = tokenizer::LoadFolder(dir, &hf_tokenizer_); !e.empty()) return e;
  HfConfig config;
  hf::PretrainedOptions options;
  const auto architectures = c.find("architectures");  // GPT2LMHeadModel, LlamaForCausalLM, ...
  if (architectures != c.end() && architectures->is_array() && !architectures->empty() &&
      (*architectures)[0].is_string()) {
    const std::string name = (*architectures)[0].get<std::string>();
    for (const char* suffix : {"ForCausalLM", "LMHeadModel"})
      if (name.size() > std::strlen(suffix) && name.compare(name.size() - std::strlen(suffix), std::string::npos, suffix) == 0)
        options.task = "causal_lm";
  }
  try {
    model_ = hf::LoadPretrained(dir, options, &config);  // names config.json's key, or the weights' file and tensor
    if (const std::string& adapter = options_.adapter; !adapter.empty()) {
      if (options_.verify && std::filesystem::exists(adapter + "/checksums.json"))
        if (std::string err = VerifyModelFolder(adapter); !err.empty()) return adapter + ": " + err;
      hf::AttachLora(*model_, config, options.task.empty() ? "classification" : options.task,
                     hf::ReadPeftAdapterConfig(adapter));
      hf::LoadPeftAdapter(adapter, *model_);  // names a tensor the model lacks (a head of another size)
    }
  } catch (const std::exception& e) {
    return e.what();
  }
  model_config_.arch = "pretrained";
  model_config_.task = options.task;
  stop_ids_ = config.eos_token_ids;
  model_config_.max_len = static_cast<int>(Get<int64_t>(c, "max_len", HfMaxLen(dir, config)));
  labels_ = config.labels;
  num_classes_ = static_cast<int64_t>(labels_.size());
  pad_id_ = config.pad_token_id.value_or(0);  // any id: the mask hides padding
  return "";
}

std::vector<int32_t> Predictor::EncodeText(const std::string& raw_text) const {
  if (!hf_tokenizer_) return Encode(format::CleanText(raw_text, max_bytes()));
  return hf_tokenizer_->Encode(std::string_view(raw_text).substr(0, max_bytes()), static_cast<size_t>(max_len()));
}

std::vector<int32_t> Predictor::Pieces(const std::string& clean_text) const {
  if (!sp_) throw std::runtime_error("the model folder has no tokenizer.model");
  std::vector<int> pieces;
  if (auto st = sp_->Encode(clean_text, &pieces); !st.ok()) throw std::runtime_error("cannot tokenize: " + st.ToString());
  return {pieces.begin(), pieces.end()};
}

std::vector<int32_t> Predictor::Encode(const std::string& clean_text) const {
  const bool classifier = arch() == "transformer_classifier";
  const size_t limit = static_cast<size_t>(classifier ? max_len() : max_len() + 1);
  std::vector<int32_t> v{static_cast<int32_t>(bos_id_)};
  for (int32_t piece : Pieces(clean_text)) {
    if (v.size() >= limit) break;
    v.push_back(piece);
  }
  if (!classifier && static_cast<int64_t>(v.size()) <= max_len()) v.push_back(static_cast<int32_t>(eos_id_));
  return v;
}

std::string Predictor::Decode(const std::vector<int32_t>& ids) const {
  if (!sp_) throw std::runtime_error("the model folder has no tokenizer.model");
  std::string text;
  sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  return text;
}

std::vector<torch::Tensor> Predictor::Logits(const std::vector<std::vector<int32_t>>& rows) {
  c10::InferenceMode guard;
  std::vector<uint32_t> lengths(rows.size());
  for (size_t i = 0; i < rows.size(); ++i)
    lengths[i] = static_cast<uint32_t>(std::min<int64_t>(rows[i].size(), max_len()));
  BatchPlanOptions plan_options;
  plan_options.max_tokens = options_.max_tokens;
  std::vector<torch::Tensor> out(rows.size());
  for (const auto& batch : PlanEval(lengths, plan_options)) {
    auto [tokens, pad] = CollateRows(rows, batch, max_len(), pad_id_);
    auto logits = model_->forward(tokens.to(device_), pad.to(device_)).to(torch::kCPU, torch::kFloat);
    for (size_t r = 0; r < batch.size(); ++r) {
      const uint32_t i = batch[r];
      out[i] = logits.dim() == 2 ? logits[r] : logits[r].narrow(0, 0, std::max<uint32_t>(lengths[i], 1));
    }
  }
  return out;
}

std::vector<double> Predictor::Perplexity(const std::vector<std::vector<int32_t>>& rows) {
  std::vector<double> out;
  std::vector<std::vector<int32_t>> cut;
  for (const auto& r : rows) cut.emplace_back(r.begin(), r.begin() + std::min<int64_t>(r.size(), max_len()));
  auto logits = Logits(cut);
  c10::InferenceMode guard;
  for (size_t i = 0; i < cut.size(); ++i) {
    const int64_t n = static_cast<int64_t>(cut[i].size());
    if (n < 2) {
      out.push_back(std::numeric_limits<double>::quiet_NaN());
      continue;
    }
    auto target = torch::tensor(std::vector<int64_t>(cut[i].begin() + 1, cut[i].end()), torch::kLong);
    auto nll = torch::nn::functional::cross_entropy(logits[i].narrow(0, 0, n - 1), target);
    out.push_back(std::exp(nll.item<double>()));
  }
  return out;
}

Predictor::Generation Predictor::Generate(const std::string& raw_prompt, int new_tokens, double temperature,
                                          int top_k, std::optional<uint64_t> seed, bool use_cache) {
  c10::InferenceMode guard;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed.value_or(std::random_device{}()));
  hf::TokenPicker pick = [&](const torch::Tensor& last) -> int64_t {  // last: float [V] on the CPU
    if (temperature <= 0) return last.argmax().item<int64_t>();
    auto logits = last / temperature;
    if (top_k > 0 && top_k < logits.numel()) {
      auto kth = std::get<0>(logits.topk(top_k)).select(0, top_k - 1);
      logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
    }
    return torch::multinomial(logits.softmax(-1), 1, false, gen).item<int64_t>();
  };
  Generation out;
  if (auto* decoder = dynamic_cast<hf::DecoderModelImpl*>(model_.get())) {
    out.prompt_ids = EncodeText(raw_prompt);
    if (out.prompt_ids.empty())
      throw std::runtime_error("--prompt gives no tokens with this folder's tokenizer (it adds no bos): give some text");
    const auto ids = hf::Generate(*decoder, {out.prompt_ids.begin(), out.prompt_ids.end()}, new_tokens, stop_ids_,
                                  use_cache, pick);
    out.new_ids.assign(ids.begin(), ids.end());
    // The continuation alone, as tok.decode(new_ids, skip_special_tokens=True); none where
    // the folder's decoder is one we lack (the ids are still there).
    if (hf_tokenizer_->CanDecode().empty()) out.text = hf_tokenizer_->Decode(out.new_ids);
    return out;
  }
  out.prompt_ids = {static_cast<int32_t>(bos_id_)};
  for (int32_t piece : Pieces(format::CleanText(raw_prompt, max_bytes()))) out.prompt_ids.push_back(piece);
  std::vector<int32_t> ids = out.prompt_ids;
  for (int step = 0; step < new_tokens; ++step) {
    const size_t from = ids.size() > static_cast<size_t>(max_len()) ? ids.size() - max_len() : 0;
    auto window = torch::tensor(std::vector<int64_t>(ids.begin() + from, ids.end()), torch::kLong).unsqueeze(0);
    auto pad = torch::zeros(window.sizes(), torch::kBool);
    const int64_t next = pick(model_->forward(window.to(device_), pad.to(device_)).select(0, 0).select(0, -1)
                                  .to(torch::kCPU, torch::kFloat));
    if (next == eos_id_) break;
    ids.push_back(static_cast<int32_t>(next));
    out.new_ids.push_back(static_cast<int32_t>(next));
  }
  out.text = Decode(std::vector<int32_t>(ids.begin() + 1, ids.end()));  // one decode: pieces keep their spaces
  return out;
}

}  // namespace nightshift::trainer
