// Normalizers of `tokenizers` (normalizers/bert.rs, strip.rs, unicode.rs and
// NormalizedString::lowercase), on code points.
//
// The reference answers Unicode questions from tables frozen in its crates, older than
// ICU's: `unicode_categories` (bert.rs: control characters, non-spacing marks) holds
// Unicode 8.0 and `unicode-normalization-alignments` (NFD/NFC/NFKD/NFKC, StripAccents'
// combining marks) Unicode 9.0. A character assigned later is, to the reference,
// unassigned: no category, no decomposition, combining class 0. So we ask ICU only about
// the characters assigned by then (ICU's Age property), and take the few whose category
// has changed since from the reference (kCategoriesThen). Case mapping is Rust's
// char::to_lowercase, current Unicode: there ICU's 15.0 is what we have (see Lowercase).
//
// Every code point was compared with the reference through each normalizer here; the
// only differences left are the 55 characters that gained a lowercase in Unicode 16.0.
#include "tokenizer/components.h"

#include <array>

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/uniset.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

namespace nightshift::tokenizer {
namespace {

// ---- Unicode facts, as the reference's tables hold them ----------------------------

// The code points the reference's tables know (see the top of the file): assigned by
// the table's Unicode version. Built once, frozen (read-only, so shared by threads) and
// never freed, like the normalisers below (no destruction order to get wrong).
struct KnownCharacters {
  icu::UnicodeSet categories;     // unicode_categories
  icu::UnicodeSet normalization;  // unicode-normalization-alignments
};

const KnownCharacters& Known() {
  static const KnownCharacters* const known = [] {
    UErrorCode status = U_ZERO_ERROR;
    auto* k = new KnownCharacters{icu::UnicodeSet(u"[:age=8.0:]", status),
                                  icu::UnicodeSet(u"[:age=9.0:]", status)};
    k->categories.freeze();
    k->normalization.freeze();
    return k;
  }();
  return *known;
}

// Characters whose general category has changed since the reference's tables, as those
// tables hold them: facts about the reference, found by comparing every code point with
// it (normalizers_test checks each).
struct CategoryThen {
  UChar32 code;
  int8_t category;
};
constexpr CategoryThen kCategoriesThen[] = {  // unicode_categories, Unicode 8.0
    {0x1734, U_NON_SPACING_MARK},        // HANUNOO SIGN PAMUDPOD, now Mc
    {0x1885, U_OTHER_LETTER},            // MONGOLIAN LETTER ALI GALI BALUDA, now Mn
    {0x1886, U_OTHER_LETTER},            // ... THREE BALUDA, now Mn
    {0xA9BD, U_COMBINING_SPACING_MARK},  // JAVANESE CONSONANT SIGN KERET, now Mn
    {0x111C9, U_OTHER_PUNCTUATION},      // SHARADA SANDHI MARK, now Mn
};
constexpr CategoryThen kMarksThen[] = {  // unicode-normalization-alignments, Unicode 9.0
    {0x1CF2, U_COMBINING_SPACING_MARK},  // VEDIC SIGN ARDHAVISARGA, now Lo
    {0x1CF3, U_COMBINING_SPACING_MARK},  // VEDIC SIGN ROTATED ARDHAVISARGA, now Lo
    {0x111C9, U_OTHER_PUNCTUATION},      // SHARADA SANDHI MARK, now Mn
};

// The general category of `c` in a table of the reference.
template <size_t N>
int8_t CategoryThenOf(char32_t c, const icu::UnicodeSet& known, const CategoryThen (&then)[N]) {
  const auto code = static_cast<UChar32>(c);
  for (const CategoryThen& changed : then) {
    if (changed.code == code) return changed.category;
  }
  return known.contains(code) ? u_charType(code) : U_UNASSIGNED;
}

int8_t OldCategory(char32_t c) {
  return CategoryThenOf(c, Known().categories, kCategoriesThen);
}

// bert.rs is_whitespace: \t \n \r, or Rust's char::is_whitespace (White_Space).
bool IsBertWhitespace(char32_t c) {
  return c == U'\t' || c == U'\n' || c == U'\r' || u_isUWhiteSpace(static_cast<UChar32>(c));
}

// bert.rs is_control: categories Cc, Cf, Co (the crate's "other" holds no Cn, as the
// reference leaves unassigned code points in place), except \t \n \r.
bool IsBertControl(char32_t c) {
  if (c == U'\t' || c == U'\n' || c == U'\r') return false;
  const int8_t category = OldCategory(c);
  return category == U_CONTROL_CHAR || category == U_FORMAT_CHAR ||
         category == U_PRIVATE_USE_CHAR;
}

// bert.rs is_chinese_char: the reference's own code-point ranges (not a Unicode block
// table: ranges of its source, including its start of 0x2B920, not 0x2B820).
bool IsChineseChar(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// ---- Text helpers ------------------------------------------------------------------

icu::UnicodeString ToIcu(const std::u32string& text) {
  return icu::UnicodeString::fromUTF32(reinterpret_cast<const UChar32*>(text.data()),
                                       static_cast<int32_t>(text.size()));
}

std::u32string FromIcu(const icu::UnicodeString& text) {
  std::u32string out;
  out.reserve(text.length());
  for (int32_t i = 0; i < text.length();) {
    const UChar32 c = text.char32At(i);
    out.push_back(static_cast<char32_t>(c));
    i += U16_LENGTH(c);
  }
  return out;
}

// Rust's char::to_lowercase: the full mapping of one character alone (İ becomes i and
// U+0307; Σ becomes σ, since a lone character is never at the end of a word). Rust's
// tables are Unicode 16.0, ICU 72's 15.0: the 55 characters that gained a lowercase in
// 16.0 (U+1C89, U+A7CB..., Garay U+10D50..., U+16EA0...) stay as they are here.
void AppendLowercase(char32_t c, std::u32string* out) {
  if (c < 0x80) {
    out->push_back(c >= U'A' && c <= U'Z' ? c + (U'a' - U'A') : c);
    return;
  }
  UChar source[2];
  int32_t length = 0;
  U16_APPEND_UNSAFE(source, length, static_cast<UChar32>(c));
  UChar lower[8];  // a full lowercase mapping is at most 3 code points
  UErrorCode status = U_ZERO_ERROR;
  const int32_t lower_length = u_strToLower(lower, 8, source, length, "", &status);
  if (U_FAILURE(status)) {
    out->push_back(c);
    return;
  }
  for (int32_t i = 0; i < lower_length;) {
    UChar32 l;
    U16_NEXT(lower, i, lower_length, l);
    out->push_back(static_cast<char32_t>(l));
  }
}

void Lowercase(std::u32string* text) {
  std::u32string out;
  out.reserve(text->size());
  for (char32_t c : *text) AppendLowercase(c, &out);
  *text = std::move(out);
}

// ---- Normalisation forms -----------------------------------------------------------

enum class Form { kNfd, kNfc, kNfkd, kNfkc };

// ICU's normaliser for `form`, blind to characters the reference's table lacks: those
// pass through as inert starters, as unassigned code points do.
const icu::Normalizer2& IcuNormalizer(Form form) {
  static const std::array<const icu::Normalizer2*, 4> normalizers = [] {
    UErrorCode status = U_ZERO_ERROR;
    const icu::UnicodeSet& known = Known().normalization;
    return std::array<const icu::Normalizer2*, 4>{
        new icu::FilteredNormalizer2(*icu::Normalizer2::getNFDInstance(status), known),
        new icu::FilteredNormalizer2(*icu::Normalizer2::getNFCInstance(status), known),
        new icu::FilteredNormalizer2(*icu::Normalizer2::getNFKDInstance(status), known),
        new icu::FilteredNormalizer2(*icu::Normalizer2::getNFKCInstance(status), known)};
  }();
  return *normalizers[static_cast<int>(form)];
}

void ApplyForm(Form form, std::u32string* text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::UnicodeString out = IcuNormalizer(form).normalize(ToIcu(*text), status);
  if (U_SUCCESS(status)) *text = FromIcu(out);
}

// ---- The normalizers ----------------------------------------------------------------

// BertNormalizer, its steps in the reference's order.
class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool handle_chinese_chars, bool strip_accents,
                 bool lowercase)
      : clean_text_(clean_text),
        handle_chinese_chars_(handle_chinese_chars),
        strip_accents_(strip_accents),
        lowercase_(lowercase) {}

