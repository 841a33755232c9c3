// ParseHfConfig on arbitrary text: a Hugging Face folder's config.json, from a user's
// model.pretrained. Anything must be an error naming the file, never a crash, a hang or
// an allocation without bound; a config that parses gives sizes the trainer can build
// a model of (positive, within an int, heads dividing the hidden size), at least one
// label, and a padding id inside the vocabulary.
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>

#include "worker/trainer/models/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nightshift::trainer::HfConfig;
  HfConfig c;
  const std::string e =
      nightshift::trainer::ParseHfConfig(std::string(reinterpret_cast<const char*>(data), size), "config.json", &c);
  if (!e.empty()) {
    if (e.rfind("config.json: ", 0) != 0) __builtin_trap();  // every message names the file
    return 0;
  }
  for (int64_t v : {c.vocab_size, c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.intermediate_size,
                    c.max_position_embeddings})
    if (v < 1 || v > INT_MAX) __builtin_trap();
  if (c.hidden_size % c.num_attention_heads != 0 || c.labels.empty()) __builtin_trap();
  if (c.pad_token_id && (*c.pad_token_id < 0 || *c.pad_token_id >= c.vocab_size)) __builtin_trap();
  return 0;
}
