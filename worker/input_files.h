// The inputs of data preparation: which files a job's data consists of, and the
// options that change what preparation makes of them. Shared by the worker (cache keys)
// and nightshift-prepare (the build); links neither sentencepiece nor protobuf.
#ifndef NIGHTSHIFT_WORKER_INPUT_FILES_H_
#define NIGHTSHIFT_WORKER_INPUT_FILES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace CLI {
class App;
}

namespace nightshift {

// Bump when the output of preparation changes for the same inputs and options.
inline constexpr int kPreprocessorVersion = 2;

// What changes the output of preparation (the spec's data section, resolved; the
// worker's PrepOptionsFor() in assignment.h maps a spec to it). A new field also needs a
// row in input_files.cc's table, which gives it its nightshift-prepare flag and its
// place in the fingerprint.
struct PrepOptions {
  std::string path;                 // data.path; relative to the current directory
  std::string format = "text_dir";  // text_dir | jsonl
  std::string text_field = "text";  // jsonl
  std::string label_field;          // jsonl; empty for language models
  std::string completion_field;     // jsonl language models: the completion (text_field: the prompt)
  int64_t max_samples = 0;          // 0: all
  double validation_fraction = 0.2;
  uint64_t seed = 1234;             // picks the validation split
  int vocab_size = 8000;
  int max_len = 512;                // tokens kept per sample (bos included)
  bool classifier = true;           // false: language-model samples (bos ... eos)
  std::string tokenizer_model;      // a sentencepiece model used as it is (model.init_from's
                                    // tokenizer.model); "": one is trained on the data
  std::string tokenizer_sha1;       // its digest in the folder's checksums.json (sha256, or sha1
                                    // in older folders); in the fingerprint only when set, so
                                    // older keys stay the same
  // model.pretrained: the Hugging Face folder whose tokenizer (tokenizer.model, else
  // tokenizer.json) tokenizes the data (and
  // whose config.json gives the padding id); "": sentencepiece as above. Its files' contents
  // are in the cache key (FeatureCache::KeyFor), its path is not.
  std::string pretrained;
  // Where data may be read from (the worker's --data-root flags, resolved); empty: anywhere.
  // Not part of the fingerprint: it decides whether, not what, to prepare.
  std::vector<std::string> roots;
  // Limits on what preparation reads, set by the worker's operator (nightshift-worker
  // --max-prep-bytes); like roots, they decide whether, not what, to prepare. Past one,
  // preparation fails naming the file and line (a user error).
  int64_t max_line_bytes = int64_t{16} << 20;   // bytes of one jsonl line, its '\n' aside
  int64_t max_input_bytes = int64_t{64} << 30;  // bytes read from data.path in all
  // Distinct labels are at most format::kMaxClasses (shard.h), which the trainer relies on.
};

// The files of options.pretrained that preparation reads: the tokenizer's file (its
// tokenizer.model when it has one, else its tokenizer.json: tokenizer/folder.h), config.json,
// and a sentencepiece folder's tokenizer_config.json and tokenizer.json when present, in
// that order: their contents are part of the cache key. Empty without model.pretrained.
std::vector<std::string> PretrainedInputs(const PrepOptions& options);

// Everything in PrepOptions except the path and roots, plus the preprocessor version, as text.
std::string OptionsFingerprint(const PrepOptions& options);

// nightshift-prepare's command line: the options, and where and how to build.
struct PrepareCommand {
  PrepOptions options;
  std::string output_dir;  // the folder to build into (created)
  int threads = 2;         // threads that read and tokenize
};

// The arguments (after the program name) that make nightshift-prepare parse `command`
// back exactly: every field, numbers without rounding.
std::vector<std::string> PrepareArgs(const PrepareCommand& command);

// Declares nightshift-prepare's flags on `app`, parsing into *command. PrepareArgs and
// this read one table of fields, so the worker's argv and the parser cannot drift.
void AddPrepareFlags(CLI::App* app, PrepareCommand* command);

struct InputFile {
  std::string id;     // stable sample id: "<label>/<file name>" (text_dir) or the file name (jsonl)
  std::string label;  // text_dir: the sub-folder; jsonl: empty (labels are inside)
  std::string path;   // absolute
};

// Resolves `path` (relative: against the current directory) following every symlink, and
// checks that it is one of `roots` or inside one (roots already resolved; empty: no
// confinement). Missing: NOT_FOUND; outside: INVALID_ARGUMENT naming `what`, the path,
// what it resolved to and the roots (a user error). Fills *resolved when non-null.
Status ConfinePath(const std::string& what, const std::string& path, const std::vector<std::string>& roots,
                   std::string* resolved = nullptr);

// Resolves each root to its real path; a root that does not exist is INVALID_ARGUMENT (the
// flag's), one that cannot be resolved otherwise an I/O error (the node's: a stale mount).
Status ResolveRoots(std::vector<std::string>* roots);

// The worker's own folders (its work dir: jobs' configs, logs, the feature cache; its
// checkpoint root: every job's checkpoints and exports), resolved: a job's path resolved
// to `real` inside one is INVALID_ARGUMENT naming `what` (another job's model is there),
// even inside a data root or under --allow-any-path.
Status OutsideOwnFolders(const std::string& what, const std::string& path, const std::string& real,
                         const std::vector<std::string>& own);
// INVALID_ARGUMENT naming both when a data root (resolved; not "/", --allow-any-path's)
// holds one of `own` or lies inside one: each job could read the others' files.
Status RootsApartFromOwnFolders(const std::vector<std::string>& roots, const std::vector<std::string>& own);

// The input files in a stable order (sorted by id). With options.roots, data.path and
// every file in it (symlinks followed) must lie inside a root. A missing path is NOT_FOUND naming
// it (resolved against the current directory); an empty or malformed layout is
// INVALID_ARGUMENT. Both are user errors.
Status ListInputs(const PrepOptions& options, std::vector<InputFile>* files);

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_INPUT_FILES_H_
