// A job's checkpoint folder as every process sees it (worker/trainer/checkpoint/checkpoint.h writes
// it; the worker daemon lists and copies it without LibTorch):
//   <job folder>/step-00000123/   one checkpoint: manifest.json, the files it lists with
//                                 their sizes and FNV-1a 64 checksums, COMPLETE written last
//   <job folder>/FENCE            the newest attempt that claimed the folder
#ifndef NIGHTSHIFT_COMMON_FORMAT_CHECKPOINT_LAYOUT_H_
#define NIGHTSHIFT_COMMON_FORMAT_CHECKPOINT_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

namespace nightshift::format {

inline constexpr char kCheckpointComplete[] = "COMPLETE";

// The one rule for a job id on a worker's disk, where it names folders (<work dir>/jobs/
// <id>, <checkpoint root>/<id>) and so must not climb out of them: 1 to 64 of
// [A-Za-z0-9_-]. The coordinator's ids (j-000001) are such names.
bool IsJobId(const std::string& id);

inline constexpr char kCheckpointManifest[] = "manifest.json";

// "step-00000123" for 123, and back (-1 for any other name).
std::string StepDirName(int64_t step);
int64_t StepOfDirName(const std::string& name);

// Whether `step_dir` holds its COMPLETE marker (a checkpoint that exists); false on any error.
bool IsComplete(const std::string& step_dir);

// The steps of the checkpoints in `job_dir` that have their COMPLETE marker, ascending
// (empty when there is no such folder).
std::vector<int64_t> CompleteSteps(const std::string& job_dir);

// Removes one checkpoint directory. Deletion mirrors writing: the COMPLETE marker goes
// first (and is synced), so a half-deleted checkpoint is none. A step folder that is a
// link (a job's ranks can make one) loses the link only.
void RemoveCheckpoint(const std::string& step_dir);

}  // namespace nightshift::format

#endif  // NIGHTSHIFT_COMMON_FORMAT_CHECKPOINT_LAYOUT_H_
