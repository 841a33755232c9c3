// The BPE model as `tokenizers` (0.23) runs it: a word starts as one token per character
// (unknown characters become bytes or the unknown token), then the mergeable adjacent
// pair of lowest rank is merged, leftmost first among equal ranks, until none is left.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <shared_mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/components.h"
#include "tokenizer/unicode.h"

namespace nightshift::tokenizer {
namespace {

using Vocab = std::unordered_map<std::string, int32_t>;

// What a pair of adjacent tokens (by id) merges into.
struct MergeRule {
  uint32_t rank;   // position in the merges list: lower merges first
  int32_t new_id;  // the id of the two tokens' concatenation
};
using MergeRules = std::unordered_map<uint64_t, MergeRule>;  // key: PairKey(left, right)

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// The model's settings from tokenizer.json (null fields as their defaults).
struct BpeOptions {
  std::optional<int32_t> unk_id;          // unk_token's id; none: unknown characters vanish
  std::string continuing_subword_prefix;  // before every character but a word's first
  std::string end_of_word_suffix;         // after a word's last character
  bool fuse_unk = false;                  // consecutive unknown characters give one unk
  bool byte_fallback = false;             // unknown characters as <0xHH> tokens when all exist
  bool ignore_merges = false;             // a word found whole in the vocabulary is one token
};

// Words already tokenized, shared by the threads that call Tokenize. Both sides only try
// the lock: a word that finds the cache busy is tokenized again, never waits. Like the
// reference's, the cache stops growing when full (no eviction), which bounds its memory.
class WordCache {
 public:
  static constexpr size_t kCapacity = 10000;  // words, as the reference's default
  static constexpr size_t kMaxWordLength = 256;  // longer words are not kept

  bool Get(const std::u32string& word, std::vector<int32_t>* ids) const {
    std::shared_lock<std::shared_mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    const auto it = entries_.find(word);
    if (it == entries_.end()) return false;
    ids->insert(ids->end(), it->second.begin(), it->second.end());
    return true;
  }

  void Put(const std::u32string& word, const std::vector<int32_t>& ids) {
    if (word.size() > kMaxWordLength) return;
    std::unique_lock<std::shared_mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock() || entries_.size() >= kCapacity) return;
    entries_.emplace(word, ids);
  }

 private:
  mutable std::shared_mutex mu_;
  std::unordered_map<std::u32string, std::vector<int32_t>> entries_;  // GUARDED_BY(mu_)
};

// One token of a word being merged: a node of a doubly linked list over a vector, so that
// a merge leaves every other symbol at its index (queued candidates name symbols by index).
struct Symbol {
  int32_t id;
  int32_t prev;  // index of the symbol on the left; -1 for none
  int32_t next;  // index of the symbol on the right; -1 for none
  bool merged_away = false;  // absorbed into the symbol on its left
};

// A possible merge of the symbol at `pos` with its right neighbour. The queue pops the
// lowest rank first, and among equal ranks the lowest position, as the reference's heap.
struct Candidate {
  uint32_t rank;
  int32_t pos;
  int32_t new_id;
  bool operator<(const Candidate& other) const {  // "less urgent than"
    return rank != other.rank ? rank > other.rank : pos > other.pos;
  }
};

class Bpe : public Model {
 public:
  Bpe(Vocab vocab, MergeRules merges, BpeOptions options)
      : vocab_(std::move(vocab)), merges_(std::move(merges)), options_(std::move(options)) {
    for (const auto& [token, id] : vocab_) tokens_.emplace(id, &token);
  }

  void Tokenize(const std::u32string& word, std::vector<int32_t>* ids) const override {
    if (word.empty()) return;
    if (options_.ignore_merges) {  // the word as it is: without prefix or suffix
      if (const auto it = vocab_.find(EncodeUtf8(word)); it != vocab_.end()) {
        ids->push_back(it->second);
        return;
      }
    }
    if (cache_.Get(word, ids)) return;
    std::vector<Symbol> symbols = InitialSymbols(word);
    MergeAll(&symbols);
    std::vector<int32_t> word_ids;
    for (const Symbol& s : symbols)
      if (!s.merged_away) word_ids.push_back(s.id);
    cache_.Put(word, word_ids);
    ids->insert(ids->end(), word_ids.begin(), word_ids.end());
  }

  int32_t TokenToId(const std::string& token) const override {
    const auto it = vocab_.find(token);
    return it == vocab_.end() ? -1 : it->second;
  }

  const std::string* IdToToken(int32_t id) const override {
    const auto it = tokens_.find(id);
    return it == tokens_.end() ? nullptr : it->second;
  }

  size_t VocabSize() const override { return vocab_.size(); }

 private:
  static void Add(int32_t id, std::vector<Symbol>* symbols) {
    const int32_t index = static_cast<int32_t>(symbols->size());
    if (index > 0) symbols->back().next = index;
    symbols->push_back(Symbol{id, index - 1, -1});
  }

