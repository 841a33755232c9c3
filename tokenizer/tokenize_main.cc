// nightshift-tokenize TOKENIZER [--max-len N]: one text per line on stdin, as the hex of its
// bytes (so that ill-formed UTF-8 survives the pipe); its ids per line on stdout, as a JSON
// list.
// nightshift-tokenize TOKENIZER --decode [--keep-special]: one JSON list of ids per line on
// stdin; their text per line on stdout, as a JSON string (TextTokenizer::Decode, special
// tokens left out unless --keep-special).
// TOKENIZER is a tokenizer.json file, or a Hugging Face folder (folder.h LoadFolder: its
// tokenizer.model, else its tokenizer.json). What tests/tokenizer/equality_test.py compares
// with `tokenizers` / transformers.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

namespace tok = nightshift::tokenizer;

// --decode: JSON lists of ids in, JSON strings out; 1 on a line that is not a list of ids.
int DecodeLines(const tok::TextTokenizer& tokenizer, bool skip_special_tokens) {
  if (const tok::Error e = tokenizer.CanDecode(); !e.empty()) {
    std::fprintf(stderr, "nightshift-tokenize: %s\n", e.c_str());
    return 1;
  }
  std::string line;
  std::vector<int32_t> ids;
  for (size_t n = 1; std::getline(std::cin, line); ++n) {
    const nlohmann::json list = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    bool ok = list.is_array();
    ids.clear();
    for (const auto& id : ok ? list : nlohmann::json::array()) {
      ok = ok && id.is_number_integer() && id.get<int64_t>() >= INT32_MIN && id.get<int64_t>() <= INT32_MAX;
      if (ok) ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    if (!ok) {
      std::fprintf(stderr, "nightshift-tokenize: line %zu is not a JSON list of 32-bit ids\n", n);
      return 1;
    }
    std::cout << nlohmann::json(tokenizer.Decode(ids, skip_special_tokens))
                     .dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::strict)
              << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc >= 3 ? argv[2] : "";
  const bool decode = mode == "--decode" && (argc == 3 || (argc == 4 && std::string(argv[3]) == "--keep-special"));
  if (argc != 2 && !(argc == 4 && mode == "--max-len") && !decode) {
    std::fprintf(stderr,
                 "usage: nightshift-tokenize TOKENIZER_JSON|FOLDER [--max-len N] < hex-lines\n"
                 "       nightshift-tokenize TOKENIZER_JSON|FOLDER --decode [--keep-special] < id-lists\n");
    return 2;
  }
  const size_t max_len = argc == 4 && mode == "--max-len" ? std::strtoul(argv[3], nullptr, 10) : 0;
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
  if (decode) return DecodeLines(*tokenizer, /*skip_special_tokens=*/argc == 3);
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
