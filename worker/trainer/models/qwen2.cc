#include "worker/trainer/models/qwen2.h"

#include "worker/trainer/errors.h"

namespace nightshift::trainer::hf {
namespace {

const HfConfig& Checked(const HfConfig& c) {
  if (c.model_type != "qwen2") throw PermanentError("Qwen2Model built from a \"" + c.model_type + "\" config.json");
  return c;
}

}  // namespace

Qwen2ModelImpl::Qwen2ModelImpl(const HfConfig& c) : LlamaModelImpl(Checked(c)) {}

}  // namespace nightshift::trainer::hf
