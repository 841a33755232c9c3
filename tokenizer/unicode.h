// UTF-8 in and out, and the Unicode facts the tokenizers need, all from ICU.
#ifndef NIGHTSHIFT_TOKENIZER_UNICODE_H_
#define NIGHTSHIFT_TOKENIZER_UNICODE_H_

#include <string>
#include <string_view>

namespace nightshift::tokenizer {

// The code points of UTF-8 `bytes`; each ill-formed sequence (its maximal subpart) becomes
// one U+FFFD, as Python's bytes.decode("utf-8", errors="replace") does, so a mail that is
// not valid UTF-8 reads as the reference tokenizer's Python caller reads it.
std::u32string DecodeUtf8(std::string_view bytes);
std::string EncodeUtf8(std::u32string_view text);

}  // namespace nightshift::tokenizer

#endif  // NIGHTSHIFT_TOKENIZER_UNICODE_H_
