// A sentencepiece folder (tokenizer.model: Llama 2, Mistral) run with the sentencepiece
// library as transformers 5.24 runs it. 5.24 has no slow LlamaTokenizer any more: for such
// a folder AutoTokenizer builds a `tokenizers` pipeline from the model's pieces (BPE with
// byte_fallback and fuse_unk, no normalizer, a Metaspace pre-tokenizer without splitting)
// and tokenizer_config.json's settings, and so do we, with sentencepiece doing the BPE:
//
// - The special tokens (unk, bos, eos and the entries of added_tokens_decoder) are found in
//   the raw text first and give their own ids; sentencepiece sees the text between them.
// - Metaspace: spaces become U+2581, and a U+2581 is put in front of a stretch of text
//   unless it starts with a space (or a U+2581) already, or the scheme says not to:
//   legacy false (5.24's default) puts it in front of the text's first stretch only,
//   legacy true in front of every stretch, add_prefix_space false in front of none.
//   sentencepiece's own dummy prefix would put it in front of every text, even one
//   starting with a space, so we load the model twice with the normalizer spec replaced:
//   once with the dummy prefix, once without, and pick one per stretch.
// - The model's normalization (nmt_nfkc, removing extra whitespace) is replaced by none,
//   as 5.24 ignores it for these folders (Llama 2's and Mistral's models have none).
// - The ids around the text: those of tokenizer.json's post-processor when the folder has
//   a tokenizer.json (5.24 then ignores tokenizer_config.json's add_bos_token and
//   add_eos_token), else <s> when add_bos_token (default true) and </s> when add_eos_token
//   (default false); truncation cuts the text's own ids to leave room for them. The
//   prepend scheme comes from tokenizer_config.json's legacy either way (5.24 ignores
//   tokenizer.json's Metaspace settings), and tokenizer.json's added tokens are matched
//   as the special tokens are.
// - Decode: as 5.24's LlamaTokenizer, whose `tokenizers` pipeline decodes, not
//   sentencepiece (whose DecodeIds drops control pieces whether asked or not and writes
//   <unk> as " \u2047 "): each id's piece (a special token's content first), special
//   tokens left out when asked, then the decoder
//   LlamaTokenizer sets (folder.cc LlamaDecoderJson: U+2581 -> " ", <0xHH> pieces to
//   bytes, one leading space stripped unless add_prefix_space is false).
//
// What differs from 5.24 (not covered by equality_test.py): user_defined pieces of the
// model are matched whole by sentencepiece, while 5.24 merges them as ordinary BPE pieces;
// added tokens of tokenizer_config.json with lstrip/rstrip/single_word are matched
// without those flags; a model whose BPE merges tie in score may order them differently
// from the merges 5.24 derives. Unigram models (T5, XLNet, ALBERT) would be run by sentencepiece
// as they are, which is not what their 5.24 classes do around them: a tokenizer_config.json
// naming a tokenizer_class other than LlamaTokenizer(Fast) is refused.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/format/json_depth.h"
#include "tokenizer/components.h"
#include "tokenizer/folder.h"
#include "tokenizer/unicode.h"

