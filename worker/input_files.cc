#include "worker/input_files.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

namespace fs = std::filesystem;

namespace nightshift {

std::string OptionsFingerprint(const PrepOptions& o) {
  std::ostringstream s;
  s << "prep-v" << kPreprocessorVersion << "|sentencepiece-unigram|format=" << o.format
    << "|text_field=" << o.text_field << "|label_field=" << o.label_field << "|max_samples=" << o.max_samples
    << "|validation_fraction=" << o.validation_fraction << "|seed=" << o.seed << "|vocab_size=" << o.vocab_size
    << "|max_len=" << o.max_len << "|classifier=" << o.classifier;
  return s.str();
}

Status ListInputs(const PrepOptions& options, std::vector<InputFile>* files) {
  files->clear();
  std::error_code ec;
  const fs::path root = fs::absolute(options.path, ec);
  if (ec || !fs::exists(root))
    return Status::NotFound("data.path '" + options.path + "' does not exist on this worker (resolved to " +
                            root.string() + ")");
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
