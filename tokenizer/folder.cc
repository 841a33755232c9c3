// LoadFolder (folder.h): a folder's tokenizer.model through sentencepiece, else its
// tokenizer.json. Apart from tokenizer.cc so that what links only the tokenizer.json
// pipeline (the fuzz target) needs no sentencepiece.
#include "tokenizer/folder.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/format/json_depth.h"
#include "tokenizer/tokenizer.h"

namespace nightshift::tokenizer {
namespace {

std::string ReadAll(std::ifstream& in) {
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// transformers 5.24 does not run a LlamaTokenizer's tokenizer.json as it is: its class
// rebuilds the pipeline around the file's vocabulary and merges (LlamaTokenizer.__init__):
// no normalizer, a Metaspace whose prepend scheme comes from tokenizer_config.json
// (legacy true: "always"; else "first"; add_prefix_space false: "never"), BPE with
// byte_fallback and fuse_unk, and the decoder Replace(U+2581 -> " "), ByteFallback, Fuse,
// then Strip(one leading space) unless add_prefix_space is false. So a file saved with
// legacy true (whose tokenizer_config.json 5.24 writes without `legacy`) reloads as
// "first". The same rebuild, on the JSON.
void AsLlamaTokenizer(const Json& config, Json* doc) {
  const std::string scheme = !ConfigFlag(config, "add_prefix_space", true) ? "never"
                             : ConfigFlag(config, "legacy", false)        ? "always"
                                                                           : "first";
  if (!doc->is_object() || !doc->contains("model") || !(*doc)["model"].is_object()) return;  // FromJson says
  (*doc)["normalizer"] = nullptr;
  (*doc)["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme},
                             {"split", false}};
  (*doc)["decoder"] = LlamaDecoderJson(ConfigFlag(config, "add_prefix_space", true));
  Json& model = (*doc)["model"];
  model["type"] = "BPE";
  model["fuse_unk"] = true;
  model["byte_fallback"] = true;
  model["unk_token"] = nullptr;
  model["dropout"] = nullptr;
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
}

}  // namespace

Json LlamaDecoderJson(bool add_prefix_space) {
  Json steps = Json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                            {{"type", "ByteFallback"}},
                            {{"type", "Fuse"}}});
  if (add_prefix_space) steps.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  return {{"type", "Sequence"}, {"decoders", steps}};
}

bool ConfigFlag(const Json& config, const char* key, bool fallback) {
  const auto it = config.find(key);
  return it != config.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

Error LoadFolder(const std::string& folder, std::unique_ptr<TextTokenizer>* out) {
  const std::string file = FolderTokenizerFile(folder);
  if (file == folder + "/tokenizer.model") return LoadSentencePieceFolder(folder, out);
  std::ifstream in(file, std::ios::binary);
  if (!in) return file + ": cannot be read";
  std::string text = ReadAll(in);
  TokenizerOptions options;
  options.source = file;
  if (std::ifstream cin(folder + "/tokenizer_config.json"); cin) {
    const std::string config_text = ReadAll(cin);
    const Json config = format::JsonDepthWithin(config_text)
                            ? Json::parse(config_text, nullptr, /*allow_exceptions=*/false)
                            : Json();
    const auto cls = config.is_object() ? config.find("tokenizer_class") : config.end();
    if (config.is_object() && cls != config.end() &&
        (*cls == "LlamaTokenizer" || *cls == "LlamaTokenizerFast")) {
      if (format::JsonDepthWithin(text)) {  // else FromJson says
        Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
        AsLlamaTokenizer(config, &doc);
        if (doc.is_object()) text = doc.dump();
      }
    }
    if (config.is_object())
      options.clean_up_tokenization_spaces = ConfigFlag(config, "clean_up_tokenization_spaces", false);
  }
  std::unique_ptr<Tokenizer> t;
  if (Error e = Tokenizer::FromJson(text, &t, options); !e.empty()) return file + ": " + e;
  *out = std::move(t);
  return "";
}

}  // namespace nightshift::tokenizer
