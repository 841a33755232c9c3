// The Split pre-tokenizer as `tokenizers` (0.23) runs it: a pattern (a regular expression
// or a literal string) finds matches in the text, `invert` swaps which parts are the
// matches, and `behavior` says what becomes of them:
//
//   Removed             the matches are dropped, the text between them kept
//   Isolated            every match and every stretch between matches is a word
//   MergedWithPrevious  a match joins the word before it
//   MergedWithNext      a match joins the word after it
//   Contiguous          adjacent matches form one word, adjacent non-matches another
//
// GPT-2-style models after GPT-2 (Llama 3, Qwen2) put their own expression here, before a
// ByteLevel without regex. `tokenizers` compiles the expression with Oniguruma (Ruby
// syntax, UTF-8); we run it on ICU, which agrees with Oniguruma on everything these
// patterns use ((?i:...) groups, \p{L}, \p{N}, [\r\n], {1,3}, greedy loops with
// backtracking, (?!...)) except \s: Oniguruma's is the White_Space property, ICU's is
// documented as [\t\n\f\r\p{Z}], so \s and \S are rewritten to \p{White_Space} and
// \P{White_Space} (split_test checks the classes on every code point, as byte_level_test).
// Other escapes are passed to ICU unchanged; of those whose meaning differs between the
// two (\h: hex digit in Ruby, horizontal space in ICU; \R, \X, \K, \y), the pattern is
// refused rather than run differently.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <unicode/regex.h>
#include <unicode/unistr.h>

#include "tokenizer/components.h"
#include "tokenizer/unicode.h"

namespace nightshift::tokenizer {
namespace {

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// A stretch of the text [start, end) (UTF-16 indices) and whether it is a match.
struct Part {
  int32_t start, end;
  bool match;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<icu::RegexPattern> pattern, Behavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}

  void Split(const std::u32string& text, std::vector<std::u32string>* words) const override {
    if (text.empty()) return;
    // Code points that are not characters (surrogates) become U+FFFD, as UTF-8 would.
    const icu::UnicodeString utf16 =
        icu::UnicodeString::fromUTF32(reinterpret_cast<const UChar32*>(text.data()), static_cast<int32_t>(text.size()));
    for (const Part& p : Arrange(Find(utf16))) {
      if (p.start >= p.end || (behavior_ == Behavior::kRemoved && p.match)) continue;
      std::string utf8;
      utf16.tempSubStringBetween(p.start, p.end).toUTF8String(utf8);
      words->push_back(DecodeUtf8(utf8));
    }
  }

 private:
  // The reference's find_matches: the matches and the stretches between them, in order,
  // covering the text (an empty match is a part of its own), each flipped when inverted.
  std::vector<Part> Find(const icu::UnicodeString& utf16) const {
    std::vector<Part> parts;
    if (pattern_ == nullptr) return {{0, utf16.length(), invert_}};  // an empty String
    UErrorCode status = U_ZERO_ERROR;
    // One matcher per call (a RegexPattern is immutable and shared): thread-safe.
    std::unique_ptr<icu::RegexMatcher> matcher(pattern_->matcher(utf16, status));
    // Unbounded backtracking stack: a limit would make a long run of one class fail half-way.
    if (U_SUCCESS(status)) matcher->setStackLimit(0, status);
    int32_t done = 0;
    while (U_SUCCESS(status) && matcher->find(status) && U_SUCCESS(status)) {
      const int32_t start = matcher->start(status), end = matcher->end(status);
      if (U_FAILURE(status)) break;
      if (start > done) parts.push_back({done, start, invert_});
      parts.push_back({start, end, !invert_});
      done = end;
    }
    // Only running out of memory stops ICU early: the rest is then one stretch.
    if (done < utf16.length()) parts.push_back({done, utf16.length(), invert_});
    return parts;
  }

