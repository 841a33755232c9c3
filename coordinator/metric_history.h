// A job's metric history (v1::JobMetrics): per attempt, every evaluation and the training
// curve downsampled to at most kMaxTrainPoints points, built from the progress that rank 0's
// worker reports. Pure: the coordinator stores the result (JobStore::PutMetrics).
#ifndef NIGHTSHIFT_COORDINATOR_METRIC_HISTORY_H_
#define NIGHTSHIFT_COORDINATOR_METRIC_HISTORY_H_

#include <cstdint>

#include <google/protobuf/repeated_field.h>

#include "nightshift/v1/jobs.pb.h"

namespace nightshift {

inline constexpr int kMaxTrainPoints = 256;  // per attempt
inline constexpr int kMaxEvalPoints = 1000;  // per attempt; later ones are dropped

// The attempt's entry of `m`, added (in attempt order, stride 1) when missing.
v1::AttemptMetrics* AttemptOf(int attempt, v1::JobMetrics* m);

// Keeps `p` (rank 0's progress of `attempt`) as a training point when its step is at
// least `stride` past the last kept one; when the curve then has more than
// kMaxTrainPoints points, every second one is dropped and the stride doubles, so the
// curve always spans the whole run. Whether `m` changed.
// `time_ms`: now, in Unix milliseconds (the point's time_ms).
bool AddTrainPoint(int attempt, const v1::Progress& p, int64_t time_ms, v1::JobMetrics* m);

// Adds the evaluations of `attempt` past the last one kept (a worker reports all of
// them every time), stamped with `time_ms`. Whether `m` changed.
bool AddEvals(int attempt, const google::protobuf::RepeatedPtrField<v1::EvalPoint>& evals, int64_t time_ms,
              v1::JobMetrics* m);

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_METRIC_HISTORY_H_