namespace nightshift::tokenizer {
namespace {

// ---- The model's serialized ModelProto with its normalizer spec (field 3) replaced.

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

bool GetVarint(std::string_view s, size_t* pos, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *pos < s.size(); shift += 7) {
    const auto byte = static_cast<unsigned char>(s[(*pos)++]);
    *v |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// NormalizerSpec fields appended after the model's own (protobuf: the last value of a
// field wins): name "identity", no precompiled_charsmap, add_dummy_prefix as given, no
// removal of extra whitespace, spaces escaped as U+2581, no normalization_rule_tsv.
std::string PlainNormalizer(bool dummy_prefix) {
  std::string spec;
  spec += "\x0A\x08identity";
  spec += std::string("\x12\x00", 2);
  spec += std::string("\x18", 1) + static_cast<char>(dummy_prefix ? 1 : 0);
  spec += std::string("\x20\x00", 2);
  spec += std::string("\x28\x01", 2);
  spec += std::string("\x32\x00", 2);
  return spec;
}

Error WithPlainNormalizer(std::string_view proto, bool dummy_prefix, std::string* out) {
  out->clear();
  bool replaced = false;
  for (size_t pos = 0; pos < proto.size();) {
    const size_t field_start = pos;
    uint64_t key = 0, value = 0;
    if (!GetVarint(proto, &pos, &key)) return "not a sentencepiece model (a truncated field)";
    switch (key & 7) {
      case 0:
        if (!GetVarint(proto, &pos, &value)) return "not a sentencepiece model (a truncated varint)";
        break;
      case 1: pos += 8; break;
      case 5: pos += 4; break;
      case 2:
        if (!GetVarint(proto, &pos, &value) || value > proto.size() - pos)
          return "not a sentencepiece model (a field longer than the file)";
        if (key == ((3 << 3) | 2)) {  // normalizer_spec: its bytes, then ours
          const std::string spec = std::string(proto.substr(pos, value)) + PlainNormalizer(dummy_prefix);
          PutVarint(key, out);
          PutVarint(spec.size(), out);
          *out += spec;
          pos += value;
          replaced = true;
          continue;
        }
        pos += value;
        break;
      default: return "not a sentencepiece model (wire type " + std::to_string(key & 7) + ")";
    }
    if (pos > proto.size()) return "not a sentencepiece model (a truncated field)";
    out->append(proto.substr(field_start, pos - field_start));
  }
  if (!replaced) {
    const std::string spec = PlainNormalizer(dummy_prefix);
    PutVarint((3 << 3) | 2, out);
    PutVarint(spec.size(), out);
    *out += spec;
  }
  return "";
}

// ---- tokenizer_config.json

// A token setting: "<s>" or {"content": "<s>", ...}; `fallback` when absent or null.
std::string TokenText(const Json& config, const char* key, const std::string& fallback) {
  const auto it = config.find(key);
  if (it == config.end()) return fallback;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return fallback;
}

Error Flag(const Json& config, const char* key, bool fallback, bool* out) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) {
    *out = fallback;
    return "";
  }
  if (!it->is_boolean()) return std::string("\"") + key + "\" must be true, false or null, not " + it->dump();
  *out = it->get<bool>();
  return "";
}

enum class Prepend { kAlways, kFirst, kNever };

struct Special {
  std::string text;  // matched in the raw text
  int32_t id;
  bool special;  // left out by Decode(ids, skip_special_tokens=true)
};

class SentencePieceTokenizer : public TextTokenizer {
 public:
  std::vector<int32_t> Encode(std::string_view raw, size_t max_len) const override {
    // Ill-formed UTF-8 as U+FFFD, as the other tokenizers and Python's decode read it
    // (sentencepiece would read it its own way).
    const std::string valid = EncodeUtf8(DecodeUtf8(raw));
    const std::string_view text = valid;
    std::vector<int32_t> ids;
    size_t done = 0;  // bytes of `text` already tokenized
    while (done <= text.size()) {
      // The leftmost special token, the longest there.
      size_t at = std::string_view::npos;
      const Special* found = nullptr;
      for (const Special& s : specials_) {
        const size_t p = text.find(s.text, done);
        if (p != std::string_view::npos && (p < at || (p == at && s.text.size() > found->text.size()))) {
          at = p;
          found = &s;
        }
      }
      const size_t end = found == nullptr ? text.size() : at;
      EncodeStretch(text.substr(done, end - done), /*first=*/done == 0, &ids);
      if (found == nullptr) break;
      ids.push_back(found->id);
      done = end + found->text.size();
    }
    const size_t added = before_.size() + after_.size();
    if (max_len > 0 && ids.size() + added > max_len) ids.resize(max_len > added ? max_len - added : 0);
    std::vector<int32_t> out = before_;
    out.insert(out.end(), ids.begin(), ids.end());
    out.insert(out.end(), after_.begin(), after_.end());
    return out;
  }

  int32_t TokenToId(const std::string& token) const override {
    for (const Special& s : specials_)
      if (s.text == token) return s.id;
    return PieceId(token);
  }

  size_t VocabSize() const override {
    size_t size = static_cast<size_t>(with_prefix_.GetPieceSize());
    for (const Special& s : specials_) size = std::max(size, static_cast<size_t>(s.id) + 1);
    return size;
  }
  std::vector<int32_t> IdsBefore() const override { return before_; }
  std::vector<int32_t> IdsAfter() const override { return after_; }

