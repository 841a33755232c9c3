#include "tokenizer/unicode.h"

#include <unicode/utf8.h>

namespace nightshift::tokenizer {

std::u32string DecodeUtf8(std::string_view bytes) {
  std::u32string out;
  out.reserve(bytes.size());
  const auto* s = reinterpret_cast<const uint8_t*>(bytes.data());
  const int32_t length = static_cast<int32_t>(bytes.size());
  for (int32_t i = 0; i < length;) {
    UChar32 c;
    U8_NEXT(s, i, length, c);  // ICU >= 60: an ill-formed sequence advances by its maximal subpart
    out.push_back(c < 0 ? U'\uFFFD' : static_cast<char32_t>(c));
  }
  return out;
}

std::string EncodeUtf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) {
    uint8_t buf[4];
    int32_t n = 0;
    UBool error = false;
    U8_APPEND(buf, n, 4, static_cast<UChar32>(c), error);
    if (error) {  // a surrogate or beyond U+10FFFF: not a character
      n = 0;
      U8_APPEND_UNSAFE(buf, n, 0xFFFD);
    }
    out.append(reinterpret_cast<const char*>(buf), n);
  }
  return out;
}

}  // namespace nightshift::tokenizer
