// nightshift-tokenize TOKENIZER [--max-len N]: one text per line on stdin, as the hex of its
// bytes (so that ill-formed UTF-8 survives the pipe); its ids per line on stdout, as a JSON
// list. TOKENIZER is a tokenizer.json file, or a Hugging Face folder (folder.h LoadFolder:
// its tokenizer.model, else its tokenizer.json). What tests/tokenizer/equality_test.py
// compares with `tokenizers` / transformers.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "tokenizer/tokenizer.h"

namespace {

bool FromHex(const std::string& hex, std::string* out) {
  if (hex.size() % 2 != 0) return false;
  out->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    char* end = nullptr;
    const std::string byte = hex.substr(i, 2);
    const long v = std::strtol(byte.c_str(), &end, 16);
    if (*end != '\0') return false;
    out->push_back(static_cast<char>(v));
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && !(argc == 4 && std::string(argv[2]) == "--max-len")) {
    std::fprintf(stderr, "usage: nightshift-tokenize TOKENIZER_JSON|FOLDER [--max-len N] < hex-lines\n");
    return 2;
  }
  const size_t max_len = argc == 4 ? std::strtoul(argv[3], nullptr, 10) : 0;
  namespace tok = nightshift::tokenizer;
  std::unique_ptr<tok::TextTokenizer> tokenizer;
  std::error_code ec;
  tok::Error e;
  if (std::filesystem::is_directory(argv[1], ec)) {
    e = tok::LoadFolder(argv[1], &tokenizer);
  } else {
    std::unique_ptr<tok::Tokenizer> json;
    e = tok::Tokenizer::Load(argv[1], &json);
    tokenizer = std::move(json);
  }
  if (!e.empty()) {
    std::fprintf(stderr, "nightshift-tokenize: %s\n", e.c_str());
    return 1;
  }
  std::string line, text;
  for (size_t n = 1; std::getline(std::cin, line); ++n) {
    if (!FromHex(line, &text)) {
      std::fprintf(stderr, "nightshift-tokenize: line %zu is not hex\n", n);
      return 1;
    }
    std::string out = "[";
    for (int32_t id : tokenizer->Encode(text, max_len)) out += (out.size() > 1 ? "," : "") + std::to_string(id);
    std::cout << out << "]\n";
  }
  return 0;
}
