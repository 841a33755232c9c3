// Runs an exported model folder (export.h) outside the platform: nightshift-predict's
// library part. Text goes through the steps of the job's data preparation
// (worker/data_prep.cc: at most max_len x 16 bytes, invalid UTF-8 to '?', newlines and
// tabs to spaces, bos + sentencepiece pieces, cut to max_len), batches are planned like
// evaluation (batching.h PlanEval: length order, a padded-token budget), and the model is
// the trainer's own module (model.h) with the folder's weights, in evaluation mode.
//
// sentencepiece and LibTorch share this process: Debian's libsentencepiece exports its
// private protobuf 3.14 (google::protobuf::*), while the wheel's libtorch_cpu keeps its
// protobuf hidden and exports only Arena::CreateMaybeMessage<onnx_torch::*> instances,
// which name types sentencepiece does not have; so no symbol is bound across the two.
#ifndef NIGHTSHIFT_WORKER_TRAINER_PREDICT_H_
#define NIGHTSHIFT_WORKER_TRAINER_PREDICT_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "worker/trainer/config.h"
#include "worker/trainer/model.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace nightshift::trainer {

// Texts are cleaned with format::CleanText (common/format/text.h), as data preparation does.
struct PredictorOptions {
  std::string device = "auto";  // auto | cpu | cuda (device.h PickDevice)
  int64_t max_tokens = 8192;    // padded tokens per batch (PlanEval's budget)
  bool verify = true;           // check checksums.json first
};

class Predictor {
 public:
  // Loads dir (checksums verified, config.json read, weights into the trainer's module).
  // Returns "" and sets *out, or what is wrong, naming the file.
  static std::string Open(const std::string& dir, const PredictorOptions& options,
                          std::unique_ptr<Predictor>* out);
  ~Predictor();

  const std::string& arch() const { return model_config_.arch; }
  const std::vector<std::string>& labels() const { return labels_; }
  int64_t max_len() const { return model_config_.max_len; }
  size_t max_bytes() const { return static_cast<size_t>(model_config_.max_len) * 16; }
  const torch::Device& device() const { return device_; }

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
  // Continues bos + pieces(prompt) by up to `new_tokens` tokens (stops at eos); greedy for
  // temperature <= 0, else sampling from softmax(logits / temperature), top_k > 0 keeps
  // the k likeliest. Returns the text of prompt and continuation, decoded as one.
  std::string Generate(const std::string& clean_prompt, int new_tokens, double temperature, int top_k,
                       std::optional<uint64_t> seed);

 private:
  Predictor();
  PredictorOptions options_;
  ModelConfig model_config_;
  int64_t vocab_size_ = 0, num_classes_ = 0, pad_id_ = format::kPadId, bos_id_ = format::kBosId, eos_id_ = format::kEosId;
  std::vector<std::string> labels_;
  torch::Device device_;
  std::shared_ptr<SequenceModel> model_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;  // null: the folder has no tokenizer
};

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_PREDICT_H_
