#include "worker/assignment.h"

namespace nightshift {

PrepOptions PrepOptionsFor(const v1::JobSpec& spec, const std::vector<std::string>& roots) {
  const v1::DataSpec& d = spec.data();
  PrepOptions o;
  o.path = d.path();
  o.format = d.format();
  o.text_field = d.text_field();
  o.label_field = d.label_field();
  o.max_samples = d.max_samples();
  o.validation_fraction = d.validation_fraction();
  o.seed = spec.train().seed();
  o.vocab_size = d.tokenizer().vocab_size();
  o.max_len = spec.model().max_len();
  o.classifier = spec.model().arch() != "gpt_lm";
  o.roots = roots;
  return o;
}

}  // namespace nightshift