  void Normalize(std::u32string* text) const override {
    if (clean_text_) CleanText(text);
    if (handle_chinese_chars_) SpaceChineseChars(text);
    if (strip_accents_) StripNonSpacingMarks(text);
    if (lowercase_) Lowercase(text);
  }

 private:
  // Drops NUL, U+FFFD and control characters, then makes each whitespace a space.
  static void CleanText(std::u32string* text) {
    std::u32string out;
    out.reserve(text->size());
    for (char32_t c : *text) {
      if (c == 0 || c == 0xFFFD || IsBertControl(c)) continue;
      out.push_back(IsBertWhitespace(c) ? U' ' : c);
    }
    *text = std::move(out);
  }

  static void SpaceChineseChars(std::u32string* text) {
    std::u32string out;
    out.reserve(text->size());
    for (char32_t c : *text) {
      if (IsChineseChar(c)) {
        out += {U' ', c, U' '};
      } else {
        out.push_back(c);
      }
    }
    *text = std::move(out);
  }

  // NFD, then drops the non-spacing marks (category Mn).
  static void StripNonSpacingMarks(std::u32string* text) {
    ApplyForm(Form::kNfd, text);
    std::u32string out;
    out.reserve(text->size());
    for (char32_t c : *text) {
      if (OldCategory(c) != U_NON_SPACING_MARK) out.push_back(c);
    }
    *text = std::move(out);
  }

