// Reading the numbers a Python reference script (transformers itself) wrote: the file's
// text and nested JSON lists as tensors.
#ifndef NIGHTSHIFT_TESTS_WORKER_TRAINER_REFERENCE_UTIL_H_
#define NIGHTSHIFT_TESTS_WORKER_TRAINER_REFERENCE_UTIL_H_

#include <torch/torch.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
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

// What `python` would make a reference with: its own version and those of torch,
// transformers and tokenizers, one line ("3.11.7 2.14.1 5.24.0 0.23.3"), read from the
// installed packages' metadata (nothing imported: about 0.1 s). If it cannot tell (no such
// python or package), the error text stands in, so the key still changes.
inline std::string PythonPackageVersions(const std::string& python) {
  const std::string cmd = python +
                          " -c \"import importlib.metadata as m, sys; print(sys.version.split()[0], "
                          "*(m.version(p) for p in ('torch', 'transformers', 'tokenizers')))\" 2>&1";
  std::string out;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[256];
    for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) out.append(buf, n);
    out += "exit " + std::to_string(::pclose(f));
  } else {
    out = "popen failed: " + cmd;
  }
  return out;
}

// A folder that shell `command` (with {dir} for the folder) fills, made once per text of
// the command, of the files it reads (`inputs`) and of the versions of Python, torch,
// transformers and tokenizers that `python` has (PythonPackageVersions: an upgrade makes a
// new reference instead of reusing the old one), and shared read-only by the processes
// ctest starts (one per test): filled under a private name, then renamed into place (a
// process that comes second keeps the first one's). The folder lives in `root` (default:
// gtest's TempDir). Returns the folder, or "" with the command and its log in `*error`.
// Tests copy what they break into folders of their own.
inline std::string SharedFolder(const std::string& prefix, const std::string& command,
                                const std::vector<std::string>& inputs, const std::string& python, std::string* error,
                                const std::string& root = "") {
  namespace fs = std::filesystem;
  std::string key = command + "\n" + PythonPackageVersions(python);
  for (const std::string& input : inputs) key += ReadAll(input);
  const std::string dir = (fs::path(root.empty() ? ::testing::TempDir() : root) /
                           (prefix + "_" + std::to_string(std::hash<std::string>{}(key))))
                              .string();
  if (fs::exists(dir + "/done")) return dir;
  std::error_code ec;
  fs::create_directories(fs::path(dir).parent_path(), ec);
  const std::string tmp = dir + ".tmp" + std::to_string(::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  std::string filled = command;
  for (size_t at; (at = filled.find("{dir}")) != std::string::npos;) filled.replace(at, 5, tmp);
  filled = "( " + filled + " ) > " + tmp + "/log 2>&1 && touch " + tmp + "/done";
  if (std::system(filled.c_str()) != 0) {
    *error = filled + ":\n" + ReadAll(tmp + "/log");
    fs::remove_all(tmp, ec);
    return "";
  }
  fs::rename(tmp, dir, ec);
  if (ec) fs::remove_all(tmp);
  return dir;
}

// Removes what SharedFolder left in `root` under `prefix` other than `keep`: folders of
// other keys (older scripts or package versions) and unfinished ones whose process is
// gone. For big folders kept in a lasting cache, where each version would otherwise stay.
inline void RemoveOtherSharedFolders(const std::string& root, const std::string& prefix, const std::string& keep) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix + "_", 0) != 0 || entry.path() == fs::path(keep)) continue;
    const size_t at = name.find(".tmp");
    if (at != std::string::npos) {
      const long pid = std::strtol(name.c_str() + at + 4, nullptr, 10);
      if (pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)) continue;  // still being made
    }
    fs::remove_all(entry.path(), ec);
  }
}

// hf_models_reference.py's tiny random BERT, RoBERTa and DistilBERT folders (every dropout
// 0 in their config.json), each with a WordPiece tokenizer of their 100 ids, which a job's
// export copies (synthetic shards are ids already); made once per version of the script
// and of torch, transformers and tokenizers, and shared by the test processes
// (SharedFolder). "" (and *error) when making them failed.
inline std::string EncoderFoldersWithTokenizers(const std::string& source_dir, const std::string& python,
                                                std::string* error) {
  const std::string script = source_dir + "/tests/support/hf_models_reference.py";
  const std::string tokenizers = python + " -c '\n"
      "import os, sys\n"
      "from transformers import BertTokenizerFast\n"
      "d = sys.argv[1]\n"
      "open(d + \"/vocab.txt\", \"w\").write(\"\\n\".join([\"[PAD]\", \"[UNK]\", \"[CLS]\", \"[SEP]\", \"[MASK]\"] + "
      "[\"w%d\" % i for i in range(5, 100)]))\n"
      "for arch in (\"bert\", \"roberta\", \"distilbert\"):\n"
      "    BertTokenizerFast(vocab=d + \"/vocab.txt\").save_pretrained(os.path.join(d, arch))\n"
      "' {dir}";
  return SharedFolder("nightshift_hf_train", python + " " + script + " {dir} && " + tokenizers, {script}, python, error);
}

}  // namespace nightshift::trainer::testing

#endif  // NIGHTSHIFT_TESTS_WORKER_TRAINER_REFERENCE_UTIL_H_
