// A Hugging Face model folder as a classifier: the architecture its config.json names
// (bert.h, roberta.h, distilbert.h), built from its config and loaded with its weights.
#ifndef NIGHTSHIFT_WORKER_TRAINER_MODELS_PRETRAINED_H_
#define NIGHTSHIFT_WORKER_TRAINER_MODELS_PRETRAINED_H_

#include <memory>
#include <string>

#include "worker/trainer/hf_weights.h"
#include "worker/trainer/model.h"

namespace nightshift::trainer::hf {

// The ...ForSequenceClassification model of `config.model_type`, freshly initialised.
std::shared_ptr<SequenceModel> BuildClassifier(const HfConfig& config);

// dir/config.json's model with dir's weights (hf_weights.h: mapped, converted to float32
// per tensor; a missing classification head is initialised as transformers does). On the
// CPU, in training mode. Throws PermanentError naming the file, key or tensor.
std::shared_ptr<SequenceModel> LoadClassifier(const std::string& dir, HfConfig* config = nullptr);

}  // namespace nightshift::trainer::hf

#endif  // NIGHTSHIFT_WORKER_TRAINER_MODELS_PRETRAINED_H_
