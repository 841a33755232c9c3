// How deep a JSON text nests, counted without parsing it. nlohmann-json parses any depth
// without recursion, but copying, comparing and dumping a value recurse once per level:
// a few hundred kilobytes of '[' in a file we are handed overflow the stack. Every parser
// of JSON from outside (a user's model folder, a checkpoint, a data file) checks this
// first. Header-only: the trainer, the tokenizer library and the fuzzers include it.
#ifndef NIGHTSHIFT_COMMON_FORMAT_JSON_DEPTH_H_
#define NIGHTSHIFT_COMMON_FORMAT_JSON_DEPTH_H_

#include <string_view>

namespace nightshift::format {

// serde_json's limit, which `tokenizers` and the safetensors reference parse with: no file
// they read nests deeper.
inline constexpr int kMaxJsonDepth = 128;

// Whether `text` nests arrays and objects at most `max_depth` deep ('[' and '{' outside
// strings). Exact for valid JSON; for anything else its parser gives the error.
inline bool JsonDepthWithin(std::string_view text, int max_depth = kMaxJsonDepth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

}  // namespace nightshift::format

#endif  // NIGHTSHIFT_COMMON_FORMAT_JSON_DEPTH_H_
