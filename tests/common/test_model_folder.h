// A model folder in the export's layout (worker/trainer/checkpoint/export.h) for tests that cannot
// wait for a trainer: model.safetensors (bytes that are not a real header, bigger than
// one 1 MiB chunk), config.json, tokenizer.model, and checksums.json over them.
#ifndef NIGHTSHIFT_TESTS_COMMON_TEST_MODEL_FOLDER_H_
#define NIGHTSHIFT_TESTS_COMMON_TEST_MODEL_FOLDER_H_

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "common/model_folder.h"

namespace nightshift::testing_model {

// Writes the folder (created with its parents); returns its files' contents by name,
// checksums.json left out.
inline std::map<std::string, std::string> WriteModelFolder(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::map<std::string, std::string> files;
  std::string weights(3 * (1 << 20) / 2, '\0');
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<char>((i * 131) % 251);
  files["model.safetensors"] = weights;
  files["config.json"] = "{\"format\": \"nightshift-model\", \"version\": 1, \"labels\": [\"ham\", \"spam\"]}";
  files["tokenizer.model"] = std::string("sentencepiece\0model", 19);
  for (const auto& [name, bytes] : files) std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
  Status s = WriteChecksums(dir);
  if (!s.ok()) files.clear();
  return files;
}

// Reads a whole file ("" when missing).
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace nightshift::testing_model

#endif  // NIGHTSHIFT_TESTS_COMMON_TEST_MODEL_FOLDER_H_
