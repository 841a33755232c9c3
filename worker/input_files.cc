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

Status ResolveRoots(std::vector<std::string>* roots) {
  for (std::string& r : *roots) {
    std::error_code ec;
    fs::path real = fs::canonical(r, ec);
    if (ec) return Status::InvalidArgument("--data-root " + r + ": " + ec.message());
    r = real.string();
  }
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
  for (const std::string& r : roots) {
    if (p == r || r == "/" || (p.size() > r.size() && p.compare(0, r.size(), r) == 0 && p[r.size()] == '/'))
      return Status::OK();
  }
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