  // The reference's merge_word, before merging: one symbol per character (with the prefix
  // and suffix where they apply), else its bytes, else the unknown token, else nothing.
  std::vector<Symbol> InitialSymbols(const std::u32string& word) const {
    std::vector<Symbol> symbols;
    symbols.reserve(word.size());
    bool unk_pending = false;  // an unknown token not yet added (fuse_unk may extend it)
    for (size_t i = 0; i < word.size(); ++i) {
      std::string piece = EncodeUtf8(word.substr(i, 1));
      if (i > 0) piece.insert(0, options_.continuing_subword_prefix);
      if (i + 1 == word.size()) piece += options_.end_of_word_suffix;
      if (const auto it = vocab_.find(piece); it != vocab_.end()) {
        if (unk_pending) Add(*options_.unk_id, &symbols);
        unk_pending = false;
        Add(it->second, &symbols);
        continue;
      }
      // As the reference: the bytes go in at once, while a pending unknown token waits (it
      // lands after them, and with fuse_unk absorbs the next unknown character too).
      if (options_.byte_fallback && AddBytes(piece, &symbols)) continue;
      if (!options_.unk_id) continue;
      if (unk_pending && !options_.fuse_unk) Add(*options_.unk_id, &symbols);
      unk_pending = true;
    }
    if (unk_pending) Add(*options_.unk_id, &symbols);
    return symbols;
  }

  // The <0xHH> token of each byte of `piece` (prefix and suffix included, as the
  // reference does), if the vocabulary has them all; else adds nothing.
  bool AddBytes(const std::string& piece, std::vector<Symbol>* symbols) const {
    std::vector<int32_t> ids;
    for (unsigned char b : piece) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      const std::string token = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
      const auto it = vocab_.find(token);
      if (it == vocab_.end()) return false;
      ids.push_back(it->second);
    }
    for (int32_t id : ids) Add(id, symbols);
    return true;
  }

  std::optional<MergeRule> Rule(int32_t left, int32_t right) const {
    const auto it = merges_.find(PairKey(left, right));
    if (it == merges_.end()) return std::nullopt;
    return it->second;
  }

  void Push(const std::vector<Symbol>& symbols, int32_t pos,
            std::priority_queue<Candidate>* queue) const {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    if (const auto rule = Rule(symbols[pos].id, symbols[next].id))
      queue->push(Candidate{rule->rank, pos, rule->new_id});
  }

  // The reference's merge_all (without dropout). A candidate is stale when its symbol was
  // absorbed, has no right neighbour any more, or the pair there now merges into another
  // token; stale ones are skipped (the reference checks the new id, not the rank: so do we).
  void MergeAll(std::vector<Symbol>* symbols_ptr) const {
    std::vector<Symbol>& symbols = *symbols_ptr;
    std::priority_queue<Candidate> queue;
    for (int32_t pos = 0; pos + 1 < static_cast<int32_t>(symbols.size()); ++pos)
      Push(symbols, pos, &queue);
    while (!queue.empty()) {
      const Candidate top = queue.top();
      queue.pop();
      Symbol& left = symbols[top.pos];
      if (left.merged_away || left.next < 0) continue;
      Symbol& right = symbols[left.next];
      const auto rule = Rule(left.id, right.id);
      if (!rule || rule->new_id != top.new_id) continue;
      left.id = top.new_id;
      right.merged_away = true;
      left.next = right.next;
      if (left.next >= 0) symbols[left.next].prev = top.pos;
      if (left.prev >= 0) Push(symbols, left.prev, &queue);
      Push(symbols, top.pos, &queue);
    }
  }

  // Constant after construction.
  const Vocab vocab_;
  const MergeRules merges_;
  const BpeOptions options_;
  std::unordered_map<int32_t, const std::string*> tokens_;  // id -> its token in vocab_

  mutable WordCache cache_;  // thread-safe on its own
};

// ---- Reading tokenizer.json's "model" object.

Error ReadVocab(const Json& config, Vocab* vocab) {
  const auto it = config.find("vocab");
  if (it == config.end() || !it->is_object()) return "BPE model: \"vocab\" must be an object";
  for (const auto& [token, id] : it->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      return "BPE model: vocab[\"" + token + "\"] must be an id from 0 to 2^31-1, not " +
             id.dump();
    (*vocab)[token] = static_cast<int32_t>(id.get<int64_t>());
  }
  return "";
}

// The merges as (left, right) strings. Both forms of tokenizer.json: ["a b", ...] (one
// ASCII space between exactly two tokens; lines starting "#version" skipped, as a
// merges.txt header) and [["a", "b"], ...]. One form per list, as the reference.
Error ReadMergePairs(const Json& config, std::vector<std::pair<std::string, std::string>>* pairs) {
  const auto it = config.find("merges");
  if (it == config.end() || !it->is_array()) return "BPE model: \"merges\" must be an array";
  const bool legacy = !it->empty() && it->front().is_string();
  for (const Json& entry : *it) {
    const size_t line = pairs->size() + 1;
    if (legacy && entry.is_string()) {
      const std::string text = entry.get<std::string>();
      if (text.rfind("#version", 0) == 0) continue;
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        return "BPE model: merge " + std::to_string(line) + " \"" + text +
               "\" is not two tokens separated by one space";
      pairs->emplace_back(text.substr(0, space), text.substr(space + 1));
    } else if (!legacy && entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
               entry[1].is_string()) {
      pairs->emplace_back(entry[0].get<std::string>(), entry[1].get<std::string>());
    } else {
      return "BPE model: merge " + std::to_string(line) + " " + entry.dump() +
             " is not like the first (all \"a b\" strings or all [\"a\", \"b\"] pairs)";
    }
  }
  return "";
}