  std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      const Special* added = nullptr;
      for (const Special& s : specials_)
        if (s.id == id) added = &s;  // the last of an id, as `tokenizers`' map keeps it
      std::string token;
      if (added != nullptr) token = added->text;
      else if (id >= 0 && id < with_prefix_.GetPieceSize()) token = with_prefix_.IdToPiece(id);
      else continue;  // no token has this id: skipped, as `tokenizers` does
      // Special is a property of the token's text (a piece equal to a special token's
      // content is left out too), as in `tokenizers`.
      if (skip_special_tokens && std::any_of(specials_.begin(), specials_.end(),
                                             [&](const Special& s) { return s.special && s.text == token; }))
        continue;
      tokens.push_back(std::move(token));
    }
    decoder_->DecodeChain(&tokens);
    std::string text;
    for (const std::string& t : tokens) text += t;
    return text;
  }
  Error CanDecode() const override { return ""; }

  static Error Load(const std::string& folder, std::unique_ptr<TextTokenizer>* out);

 private:
  // The steps of Load.
  Error LoadModels(const std::string& model_bytes, const std::string& model_path);
  // The specials of tokenizer_config.json (added_tokens_decoder, then unk, bos, eos); *bos,
  // *eos: their ids (-1: not pieces of the model).
  Error ReadSpecials(const Json& config, const std::string& config_path, int32_t* bos, int32_t* eos);
  // tokenizer.json's added tokens (as specials) and the ids its post-processor puts around a text.
  Error ReadTokenizerJson(const Json& doc, const std::string& json_path);
  // The model's id of `piece`; -1 when it has none (not the unknown piece's id).
  int32_t PieceId(const std::string& piece) const {
    const int id = with_prefix_.PieceToId(piece);
    return id == with_prefix_.unk_id() && with_prefix_.IdToPiece(id) != piece ? -1 : id;
  }
  // Adds a special token unless its text is one already (the first id stays).
  void AddSpecial(const std::string& text, int32_t id, bool special) {
    if (text.empty() || id < 0) return;
    for (const Special& s : specials_)
      if (s.text == text) return;
    specials_.push_back({text, id, special});
  }

  // A stretch of text between special tokens, as Metaspace and the BPE model see it.
  void EncodeStretch(std::string_view stretch, bool first, std::vector<int32_t>* ids) const {
    if (stretch.empty()) return;
    const bool starts_with_space = stretch[0] == ' ' || stretch.substr(0, 3) == "\xE2\x96\x81";
    const bool prefix = !starts_with_space && (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && first));
    std::vector<int> pieces;
    // Encode fails only on a model that is not loaded, which Load rules out.
    (void)(prefix ? with_prefix_ : without_prefix_).Encode(stretch, &pieces);
    ids->insert(ids->end(), pieces.begin(), pieces.end());
  }

  // Constant after Load.
  sentencepiece::SentencePieceProcessor with_prefix_, without_prefix_;
  Prepend prepend_ = Prepend::kFirst;
  std::vector<Special> specials_;
  std::vector<int32_t> before_, after_;  // bos / eos when added
  std::unique_ptr<Decoder> decoder_;     // LlamaTokenizer's (never null after Load)
};

// The JSON object in `path` into *out; a file that is not there leaves *out and *present
// false. Errors start with the path.
Error ReadJsonIfPresent(const std::string& path, Json* out, bool* present) {
  std::ifstream in(path, std::ios::binary);
  *present = static_cast<bool>(in);
  if (!in) return "";
  std::ostringstream text;
  text << in.rdbuf();
  if (!format::JsonDepthWithin(text.str()))
    return path + ": nests deeper than " + std::to_string(format::kMaxJsonDepth) + " levels";
  *out = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!out->is_object()) return path + ": not a JSON object";
  return "";
}

Error SentencePieceTokenizer::LoadModels(const std::string& model_bytes, const std::string& model_path) {
  for (bool dummy_prefix : {true, false}) {
    std::string proto;
    if (Error e = WithPlainNormalizer(model_bytes, dummy_prefix, &proto); !e.empty()) return model_path + ": " + e;
    auto& sp = dummy_prefix ? with_prefix_ : without_prefix_;
    if (const auto st = sp.LoadFromSerializedProto(proto); !st.ok())
      return model_path + ": not a sentencepiece model: " + st.ToString();
  }
  return "";
}

Error SentencePieceTokenizer::ReadSpecials(const Json& config, const std::string& config_path, int32_t* bos,
                                           int32_t* eos) {
  // added_tokens_decoder: {"32000": {"content": "<pad>", ...}, ...}.
  if (const auto it = config.find("added_tokens_decoder"); it != config.end() && it->is_object())
    for (const auto& [key, token] : it->items()) {
      char* end = nullptr;
      const long id = std::strtol(key.c_str(), &end, 10);
      if (*end != '\0' || id < 0 || id > INT32_MAX || !token.is_object() || !token.contains("content") ||
          !token["content"].is_string())
        return config_path + ": added_tokens_decoder[\"" + key + "\"] is not an id with a content";
      AddSpecial(token["content"].get<std::string>(), static_cast<int32_t>(id), ConfigFlag(token, "special", false));
    }
  const auto special = [&](const char* key, const char* fallback) {
    const std::string text = TokenText(config, key, fallback);
    const int32_t id = PieceId(text);
    AddSpecial(text, id, /*special=*/true);
    return id;
  };
  special("unk_token", "<unk>");
  *bos = special("bos_token", "<s>");
  *eos = special("eos_token", "</s>");
  return "";
}

