// The ByteLevel pre-tokenizer of GPT-2 and RoBERTa, as `tokenizers` (0.23) runs it:
// optionally a space in front, then GPT-2's regular expression splits the text, then each
// piece's UTF-8 bytes are written as the printable characters of GPT-2's byte table, so
// the BPE model only ever sees those 256 characters.
#include <array>
#include <memory>
#include <string>
#include <vector>

#include <unicode/regex.h>
#include <unicode/unistr.h>

#include "tokenizer/components.h"

namespace nightshift::tokenizer {
namespace {

// GPT-2's regular expression, written for ICU. `tokenizers` compiles it with Oniguruma,
// where (UTF-8, Ruby syntax) \s is the Unicode White_Space property. ICU documents its \s
// as [\t\n\f\r\p{Z}], which would lack U+000B and U+0085 (ICU 72 in fact matches
// White_Space), so the property is spelled out: \s is \p{White_Space}, \S its complement.
// \p{L} and \p{N} are the general categories in both engines (byte_level_test checks all
// three classes against the reference's, code point by code point).
// Alternatives are tried in order and quantifiers are greedy with backtracking in both,
// so `\s+(?!\S)` leaves the last space of a run to the word after it in both.
constexpr char kGpt2Pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d"
    "| ?\\p{L}+| ?\\p{N}+| ?[^\\p{White_Space}\\p{L}\\p{N}]+"
    "|\\p{White_Space}+(?!\\P{White_Space})|\\p{White_Space}+";

// GPT-2's bytes_to_unicode: the printable bytes of Latin-1 ('!'..'~', 0xA1..0xAC,
// 0xAE..0xFF) stand for themselves; the 68 others, in increasing order, take U+0100,
// U+0101, ... (so a space is U+0120 'Ġ', a newline U+010A 'Ċ').
std::array<char32_t, 256> BuildByteToChar() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}

const std::array<char32_t, 256>& ByteToChar() {
  static const std::array<char32_t, 256> table = BuildByteToChar();
  return table;
}

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  // `pattern` is null when use_regex is false (the whole text is one word).
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<icu::RegexPattern> pattern)
      : add_prefix_space_(add_prefix_space), pattern_(std::move(pattern)) {}

  void Split(const std::u32string& text, std::vector<std::u32string>* words) const override {
    if (text.empty()) return;
    // The reference prepends only when the text does not start with U+0020 itself (a tab
    // or U+00A0 at the start still gets a space); an empty text stays empty.
    icu::UnicodeString utf16;
    if (add_prefix_space_ && text[0] != U' ') utf16.append(static_cast<UChar>(u' '));
    // Code points that are not characters (surrogates) become U+FFFD, as UTF-8 would.
    utf16.append(icu::UnicodeString::fromUTF32(reinterpret_cast<const UChar32*>(text.data()),
                                               static_cast<int32_t>(text.size())));
    if (pattern_ == nullptr) {
      AppendMapped(utf16, 0, utf16.length(), words);
      return;
    }
    SplitByPattern(utf16, words);
  }

 private:
  // Each match is a word and so is any text between matches (`tokenizers`' Isolated
  // split); with GPT-2's pattern every character matches, so there is none.
  void SplitByPattern(const icu::UnicodeString& utf16, std::vector<std::u32string>* words) const {
    UErrorCode status = U_ZERO_ERROR;
    // A matcher holds the position of one search: one per call, so Split is thread-safe
    // (a RegexPattern is immutable and may make matchers on several threads).
    std::unique_ptr<icu::RegexMatcher> matcher(pattern_->matcher(utf16, status));
    // Unbounded backtracking stack: no loop of this pattern backtracks per character,
    // but a limit would make a very long run of one class fail half-way.
    if (U_SUCCESS(status)) matcher->setStackLimit(0, status);
    int32_t done = 0;  // UTF-16 index up to which words were appended
    while (U_SUCCESS(status) && matcher->find(status) && U_SUCCESS(status)) {
      const int32_t start = matcher->start(status);
      const int32_t end = matcher->end(status);
      if (U_FAILURE(status)) break;
      if (start > done) AppendMapped(utf16, done, start, words);
      AppendMapped(utf16, start, end, words);
      done = end;
    }
    // Only running out of memory stops ICU early: the rest is then one word.
    if (done < utf16.length()) AppendMapped(utf16, done, utf16.length(), words);
  }

  static void AppendMapped(const icu::UnicodeString& utf16, int32_t start, int32_t end,
                           std::vector<std::u32string>* words) {
    if (start >= end) return;
    std::string bytes;
    utf16.tempSubStringBetween(start, end).toUTF8String(bytes);
    std::u32string word;
    word.reserve(bytes.size());
    for (unsigned char b : bytes) word.push_back(ByteToChar()[b]);
    words->push_back(std::move(word));
  }

  const bool add_prefix_space_;
  const std::unique_ptr<const icu::RegexPattern> pattern_;
};

// A boolean field: `fallback` when absent and `required` is false; null or another type
// is an error, as in the reference's serde (which has no default for the first two).
Error ReadBool(const Json& config, const char* key, bool required, bool fallback, bool* out) {
  const auto it = config.find(key);
  if (it == config.end()) {
    if (required) return std::string("ByteLevel pre_tokenizer: missing \"") + key + "\"";
    *out = fallback;
    return "";
  }
  if (!it->is_boolean())
    return std::string("ByteLevel pre_tokenizer: \"") + key + "\" must be true or false, not " +
           it->dump();
  *out = it->get<bool>();
  return "";
}

}  // namespace

Error NewByteLevelPreTokenizer(const Json& config, std::unique_ptr<PreTokenizer>* out) {
  if (!config.is_object()) return "ByteLevel pre_tokenizer: not a JSON object";
  bool add_prefix_space = false;
  bool trim_offsets = false;  // offsets only: no effect on ids
  bool use_regex = true;
  if (Error e = ReadBool(config, "add_prefix_space", true, false, &add_prefix_space); !e.empty())
    return e;
  if (Error e = ReadBool(config, "trim_offsets", true, false, &trim_offsets); !e.empty()) return e;
  if (Error e = ReadBool(config, "use_regex", false, true, &use_regex); !e.empty()) return e;
  std::unique_ptr<icu::RegexPattern> pattern;
  if (use_regex) {
    UParseError where{};
    UErrorCode status = U_ZERO_ERROR;
    pattern.reset(icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(kGpt2Pattern), 0,
                                             where, status));
    if (U_FAILURE(status))
      return std::string("ByteLevel pre_tokenizer: ICU cannot compile GPT-2's pattern: ") +
             u_errorName(status);
  }
  *out = std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, std::move(pattern));
  return "";
}

}  // namespace nightshift::tokenizer
