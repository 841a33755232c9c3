#include "worker/trainer/models/mistral.h"

#include "worker/trainer/errors.h"

namespace nightshift::trainer::hf {
namespace {

const HfConfig& Checked(const HfConfig& c) {
  if (c.model_type != "mistral") throw PermanentError("MistralModel built from a \"" + c.model_type + "\" config.json");
  return c;
}

}  // namespace

MistralModelImpl::MistralModelImpl(const HfConfig& c) : LlamaModelImpl(Checked(c)) {}

}  // namespace nightshift::trainer::hf