Error SentencePieceTokenizer::ReadTokenizerJson(const Json& doc, const std::string& json_path) {
  if (const auto it = doc.find("added_tokens"); it != doc.end() && it->is_array())
    for (const Json& a : *it)
      if (a.is_object() && a.contains("content") && a["content"].is_string() && a.contains("id") &&
          a["id"].is_number_unsigned() && a["id"].get<uint64_t>() <= INT32_MAX)
        AddSpecial(a["content"].get<std::string>(), static_cast<int32_t>(a["id"].get<uint64_t>()),
                   ConfigFlag(a, "special", false));
  if (const auto it = doc.find("post_processor"); it != doc.end() && !it->is_null()) {
    std::unique_ptr<PostProcessor> post;
    if (Error e = NewPostProcessor(*it, &post); !e.empty()) return json_path + ": " + e;
    before_ = post->Before();
    after_ = post->After();
  }
  return "";
}

Error SentencePieceTokenizer::Load(const std::string& folder, std::unique_ptr<TextTokenizer>* out) {
  const std::string model_path = folder + "/tokenizer.model";
  const std::string config_path = folder + "/tokenizer_config.json";
  std::ifstream in(model_path, std::ios::binary);
  if (!in) return model_path + ": cannot be read";
  std::ostringstream bytes;
  bytes << in.rdbuf();
  auto t = std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer());
  if (Error e = t->LoadModels(bytes.str(), model_path); !e.empty()) return e;

  Json config = Json::object();
  bool present = false;
  if (Error e = ReadJsonIfPresent(config_path, &config, &present); !e.empty()) return e;
  // Only LlamaTokenizer's behaviour is implemented: other classes (T5, ALBERT, Gemma, ...)
  // put other things around sentencepiece, so their folders are refused, not run wrongly.
  if (const auto it = config.find("tokenizer_class"); it != config.end() && !it->is_null()) {
    static const char* const kLlama[] = {"LlamaTokenizer", "LlamaTokenizerFast"};
    if (!it->is_string() || std::find(std::begin(kLlama), std::end(kLlama), it->get<std::string>()) == std::end(kLlama))
      return config_path + ": tokenizer_class " + it->dump() + " is not implemented for " + model_path +
             " (LlamaTokenizer, LlamaTokenizerFast)";
  }
  bool add_bos = true, add_eos = false, legacy = false, add_prefix_space = true;
  for (Error e : {Flag(config, "add_bos_token", true, &add_bos), Flag(config, "add_eos_token", false, &add_eos),
                  Flag(config, "legacy", false, &legacy), Flag(config, "add_prefix_space", true, &add_prefix_space)})
    if (!e.empty()) return config_path + ": " + e;
  t->prepend_ = !add_prefix_space ? Prepend::kNever : legacy ? Prepend::kAlways : Prepend::kFirst;
  if (Error e = NewDecoder(LlamaDecoderJson(add_prefix_space), &t->decoder_); !e.empty())
    return model_path + ": " + e;  // not expected: the JSON is ours
  int32_t bos = -1, eos = -1;
  if (Error e = t->ReadSpecials(config, config_path, &bos, &eos); !e.empty()) return e;

  // The ids around a text: 5.24 takes them from tokenizer.json's post-processor when the
  // folder has one (tokenizer_config.json's add_bos_token / add_eos_token are then not
  // read), else from those two settings. Its added tokens are matched as the specials.
  const std::string json_path = folder + "/tokenizer.json";
  Json doc;
  if (Error e = ReadJsonIfPresent(json_path, &doc, &present); !e.empty()) return e;
  if (present) {
    if (Error e = t->ReadTokenizerJson(doc, json_path); !e.empty()) return e;
    *out = std::move(t);
    return "";
  }
  if (add_bos) {
    if (bos < 0) return config_path + ": add_bos_token, but bos_token \"" + TokenText(config, "bos_token", "<s>") +
                        "\" is not a piece of " + model_path;
    t->before_ = {bos};
  }
  if (add_eos) {
    if (eos < 0) return config_path + ": add_eos_token, but eos_token \"" + TokenText(config, "eos_token", "</s>") +
                        "\" is not a piece of " + model_path;
    t->after_ = {eos};
  }
  *out = std::move(t);
  return "";
}

}  // namespace

Error LoadSentencePieceFolder(const std::string& folder, std::unique_ptr<TextTokenizer>* out) {
  return SentencePieceTokenizer::Load(folder, out);
}

}  // namespace nightshift::tokenizer