  // The reference's SplitDelimiterBehavior on the parts (Removed and Isolated keep them
  // as they are; Split drops the removed ones).
  std::vector<Part> Arrange(std::vector<Part> parts) const {
    std::vector<Part> out;
    bool previous_match = false;
    switch (behavior_) {
      case Behavior::kRemoved:
      case Behavior::kIsolated:
        return parts;
      case Behavior::kMergedWithPrevious:
        for (const Part& p : parts) {
          if (p.match && !previous_match && !out.empty()) out.back().end = p.end;
          else out.push_back({p.start, p.end, p.match && !previous_match});
          previous_match = p.match;
        }
        return out;
      case Behavior::kMergedWithNext:
        for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
          if (it->match && !previous_match && !out.empty()) out.back().start = it->start;
          else out.push_back({it->start, it->end, it->match && !previous_match});
          previous_match = it->match;
        }
        return {out.rbegin(), out.rend()};
      case Behavior::kContiguous:
        for (const Part& p : parts) {
          if (p.match == previous_match && !out.empty()) out.back().end = p.end;
          else out.push_back({p.start, p.end, false});
          previous_match = p.match;
        }
        return out;
    }
    return parts;
  }

  const std::unique_ptr<const icu::RegexPattern> pattern_;  // null: matches nowhere
  const Behavior behavior_;
  const bool invert_;
};

Error ParseBehavior(const std::string& name, Behavior* out) {
  static const std::pair<const char*, Behavior> kNames[] = {
      {"Removed", Behavior::kRemoved},
      {"Isolated", Behavior::kIsolated},
      {"MergedWithPrevious", Behavior::kMergedWithPrevious},
      {"MergedWithNext", Behavior::kMergedWithNext},
      {"Contiguous", Behavior::kContiguous}};
  for (const auto& [text, behavior] : kNames)
    if (name == text) {
      *out = behavior;
      return "";
    }
  return "Split pre_tokenizer: \"behavior\" '" + name +
         "' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous";
}

}  // namespace

Error OnigurumaToIcu(const std::string& pattern, std::string* out) {
  out->clear();
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out->push_back(pattern[i]);
      continue;
    }
    const char c = pattern[++i];
    if (c == 's') *out += "\\p{White_Space}";
    else if (c == 'S') *out += "\\P{White_Space}";
    else if (c == 'h' || c == 'H' || c == 'R' || c == 'X' || c == 'K' || c == 'y' || c == 'Y')
      return std::string("Split pre_tokenizer: the escape \\") + c +
             " means something else in ICU than in Oniguruma and is not implemented";
    else *out += std::string("\\") + c;
  }
  return "";
}

Error NewSplitPreTokenizer(const Json& config, std::unique_ptr<PreTokenizer>* out) {
  if (!config.is_object()) return "Split pre_tokenizer: not a JSON object";
  const auto pattern = config.find("pattern");
  if (pattern == config.end() || !pattern->is_object() || pattern->size() != 1 ||
      !(pattern->contains("Regex") || pattern->contains("String")) || !pattern->begin()->is_string())
    return "Split pre_tokenizer: \"pattern\" must be {\"Regex\": \"...\"} or {\"String\": \"...\"}";
  const auto behavior = config.find("behavior");
  if (behavior == config.end() || !behavior->is_string())
    return "Split pre_tokenizer: \"behavior\" must be a string";
  Behavior b;
  if (Error e = ParseBehavior(behavior->get<std::string>(), &b); !e.empty()) return e;
  const auto invert = config.find("invert");
  if (invert == config.end() || !invert->is_boolean()) return "Split pre_tokenizer: \"invert\" must be true or false";

  const bool regex = pattern->contains("Regex");
  const std::string source = pattern->begin()->get<std::string>();
  if (!regex && source.empty()) {  // the reference: no match anywhere
    *out = std::make_unique<SplitPreTokenizer>(nullptr, b, invert->get<bool>());
    return "";
  }
  std::string icu_source = source;
  if (regex)
    if (Error e = OnigurumaToIcu(source, &icu_source); !e.empty()) return e;
  UParseError where{};
  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexPattern> compiled(icu::RegexPattern::compile(
      icu::UnicodeString::fromUTF8(icu_source), regex ? 0 : UREGEX_LITERAL, where, status));
  if (U_FAILURE(status))
    return "Split pre_tokenizer: ICU cannot compile the pattern " + pattern->dump() + " (offset " +
           std::to_string(where.offset) + "): " + u_errorName(status);
  *out = std::make_unique<SplitPreTokenizer>(std::move(compiled), b, invert->get<bool>());
  return "";
}

}  // namespace nightshift::tokenizer
