#include "worker/trainer/models/pretrained.h"

#include "worker/trainer/errors.h"
#include "worker/trainer/models/bert.h"
#include "worker/trainer/models/distilbert.h"
#include "worker/trainer/models/roberta.h"

namespace nightshift::trainer::hf {
namespace {

HfNameRules NameRules(const HfConfig& c) {
  if (c.model_type == "bert") return BertForSequenceClassificationImpl::NameRules(c);
  if (c.model_type == "roberta") return RobertaForSequenceClassificationImpl::NameRules(c);
  return DistilBertForSequenceClassificationImpl::NameRules(c);
}

}  // namespace

std::shared_ptr<SequenceModel> BuildClassifier(const HfConfig& c) {
  if (c.model_type == "bert") return BertForSequenceClassification(c).ptr();
  if (c.model_type == "roberta") return RobertaForSequenceClassification(c).ptr();
  if (c.model_type == "distilbert") return DistilBertForSequenceClassification(c).ptr();
  throw PermanentError("model_type \"" + c.model_type + "\" is not supported (bert, roberta, distilbert)");
}

std::shared_ptr<SequenceModel> LoadClassifier(const std::string& dir, HfConfig* config) {
  const HfConfig c = ReadHfConfig(dir);
  const HfWeights weights = HfWeights::Open(dir);  // every header checked before the model is built
  std::shared_ptr<SequenceModel> model = BuildClassifier(c);
  LoadHfWeights(weights, NameRules(c), *model);
  if (config != nullptr) *config = c;
  return model;
}

}  // namespace nightshift::trainer::hf