// Ids for each merge: the pair's and its result's, which is `left` followed by `right`
// less the continuing_subword_prefix's length in bytes (as the reference cuts it, whether
// or not `right` starts with the prefix). A pair listed twice keeps its later rank.
Error ResolveMerges(const std::vector<std::pair<std::string, std::string>>& pairs,
                    const Vocab& vocab, size_t prefix_bytes, MergeRules* rules) {
  const auto id_of = [&](const std::string& token, size_t rank, int32_t* id) -> Error {
    const auto it = vocab.find(token);
    if (it == vocab.end())
      return "BPE model: merge " + std::to_string(rank + 1) + " needs \"" + token +
             "\", which is not in the vocab";
    *id = it->second;
    return "";
  };
  for (size_t rank = 0; rank < pairs.size(); ++rank) {
    const auto& [left, right] = pairs[rank];
    // The reference panics here (a cut beyond the token or inside a character).
    if (right.size() < prefix_bytes ||
        (right.size() > prefix_bytes && (right[prefix_bytes] & 0xC0) == 0x80))
      return "BPE model: merge " + std::to_string(rank + 1) + ": \"" + right +
             "\" cannot lose the continuing_subword_prefix's length";
    int32_t left_id = 0, right_id = 0, new_id = 0;
    if (Error e = id_of(left, rank, &left_id); !e.empty()) return e;
    if (Error e = id_of(right, rank, &right_id); !e.empty()) return e;
    if (Error e = id_of(left + right.substr(prefix_bytes), rank, &new_id); !e.empty()) return e;
    (*rules)[PairKey(left_id, right_id)] = MergeRule{static_cast<uint32_t>(rank), new_id};
  }
  return "";
}

// A field that may be absent or null (its default) or of one JSON type.
template <typename T>
Error ReadOptional(const Json& config, const char* key, std::optional<T>* out) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  const bool ok = std::is_same_v<T, bool> ? it->is_boolean() : it->is_string();
  if (!ok)
    return std::string("BPE model: \"") + key + "\" must be null or a " +
           (std::is_same_v<T, bool> ? "boolean" : "string") + ", not " + it->dump();
  *out = it->get<T>();
  return "";
}

// Dropout makes merges random; only "no dropout" (null or 0) gives the reference's ids.
Error CheckDropout(const Json& config) {
  const auto it = config.find("dropout");
  if (it == config.end() || it->is_null()) return "";
  if (it->is_number() && it->get<double>() == 0.0) return "";
  return "BPE model: dropout " + it->dump() +
         " is not supported (merges would be random): use null or 0";
}

Error ReadOptions(const Json& config, const Vocab& vocab, BpeOptions* options) {
  std::optional<std::string> unk, prefix, suffix;
  std::optional<bool> fuse_unk, byte_fallback, ignore_merges;
  for (Error e : {ReadOptional(config, "unk_token", &unk),
                  ReadOptional(config, "continuing_subword_prefix", &prefix),
                  ReadOptional(config, "end_of_word_suffix", &suffix),
                  ReadOptional(config, "fuse_unk", &fuse_unk),
                  ReadOptional(config, "byte_fallback", &byte_fallback),
                  ReadOptional(config, "ignore_merges", &ignore_merges), CheckDropout(config)})
    if (!e.empty()) return e;
  if (unk) {
    // The reference fails only when an unknown character turns up; Tokenize cannot fail,
    // so a model that could is refused here.
    const auto it = vocab.find(*unk);
    if (it == vocab.end()) return "BPE model: unk_token \"" + *unk + "\" is not in the vocab";
    options->unk_id = it->second;
  }
  options->continuing_subword_prefix = prefix.value_or("");
  options->end_of_word_suffix = suffix.value_or("");
  options->fuse_unk = fuse_unk.value_or(false);
  options->byte_fallback = byte_fallback.value_or(false);
  options->ignore_merges = ignore_merges.value_or(false);
  return "";
}

}  // namespace

Error NewBpe(const Json& config, std::unique_ptr<Model>* out) {
  if (!config.is_object()) return "BPE model: not a JSON object";
  Vocab vocab;
  std::vector<std::pair<std::string, std::string>> pairs;
  BpeOptions options;
  MergeRules rules;
  if (Error e = ReadVocab(config, &vocab); !e.empty()) return e;
  if (Error e = ReadMergePairs(config, &pairs); !e.empty()) return e;
  if (Error e = ReadOptions(config, vocab, &options); !e.empty()) return e;
  if (Error e = ResolveMerges(pairs, vocab, options.continuing_subword_prefix.size(), &rules);
      !e.empty())
    return e;
  *out = std::make_unique<Bpe>(std::move(vocab), std::move(rules), std::move(options));
  return "";
}

}  // namespace nightshift::tokenizer
