// Model folders (the trainer's export, worker/trainer/checkpoint/export.h) as the daemons and the
// CLI handle them without LibTorch: checksums.json read, written and verified, and a
// folder sent as v1::ArtifactChunks (JobService.GetArtifacts, WorkerFileService.ReadModel).
#ifndef NIGHTSHIFT_COMMON_MODEL_FOLDER_H_
#define NIGHTSHIFT_COMMON_MODEL_FOLDER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "common/format/checkpoint_manifest.h"
#include "common/crypto/sha256.h"
#include "common/status.h"
#include "nightshift/v1/jobs.pb.h"

namespace nightshift {

inline constexpr char kChecksumsFile[] = "checksums.json";

// checksums.json: {"algorithm": "sha256", "files": {name: {"bytes": N, "sha256": hex}}}.
// We write SHA-256 (crypto::kChecksumAlgorithm); folders written before it hold "sha1"
// (algorithm and per-file key), which every reader still accepts.
using crypto::kChecksumAlgorithm;

struct FileChecksum {
  int64_t bytes = 0;
  std::string algorithm;  // "sha256" | "sha1": the file's checksums.json's
  std::string hex;        // lower-case hex
};
using ModelChecksums = std::map<std::string, FileChecksum>;  // by file name

using format::IsPlainFileName;  // a name that stays inside its folder

// checksums.json text -> its files; Corruption naming what is wrong (an algorithm other
// than sha256 or sha1, a name that is not a plain file name, a missing field).
StatusOr<ModelChecksums> ParseChecksums(const std::string& json);

// Writes dir/checksums.json (SHA-256) covering every other regular file of `dir`.
Status WriteChecksums(const std::string& dir);

// Checks every file that dir/checksums.json lists (size, then its digest) and that no other
// file is there; Corruption naming the first file that does not match.
Status VerifyModelFolder(const std::string& dir);

// The folder name of a kept checkpoint's export beside a job's final `model` folder:
// "model-step-N" (written by the worker on request, read by the coordinator from a
// shared checkpoint root).
std::string ModelStepFolderName(int64_t step);

// The "step" of dir/config.json; -1 when it cannot be read.
int64_t ModelFolderStep(const std::string& dir);

// Sends the folder as chunks of at most 1 MiB: the first carries checksums.json (the text
// as it is on disk) and `step`, then every file it lists, in name order. The files are
// sent as they are (the receiver verifies). `write` returns false when the reader left
// (then this returns Cancelled). NotFound when dir/checksums.json is not there.
// `beneath`: an absolute folder that holds `dir` (the job's checkpoint folder), which no
// job can replace: every file is opened beneath it (openat2 RESOLVE_BENEATH), so `dir` or
// a file in it made a link by the job's code (another job's model) is refused, not read.
// One file of such a stream: `path`, opened beneath `beneath` as above, as chunks named
// `name` at increasing offsets (an empty file: one empty chunk). Cancelled when `write`
// returns false (the rest is not read), IOError naming the path when it cannot be read.
Status SendFileBeneath(const std::string& beneath, const std::string& path, const std::string& name,
                       const std::function<bool(const v1::ArtifactChunk&)>& write);

Status SendModelFolder(const std::string& dir, const std::string& beneath, int64_t step,
                       const std::function<bool(const v1::ArtifactChunk&)>& write);

}  // namespace nightshift

#endif  // NIGHTSHIFT_COMMON_MODEL_FOLDER_H_
