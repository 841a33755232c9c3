// Reading the numbers a Python reference script (transformers itself) wrote: the file's
// text and nested JSON lists as tensors.
#ifndef NIGHTSHIFT_TESTS_WORKER_TRAINER_REFERENCE_UTIL_H_
#define NIGHTSHIFT_TESTS_WORKER_TRAINER_REFERENCE_UTIL_H_

#include <torch/torch.h>

#include <nlohmann/json.hpp>

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

}  // namespace nightshift::trainer::testing

#endif  // NIGHTSHIFT_TESTS_WORKER_TRAINER_REFERENCE_UTIL_H_
