// Checkpoint records: which of a job's checkpoints the coordinator can vouch for, and so
// which workers' claims to hold one count (issue 40). A worker's heartbeat lists the
// newest checkpoint of every job folder on its disk (HeldCheckpoint: job, step, the
// SHA-256 of its manifest.json). A claim alone proves nothing: any worker token can claim
// step 10^9 of a guessed job id, and the placer puts a queued job on its checkpoint's
// holders first. So a claim counts only where it matches a record (Job.committed_
// checkpoints) that the coordinator made itself:
//   - the worker was placed on the job's current attempt and reported writing that step
//     with that manifest (TaskStatus.checkpoint_step and checkpoint_manifest_sha256), or
//   - the coordinator ordered that worker to copy that step from a vouched holder, with
//     that digest (CheckpointCopy), and the worker now claims exactly it: the copier
//     refuses a manifest of any other digest (worker/checkpoint_copy.h), or
//   - the worker wrote an earlier recorded step of the job itself (it ran the job's
//     ranks, so it could write anything into the job's checkpoints anyway) and claims a
//     step newer than every record: its trainer saved it but the worker died, or the
//     attempt ended, before reporting it. Without this, a worker killed a few saves
//     after its last report would hold only unrecorded steps (the trainer prunes) and
//     the job would start over.
// Everything else is ignored by the placer and the copy planner.
//
// Pure functions over the job's record; the caller persists it and holds the
// Coordinator's mutex.
#ifndef NIGHTSHIFT_COORDINATOR_CHECKPOINT_RECORDS_H_
#define NIGHTSHIFT_COORDINATOR_CHECKPOINT_RECORDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "nightshift/v1/cluster.pb.h"
#include "nightshift/v1/jobs.pb.h"

namespace nightshift {

// Steps kept in Job.committed_checkpoints (the trainer keeps a few; older ones are gone).
inline constexpr int kCommittedCheckpointsKept = 8;

// Records that `worker` holds step `step` of `job` with manifest digest `sha256`. Nothing
// when step <= 0 or the digest is empty (an older worker), or when the step is older than
// every kept record and kCommittedCheckpointsKept are kept. Whether the record changed.
// `copied`: the checkpoint is a copy the coordinator ordered there.
bool RecordHolder(v1::Job* job, const std::string& worker, int64_t step, const std::string& sha256,
                  bool copied = false);

// Whether `worker` wrote (not copied) any recorded step of the job.
bool Wrote(const v1::Job& job, const std::string& worker);

// Whether the record says `worker` holds step `step` with digest `sha256`.
bool Vouched(const v1::Job& job, const std::string& worker, int64_t step, const std::string& sha256);

// The newest recorded step (0: none).
int64_t NewestRecordedStep(const v1::Job& job);

// Every recorded (step, digest), each once, for Assignment.verified_checkpoints.
std::vector<v1::HeldCheckpoint> VerifiedCheckpoints(const v1::Job& job);

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_CHECKPOINT_RECORDS_H_
