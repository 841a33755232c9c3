// Facts about job states that every layer shares (coordinator, CLI, tests).
#ifndef NIGHTSHIFT_COMMON_JOB_STATE_H_
#define NIGHTSHIFT_COMMON_JOB_STATE_H_

#include "nightshift/v1/jobs.pb.h"

namespace nightshift {

// SUCCEEDED, FAILED and CANCELLED: the job will not change again.
inline bool IsTerminal(v1::JobState s) { return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED; }

}  // namespace nightshift

#endif  // NIGHTSHIFT_COMMON_JOB_STATE_H_
