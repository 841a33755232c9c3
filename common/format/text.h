// How a sample's text is cleaned before tokenization: the rule data preparation applies and
// every predictor (nightshift-predict, the Python package) must apply the same way, or a
// model sees other ids than it was trained on.
#ifndef NIGHTSHIFT_COMMON_FORMAT_TEXT_H_
#define NIGHTSHIFT_COMMON_FORMAT_TEXT_H_

#include <cstddef>
#include <string>

namespace nightshift::format {

// The first max_bytes bytes of `raw` (the caller may have read only those), each byte that
// is not part of valid UTF-8 (or is NUL) replaced by '?' (mail bodies are often Latin-1),
// and '\n', '\r', '\t' replaced by spaces (one text per line in the tokenizer's corpus).
std::string CleanText(const std::string& raw, size_t max_bytes);

// Bytes of a text read per token kept (max_len of them), by data preparation and by
// nightshift-predict alike: a cleaned text for sentencepiece; a raw text for a Hugging
// Face tokenizer.json, whose ids of a prefix equal the whole text's up to the word the
// prefix cuts, so it gets more.
inline constexpr size_t kCleanBytesPerToken = 16;
inline constexpr size_t kRawBytesPerToken = 64;

}  // namespace nightshift::format

#endif  // NIGHTSHIFT_COMMON_FORMAT_TEXT_H_
