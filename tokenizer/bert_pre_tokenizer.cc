// Pre-tokenizers that split on whitespace and punctuation, as `tokenizers`'
// pre_tokenizers/bert.rs and whitespace.rs do:
//
//   BertPreTokenizer  whitespace removed; each punctuation character a word by itself
//   WhitespaceSplit   whitespace removed
//   Whitespace        the matches of \w+|[^\w\s]+ (Rust's `regex`), the rest removed
//
// Whitespace is Rust's char::is_whitespace (the White_Space property). Punctuation is the
// `unicode_categories` crate's, whose table is Unicode 8.0: a character assigned later is
// not punctuation to the reference, so we ask ICU only about characters assigned by 8.0
// (and take from the reference the two whose category has changed since). \w is Rust's
// `regex`, Unicode 16.0, where ICU 72 has 15.0: the 5,055 characters new in 16.0 that
// are \w there are symbols to Whitespace here. Every code point was compared with the
// reference through each pre-tokenizer; those are the only differences.
#include "tokenizer/components.h"

#include <unicode/uchar.h>
#include <unicode/uniset.h>

namespace nightshift::tokenizer {
namespace {

// How a pre-tokenizer treats one character.
enum class Kind {
  kSpace,   // separates words, dropped
  kAlone,   // a word by itself
  kWord,    // joins the kWord characters next to it
  kSymbol,  // joins the kSymbol characters next to it
};

using Classify = Kind (*)(char32_t c);

// The characters the reference's categories table knows (see the top of the file).
const icu::UnicodeSet& KnownToCategories() {
  static const icu::UnicodeSet* const known = [] {
    UErrorCode status = U_ZERO_ERROR;
    auto* set = new icu::UnicodeSet(u"[:age=8.0:]", status);
    set->freeze();  // read-only from here: shared by threads
    return set;
  }();
  return *known;
}

bool IsWhitespace(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }

// bert.rs is_bert_punc: ASCII punctuation (!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~, symbols
// included) or a character of a P* category in the reference's table.
bool IsBertPunctuation(char32_t c) {
  if (c < 0x80) {
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
           (c >= 123 && c <= 126);
  }
  // Po in Unicode 8.0, no longer punctuation: CANADIAN SYLLABICS CHI SIGN (now So) and
  // SHARADA SANDHI MARK (now Mn). Found by comparing every code point with the reference.
  if (c == 0x166D || c == 0x111C9) return true;
  const auto code = static_cast<UChar32>(c);
  return KnownToCategories().contains(code) && (U_GET_GC_MASK(code) & U_GC_P_MASK) != 0;
}

// Rust regex's \w (UTS #18 Annex C): Alphabetic, marks, decimal digits, connector
// punctuation and the joiners U+200C, U+200D.
bool IsRegexWord(char32_t c) {
  const auto code = static_cast<UChar32>(c);
  constexpr uint32_t kWordCategories = U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK;
  return u_hasBinaryProperty(code, UCHAR_ALPHABETIC) ||
         (U_GET_GC_MASK(code) & kWordCategories) != 0 ||
         u_hasBinaryProperty(code, UCHAR_JOIN_CONTROL);
}

Kind BertKind(char32_t c) {
  if (IsWhitespace(c)) return Kind::kSpace;
  return IsBertPunctuation(c) ? Kind::kAlone : Kind::kWord;
}

Kind WhitespaceSplitKind(char32_t c) { return IsWhitespace(c) ? Kind::kSpace : Kind::kWord; }

// \w+|[^\w\s]+: a \w character never joins a run of the other kind, and \s (White_Space)
// separates. A \w character that is also White_Space does not exist.
Kind RegexKind(char32_t c) {
  if (IsRegexWord(c)) return Kind::kWord;
  return IsWhitespace(c) ? Kind::kSpace : Kind::kSymbol;
}

class KindSplitter : public PreTokenizer {
 public:
  explicit KindSplitter(Classify classify) : classify_(classify) {}

  void Split(const std::u32string& text, std::vector<std::u32string>* words) const override {
    size_t start = 0;  // of the current run; a run is never empty when it ends
    Kind run = Kind::kSpace;
    for (size_t i = 0; i < text.size(); ++i) {
      const Kind kind = classify_(text[i]);
      if (kind == run && kind != Kind::kAlone && kind != Kind::kSpace) continue;
      if (run != Kind::kSpace) words->push_back(text.substr(start, i - start));
      start = i;
      run = kind;
    }
    if (run != Kind::kSpace) words->push_back(text.substr(start));
  }

 private:
  const Classify classify_;
};

}  // namespace

Error NewBertPreTokenizer(const Json& config, std::unique_ptr<PreTokenizer>* out) {
  const auto type = config.find("type");
  if (type == config.end() || !type->is_string()) {
    return "pre_tokenizer: missing \"type\" in " + config.dump();
  }
  const std::string name = type->get<std::string>();
  if (name == "BertPreTokenizer") {
    *out = std::make_unique<KindSplitter>(&BertKind);
  } else if (name == "WhitespaceSplit") {
    *out = std::make_unique<KindSplitter>(&WhitespaceSplitKind);
  } else if (name == "Whitespace") {
    *out = std::make_unique<KindSplitter>(&RegexKind);
  } else {
    return "pre_tokenizer: \"type\" \"" + name + "\" is not implemented";
  }
  return "";
}

}  // namespace nightshift::tokenizer
