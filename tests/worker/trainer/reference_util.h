// Reading the numbers a Python reference script (transformers itself) wrote: the file's
// text and nested JSON lists as tensors.
#ifndef NIGHTSHIFT_TESTS_WORKER_TRAINER_REFERENCE_UTIL_H_
#define NIGHTSHIFT_TESTS_WORKER_TRAINER_REFERENCE_UTIL_H_

#include <torch/torch.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace nightshift::trainer::testing {

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A nested JSON list of numbers as a tensor of its shape.
inline torch::Tensor FromJson(const nlohmann::json& j, torch::ScalarType type) {
  std::vector<int64_t> shape;
  std::vector<double> flat;
  std::function<void(const nlohmann::json&, size_t)> walk = [&](const nlohmann::json& v, size_t depth) {
    if (!v.is_array()) return flat.push_back(v.get<double>());
    if (shape.size() == depth) shape.push_back(static_cast<int64_t>(v.size()));
    for (const nlohmann::json& e : v) walk(e, depth + 1);
  };
  walk(j, 0);
  return torch::tensor(flat, torch::kFloat64).view(shape).to(type);
}

// A folder that shell `command` (with {dir} for the folder) fills, made once per text of
// the command and of the files it reads (`inputs`), and shared read-only by the processes
// ctest starts (one per test): filled under a private name, then renamed into place (a
// process that comes second keeps the first one's). Returns the folder, or "" with the
// command and its log in `*error`. Tests copy what they break into folders of their own.
inline std::string SharedFolder(const std::string& prefix, const std::string& command,
                                const std::vector<std::string>& inputs, std::string* error) {
  namespace fs = std::filesystem;
  std::string key = command;
  for (const std::string& input : inputs) key += ReadAll(input);
  const std::string dir =
      (fs::path(::testing::TempDir()) / (prefix + "_" + std::to_string(std::hash<std::string>{}(key)))).string();
  if (fs::exists(dir + "/done")) return dir;
  const std::string tmp = dir + ".tmp" + std::to_string(::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  std::string filled = command;
  for (size_t at; (at = filled.find("{dir}")) != std::string::npos;) filled.replace(at, 5, tmp);
  filled = "( " + filled + " ) > " + tmp + "/log 2>&1 && touch " + tmp + "/done";
  if (std::system(filled.c_str()) != 0) {
    *error = filled + ":\n" + ReadAll(tmp + "/log");
    return "";
  }
  std::error_code ec;
  fs::rename(tmp, dir, ec);
  if (ec) fs::remove_all(tmp);
  return dir;
}

}  // namespace nightshift::trainer::testing

#endif  // NIGHTSHIFT_TESTS_WORKER_TRAINER_REFERENCE_UTIL_H_