  const bool clean_text_, handle_chinese_chars_, strip_accents_, lowercase_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void Normalize(std::u32string* text) const override { Lowercase(text); }
};

class FormNormalizer : public Normalizer {
 public:
  explicit FormNormalizer(Form form) : form_(form) {}
  void Normalize(std::u32string* text) const override { ApplyForm(form_, text); }

 private:
  const Form form_;
};

// StripAccents drops the combining marks (categories Mn, Mc, Me) as they are, without
// decomposing first: an accent precomposed into its letter stays.
class StripAccents : public Normalizer {
 public:
  void Normalize(std::u32string* text) const override {
    std::u32string out;
    out.reserve(text->size());
    for (char32_t c : *text) {
      if (!IsCombiningMark(c)) out.push_back(c);
    }
    *text = std::move(out);
  }

 private:
  // The normalisation crate's table (categories Mn, Mc, Me), not unicode_categories'.
  static bool IsCombiningMark(char32_t c) {
    const int8_t category = CategoryThenOf(c, Known().normalization, kMarksThen);
    return category == U_NON_SPACING_MARK || category == U_COMBINING_SPACING_MARK ||
           category == U_ENCLOSING_MARK;
  }
};

// A boolean of the BertNormalizer object; `nullable` lets it be null (*value untouched).
Error ReadBool(const Json& config, const char* key, bool nullable, bool* value) {
  const auto it = config.find(key);
  if (it == config.end()) return std::string("BertNormalizer: missing key \"") + key + "\"";
  if (it->is_boolean()) {
    *value = it->get<bool>();
    return "";
  }
  if (nullable && it->is_null()) return "";
  return std::string("BertNormalizer: \"") + key + "\" must be true or false" +
         (nullable ? " or null" : "") + ", not " + it->dump();
}

Error NewBertNormalizer(const Json& config, std::unique_ptr<Normalizer>* out) {
  bool clean_text = true, handle_chinese_chars = true, lowercase = true;
  Error error = ReadBool(config, "clean_text", false, &clean_text);
  if (error.empty()) error = ReadBool(config, "handle_chinese_chars", false, &handle_chinese_chars);
  if (error.empty()) error = ReadBool(config, "lowercase", false, &lowercase);
  bool strip_accents = lowercase;  // null: strip exactly when lowercasing
  if (error.empty()) error = ReadBool(config, "strip_accents", true, &strip_accents);
  if (!error.empty()) return error;
  *out = std::make_unique<BertNormalizer>(clean_text, handle_chinese_chars, strip_accents,
                                          lowercase);
  return "";
}

}  // namespace

Error NewNormalizer(const Json& config, std::unique_ptr<Normalizer>* out) {
  if (!config.is_object()) return "normalizer: expected an object, not " + config.dump();
  const auto type = config.find("type");
  if (type == config.end() || !type->is_string()) {
    return "normalizer: missing \"type\" in " + config.dump();
  }
  const std::string name = type->get<std::string>();
  if (name == "BertNormalizer") return NewBertNormalizer(config, out);
  if (name == "Lowercase") {
    *out = std::make_unique<LowercaseNormalizer>();
  } else if (name == "StripAccents") {
    *out = std::make_unique<StripAccents>();
  } else if (name == "NFD" || name == "NFC" || name == "NFKD" || name == "NFKC") {
    const Form form = name == "NFD"    ? Form::kNfd
                      : name == "NFC"  ? Form::kNfc
                      : name == "NFKD" ? Form::kNfkd
                                       : Form::kNfkc;
    *out = std::make_unique<FormNormalizer>(form);
  } else {
    return "normalizer: \"type\" \"" + name + "\" is not implemented";
  }
  return "";
}

}  // namespace nightshift::tokenizer
