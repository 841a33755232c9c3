// LoadFolder (folder.h): a folder's tokenizer.model through sentencepiece, else its
// tokenizer.json. Apart from tokenizer.cc so that what links only the tokenizer.json
// pipeline (the fuzz target) needs no sentencepiece.
#include "tokenizer/folder.h"

#include "tokenizer/tokenizer.h"

namespace nightshift::tokenizer {

Error LoadFolder(const std::string& folder, std::unique_ptr<TextTokenizer>* out) {
  const std::string file = FolderTokenizerFile(folder);
  if (file == folder + "/tokenizer.model") return LoadSentencePieceFolder(folder, out);
  std::unique_ptr<Tokenizer> t;
  if (Error e = Tokenizer::Load(file, &t); !e.empty()) return e;
  *out = std::move(t);
  return "";
}

}  // namespace nightshift::tokenizer
