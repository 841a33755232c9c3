#include "worker/input_files.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <variant>

#include "common/io/atomic_file.h"
#include "tokenizer/folder.h"

namespace fs = std::filesystem;

namespace nightshift {

namespace {

// PrepOptions field by field, each once: its name (nightshift-prepare's flag, with '-'
// for '_', and its key in the fingerprint) and whether it changes what is made.
using Member = std::variant<std::string PrepOptions::*, bool PrepOptions::*, int PrepOptions::*,
                            int64_t PrepOptions::*, uint64_t PrepOptions::*, double PrepOptions::*>;
struct Field {
  const char* name;
  Member member;
  enum Print { kNo, kYes, kWhenSet } fingerprinted;  // kNo: says where the data is, not
                                                     // what is made of it; kWhenSet: only
                                                     // when not empty (added later)
  const char* help;
};
const Field kFields[] = {
    {"path", &PrepOptions::path, Field::kNo, "data.path"},
    {"format", &PrepOptions::format, Field::kYes, "data.format: text_dir or jsonl"},
    {"text_field", &PrepOptions::text_field, Field::kYes, "data.text_field (jsonl)"},
    {"label_field", &PrepOptions::label_field, Field::kYes, "data.label_field (jsonl)"},
    {"completion_field", &PrepOptions::completion_field, Field::kWhenSet, "data.completion_field (jsonl, causal_lm)"},
    {"max_samples", &PrepOptions::max_samples, Field::kYes, "data.max_samples; 0: all"},
    {"validation_fraction", &PrepOptions::validation_fraction, Field::kYes, "data.validation_fraction"},
    {"seed", &PrepOptions::seed, Field::kYes, "train.seed: picks the validation split"},
    {"vocab_size", &PrepOptions::vocab_size, Field::kYes, "data.tokenizer.vocab_size"},
    {"max_len", &PrepOptions::max_len, Field::kYes, "model.max_len: tokens kept per sample"},
    {"classifier", &PrepOptions::classifier, Field::kYes, "false: language-model samples (bos ... eos)"},
    {"tokenizer_model", &PrepOptions::tokenizer_model, Field::kNo, "a tokenizer to use as it is (model.init_from)"},
    {"tokenizer_sha1", &PrepOptions::tokenizer_sha1, Field::kWhenSet, "its sha1"},
    {"pretrained", &PrepOptions::pretrained, Field::kNo, "model.pretrained: its tokenizer.json tokenizes"},
    {"max_line_bytes", &PrepOptions::max_line_bytes, Field::kNo, "the longest jsonl line read, in bytes"},
    {"max_input_bytes", &PrepOptions::max_input_bytes, Field::kNo, "the most bytes read from data.path, in all"},
};

std::string Flag(const char* name) {
  std::string flag = std::string("--") + name;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

// Values as text that reads back exactly. Doubles get the fewest digits that do, but at
// least an ostream's 6, so the fingerprints (cache keys) made before this stay the same.
std::string Text(const std::string& v) { return v; }
std::string Text(bool v) { return v ? "1" : "0"; }
std::string Text(double v) {
  char buf[32];
  for (int digits = 6;; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
    if (digits >= 17 || std::strtod(buf, nullptr) == v) return buf;
  }
}
template <typename Int>
std::string Text(Int v) {
  return std::to_string(v);
}

std::string FieldText(const PrepOptions& o, const Field& f) {
  return std::visit([&o](auto member) { return Text(o.*member); }, f.member);
}

}  // namespace

std::vector<std::string> PretrainedInputs(const PrepOptions& o) {
  if (o.pretrained.empty()) return {};
  // The tokenizer's file first, config.json second, then the tokenizer's other files.
  std::vector<std::string> files = tokenizer::FolderTokenizerInputs(o.pretrained);
  files.insert(files.begin() + 1, o.pretrained + "/config.json");
  return files;
}

std::string OptionsFingerprint(const PrepOptions& o) {
  std::string s = "prep-v" + std::to_string(kPreprocessorVersion) +
                  (o.pretrained.empty() ? "|sentencepiece-unigram" : "|tokenizer.json");
  for (const Field& f : kFields)
    if (f.fingerprinted == Field::kYes || (f.fingerprinted == Field::kWhenSet && !FieldText(o, f).empty()))
      s += std::string("|") + f.name + "=" + FieldText(o, f);
  return s;
}

std::vector<std::string> PrepareArgs(const PrepareCommand& c) {
  std::vector<std::string> args;
  for (const Field& f : kFields) args.insert(args.end(), {Flag(f.name), FieldText(c.options, f)});
  args.insert(args.end(), {"--output-dir", c.output_dir, "--threads", std::to_string(c.threads)});
  for (const std::string& root : c.options.roots) args.insert(args.end(), {"--data-root", root});
  return args;
}

void AddPrepareFlags(CLI::App* app, PrepareCommand* c) {
  for (const Field& f : kFields)
    std::visit([&](auto member) { app->add_option(Flag(f.name), c->options.*member, f.help); }, f.member);
  app->get_option("--path")->required();
  app->add_option("--output-dir", c->output_dir, "the folder to build into")->required();
  app->add_option("--threads", c->threads, "threads that read and tokenize");
  app->add_option("--data-root", c->options.roots,
                  "data must resolve inside one of these (repeatable; none: anywhere)");
}

Status ResolveRoots(std::vector<std::string>* roots) {
  for (std::string& r : *roots) {
    std::error_code ec;
    fs::path real = fs::canonical(r, ec);
    // Not there: the flag's (a typo; the same on every node). Anything else (a stale or
    // failing mount: ESTALE, EIO) is the node's: the worker exits 1, tried again elsewhere.
    if (ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory)
      return Status::InvalidArgument("--data-root " + r + ": " + ec.message());
    if (ec) return Status::IOError("--data-root " + r + ": " + ec.message());
    r = real.string();
  }
  return Status::OK();
}

Status OutsideOwnFolders(const std::string& what, const std::string& path, const std::string& real,
                         const std::vector<std::string>& own) {
  for (const std::string& folder : own)
    if (io::PathWithin(folder, real))
      return Status::InvalidArgument(what + " '" + path + "' resolves to " + real + ", inside this worker's own " +
                                     folder + " (other jobs' checkpoints, models and data); copy what you need "
                                     "under a data root");
  return Status::OK();
}

Status RootsApartFromOwnFolders(const std::vector<std::string>& roots, const std::vector<std::string>& own) {
  for (const std::string& root : roots)
    for (const std::string& folder : own)
      if (root != "/" && (io::PathWithin(root, folder) || io::PathWithin(folder, root)))
        return Status::InvalidArgument("--data-root " + root + " and the worker's own " + folder +
                                       " overlap: every job could read the others' checkpoints and data there; "
                                       "give data roots apart from --work-dir and --checkpoint-root");
  return Status::OK();
}

Status ConfinePath(const std::string& what, const std::string& path, const std::vector<std::string>& roots,
                   std::string* resolved) {
  std::error_code ec;
  const fs::path real = fs::canonical(path, ec);  // realpath(3): '..' and every symlink resolved
  if (ec) {
    return Status::NotFound(what + " '" + path + "' does not exist on this worker (resolved to " +
                            fs::absolute(path, ec).lexically_normal().string() + ")");
  }
  if (resolved != nullptr) *resolved = real.string();
  if (roots.empty()) return Status::OK();
  const std::string p = real.string();
  for (const std::string& r : roots)
    if (io::PathWithin(r, p)) return Status::OK();
  std::string list;
  for (const std::string& r : roots) list += (list.empty() ? "" : ", ") + r;
  return Status::InvalidArgument(what + " '" + path + "' resolves to " + p + ", outside this worker's data roots (" +
                                 list + "); use a path under one of them");
}

Status ListInputs(const PrepOptions& options, std::vector<InputFile>* files) {
  files->clear();
  std::error_code ec;
  std::string resolved;
  NS_RETURN_IF_ERROR(ConfinePath("data.path", options.path, options.roots, &resolved));
  const fs::path root = options.roots.empty() ? fs::absolute(options.path, ec) : fs::path(resolved);
  if (options.format == "jsonl") {
    if (!fs::is_regular_file(root))
      return Status::InvalidArgument("data.path " + root.string() + " is not a file (format jsonl)");
    files->push_back({root.filename().string(), "", root.string()});
    return Status::OK();
  }
  if (!fs::is_directory(root))
    return Status::InvalidArgument("data.path " + root.string() + " is not a folder (format text_dir)");
  for (const auto& label_dir : fs::directory_iterator(root, ec)) {
    if (!label_dir.is_directory()) continue;
    const std::string label = label_dir.path().filename().string();
    for (const auto& f : fs::directory_iterator(label_dir.path(), ec)) {
      if (!f.is_regular_file()) continue;
      // A symlink inside the data folder (file or label folder) must not lead out of the roots.
      if (!options.roots.empty())
        NS_RETURN_IF_ERROR(ConfinePath("data file", f.path().string(), options.roots));
      files->push_back({label + "/" + f.path().filename().string(), label, f.path().string()});
    }
  }
  if (ec) return Status::IOError("cannot list " + root.string() + ": " + ec.message());
  if (files->empty())
    return Status::InvalidArgument("data.path " + root.string() +
                                   " holds no samples: format text_dir needs one sub-folder of files per label");
  std::sort(files->begin(), files->end(), [](const InputFile& a, const InputFile& b) { return a.id < b.id; });
  return Status::OK();
}

}  // namespace nightshift
