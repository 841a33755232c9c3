// Runs a model folder outside the platform: nightshift-predict's library part. Two kinds:
//
// - Our own export of a native model (config.json "format": "nightshift-model", arch
//   transformer_classifier or gpt_lm): text goes through the steps of the job's data
//   preparation (worker/data_prep.cc: at most max_len x 16 bytes, invalid UTF-8 to '?',
//   newlines and tabs to spaces, bos + sentencepiece pieces, cut to max_len) and the model
//   is the trainer's own module (model.h) with the folder's weights.
// - A Hugging Face folder (config.json model_type bert, roberta, distilbert: a classifier;
//   gpt2, llama, mistral, qwen2: a classifier or a causal LM, as its "architectures" says;
//   tokenizer.json), trained by us (arch "pretrained") or not: the raw text (at most
//   max_len x 64 bytes, as data preparation reads it for such a job) goes through the
//   folder's tokenizer (tokenizer/folder.h LoadFolder: its tokenizer.model, else its
//   tokenizer.json; the ids of transformers' tokenizer(text, truncation=True,
//   max_length=max_len)), and the model is
//   hf::LoadPretrained's (models/pretrained.h), labelled by config.json's id2label.
//
// Either way batches are planned like evaluation (batching.h PlanEval: length order, a
// padded-token budget) and the model runs in evaluation mode.
//
// sentencepiece and LibTorch share this process: Debian's libsentencepiece exports its
// private protobuf 3.14 (google::protobuf::*), while the wheel's libtorch_cpu keeps its
// protobuf hidden and exports only Arena::CreateMaybeMessage<onnx_torch::*> instances,
// which name types sentencepiece does not have; so no symbol is bound across the two.
#ifndef NIGHTSHIFT_WORKER_PREDICT_PREDICT_H_
#define NIGHTSHIFT_WORKER_PREDICT_PREDICT_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/format/text.h"
#include "worker/trainer/config.h"
#include "worker/trainer/models/model.h"

namespace sentencepiece {
class SentencePieceProcessor;
}
namespace nightshift::tokenizer {
class TextTokenizer;
}

namespace nightshift::trainer {

struct PredictorOptions {
  std::string device = "auto";  // auto | cpu | cuda (device.h PickDevice)
  int64_t max_tokens = 8192;    // padded tokens per batch (PlanEval's budget)
  // Check checksums.json first: required in our native folders; in a Hugging Face folder
  // (ours or not) checked when it has one.
  bool verify = true;
  // A PEFT LoRA adapter folder (a job's export with model.adapter, or PeftModel's
  // save_pretrained) run on the Hugging Face model folder: base plus adapter, its head
  // (modules_to_save) included. "": the folder alone.
  std::string adapter;
};

class Predictor {
 public:
  // Loads dir (checksums verified, config.json read, weights into the trainer's module).
  // Returns "" and sets *out, or what is wrong, naming the file (and key).
  static std::string Open(const std::string& dir, const PredictorOptions& options,
                          std::unique_ptr<Predictor>* out);
  ~Predictor();

  // transformer_classifier | gpt_lm | pretrained (a Hugging Face folder).
  const std::string& arch() const { return model_config_.arch; }
  // A language model (gpt_lm, or a Hugging Face ...ForCausalLM): --score and --generate.
  bool causal_lm() const { return arch() == "gpt_lm" || model_config_.task == "causal_lm"; }
  const std::vector<std::string>& labels() const { return labels_; }
  // Tokens per row. A Hugging Face folder: our export's max_len, else the shorter of its
  // position table (hf::MaxRowLength) and tokenizer_config.json's model_max_length.
  int64_t max_len() const { return model_config_.max_len; }
  // Bytes of a text that are read: max_len x 16 (cleaned, sentencepiece), x 64 (raw, tokenizer.json).
  size_t max_bytes() const {
    return static_cast<size_t>(model_config_.max_len) *
           (hf_tokenizer_ ? format::kRawBytesPerToken : format::kCleanBytesPerToken);
  }
  const torch::Device& device() const { return device_; }

  // The row of a raw text as the job's data preparation makes it (either kind above).
  std::vector<int32_t> EncodeText(const std::string& raw_text) const;

  // Token ids of a (cleaned) text as data preparation makes them: bos and pieces, at most
  // max_len for a classifier; for a language model max_len + 1 with eos when there is room.
  std::vector<int32_t> Encode(const std::string& clean_text) const;
  std::vector<int32_t> Pieces(const std::string& clean_text) const;
  std::string Decode(const std::vector<int32_t>& ids) const;

  // Logits of each row in input order (rows cut to max_len), float on the CPU: [C] per
  // row for a classifier, [L, V] for a language model.
  std::vector<torch::Tensor> Logits(const std::vector<std::vector<int32_t>>& rows);

  // Language models: exp(mean next-token cross-entropy) of the row (cut to max_len);
  // NaN for rows shorter than 2 tokens.
  std::vector<double> Perplexity(const std::vector<std::vector<int32_t>>& rows);
  // Continues the prompt's row (gpt_lm: bos + pieces(cleaned prompt); a Hugging Face
  // folder: EncodeText(prompt), its special tokens included) by up to `new_tokens` tokens,
  // stopping at eos (config.json's eos_token_id for a Hugging Face folder, included in
  // new_ids); greedy for temperature <= 0 (model.generate(do_sample=False)), else sampling
  // from softmax(logits / temperature), top_k > 0 keeping the k likeliest. A Hugging Face
  // decoder runs the prompt once and each new token over its key/value cache (decoder.h).
  struct Generation {
    std::vector<int32_t> prompt_ids, new_ids;
    // gpt_lm: prompt and continuation decoded as one; a Hugging Face folder: the
    // continuation alone, its special tokens skipped ("" when its decoder is not one we have).
    std::string text;
  };
  // use_cache false (benchmarks): a Hugging Face decoder recomputes the whole sequence for
  // every new token instead; the same tokens.
  Generation Generate(const std::string& raw_prompt, int new_tokens, double temperature, int top_k,
                      std::optional<uint64_t> seed, bool use_cache = true);

 private:
  Predictor();
  PredictorOptions options_;
  ModelConfig model_config_;
  int64_t vocab_size_ = 0, num_classes_ = 0, pad_id_ = format::kPadId, bos_id_ = format::kBosId, eos_id_ = format::kEosId;
  std::vector<std::string> labels_;
  std::vector<int64_t> stop_ids_;  // a Hugging Face decoder's eos_token_id(s)
  torch::Device device_;
  std::shared_ptr<SequenceModel> model_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;  // null: the folder has no tokenizer.model
  std::unique_ptr<tokenizer::TextTokenizer> hf_tokenizer_;      // a Hugging Face folder's (tokenizer/folder.h)

  // The two kinds of folder (see the top): fill the fields above from dir/config.json `c`.
  std::string OpenNative(const std::string& dir, const nlohmann::json& c);
  std::string OpenHf(const std::string& dir, const nlohmann::json& c);
};

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_PREDICT_PREDICT_H_
