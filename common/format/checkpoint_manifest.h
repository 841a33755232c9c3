// A checkpoint's manifest.json (<job folder>/step-N/manifest.json, checkpoint_layout.h):
// what the checkpoint is, which run and attempt wrote it, and every other file in it with
// its size and SHA-256. The one place that reads and writes it: the trainer
// saves, resumes and exports by it (worker/trainer/checkpoint/checkpoint.h), the worker serves and
// copies checkpoints by it (worker/checkpoint_copy.h).
//
//   {"magic": "nightshift-checkpoint", "version": 2,
//    "position": the trainer's RunPosition (worker/trainer/position.h),
//    "fingerprint": what a run must match to resume from it,
//    "attempt": the job attempt that wrote it (absent before fencing),
//    "best": {"step": B, "manifest_sha256": "hex"}: the older checkpoint export.best will
//            export, and its manifest's SHA-256 when this one was written (absent when
//            there is none; a worker vouches for it by this manifest: worker/checkpoint_copy.h),
//    "files": {name: {"bytes": N, "sha256": "hex"}}}
//
// Version 1 had the position's fields at the top level and may lack "files"; versions 1
// and 2 have "fnv1a64": "decimal" instead of "sha256" (still read and verified: the
// trainer resumes from them; a checkpoint copy between workers needs SHA-256). Standard
// library and nlohmann-json (header-only) only: the trainer links it.
#ifndef NIGHTSHIFT_COMMON_FORMAT_CHECKPOINT_MANIFEST_H_
#define NIGHTSHIFT_COMMON_FORMAT_CHECKPOINT_MANIFEST_H_

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "common/crypto/sha256.h"
#include "common/format/shard.h"

namespace nightshift::format {

inline constexpr char kCheckpointMagic[] = "nightshift-checkpoint";
inline constexpr int kCheckpointVersion = 3;        // written
inline constexpr int kOldestCheckpointVersion = 1;  // the oldest the trainer reads

struct ManifestFile {
  uint64_t bytes = 0;
  std::string sha256;    // lower-case hex; "" in versions 1 and 2
  uint64_t fnv1a64 = 0;  // StableHash64 of the whole file (shard.h); versions 1 and 2 only
};

// A file's bytes, streamed in, into the entry a manifest lists for them.
class FileHasher {
 public:
  void Update(const char* data, size_t n);
  ManifestFile Entry();  // once, after the last Update

 private:
  crypto::Sha256 sha_;
  uint64_t fnv_ = StableHash64(nullptr, 0);
  uint64_t bytes_ = 0;
};

struct CheckpointManifest {
  int version = kCheckpointVersion;
  // Version 2: the "position" object; version 1: the whole document (its position
  // fields were at the top level). The trainer reads it; nothing else looks inside.
  nlohmann::json position;
  std::string fingerprint;
  int attempt = -1;  // -1: absent
  int64_t best_step = 0;             // "best": 0 when absent
  std::string best_manifest_sha256;  // lower-case hex, 64 digits, with best_step
  std::map<std::string, ManifestFile> files;  // every file but manifest.json and COMPLETE
};

// Whether `name` can be a file in a folder that a manifest lists: not empty, ".", "..",
// at most 255 bytes, no '/', '\\' or control characters.
bool IsPlainFileName(const std::string& name);

// The manifest's entry for a file with these contents.
ManifestFile FileEntry(const std::string& bytes);

// manifest.json's text for `m` (magic included).
std::string ManifestText(const CheckpointManifest& m);

// Parses manifest.json's text into *out. Returns "" or what is wrong: not JSON, not a
// nightshift-checkpoint, a file entry without its size and checksum, a listed name that
// is not a plain file name (or is manifest.json or COMPLETE). The version is not checked
// against what a reader supports: that is the reader's call. A version above
// kCheckpointVersion parses with its version and attempt alone (its other fields may
// mean something else), so that a reader refuses it instead of skipping it as damaged.
std::string ParseManifest(const std::string& text, CheckpointManifest* out);

// Reads and parses <step_dir>/manifest.json; "" or what is wrong, naming the file.
std::string ReadManifest(const std::string& step_dir, CheckpointManifest* out);

// Whether a file whose FileHasher gave `got` is `want` (by SHA-256 when `want` has one,
// else FNV-1a 64): "" or "<name> is truncated (N of M bytes)" / "<name> does not match
// its checksum".
std::string VerifyFile(const std::string& name, const ManifestFile& got, const ManifestFile& want);

// Reads every file `m` lists from `step_dir` and verifies it: "" or the first that is
// missing or does not match, naming its path.
std::string VerifyFiles(const std::string& step_dir, const CheckpointManifest& m);

}  // namespace nightshift::format

#endif  // NIGHTSHIFT_COMMON_FORMAT_CHECKPOINT_MANIFEST_H_
