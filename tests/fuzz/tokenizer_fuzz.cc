// Tokenizer::FromJson on arbitrary text (a Hugging Face folder's tokenizer.json, from a
// user's model.pretrained), then Encode of a few short texts and Decode of their ids and
// of ids past the vocabulary: errors are messages, never a crash, an exception, a hang or
// unbounded memory; an encoding with max_len stays within it whenever the special tokens
// fit.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nightshift::tokenizer::Tokenizer;
  std::unique_ptr<Tokenizer> tok;
  if (!Tokenizer::FromJson(std::string(reinterpret_cast<const char*>(data), size), &tok).empty()) return 0;
  static const char* const kTexts[] = {"", "Hello, world! [CLS] héllo <s> ünïcode\t123", "  a\xff\xfe b  ",
                                       "\xe4\xb8\xad\xe6\x96\x87 don't"};
  const bool decodes = tok->CanDecode().empty();
  for (const char* text : kTexts) {
    std::vector<int32_t> ids = tok->Encode(text);
    ids.push_back(static_cast<int32_t>(tok->VocabSize()));  // no such token: skipped
    ids.push_back(-1);
    if (decodes) (void)tok->Decode(ids), (void)tok->Decode(ids, false);
    const size_t specials = tok->Encode("").size();
    if (tok->Encode(text, 8).size() > std::max<size_t>(8, specials)) __builtin_trap();
  }
  (void)tok->VocabSize();
  (void)tok->TokenToId("[UNK]");
  return 0;
}
