// What an assignment (a worker's part of one attempt of a job) resolves to on this
// worker: the options of its data preparation, the trainer's config file and each
// rank's environment. Pure functions: no I/O, no clock.
#ifndef NIGHTSHIFT_WORKER_ASSIGNMENT_H_
#define NIGHTSHIFT_WORKER_ASSIGNMENT_H_

#include <map>
#include <string>
#include <vector>

#include "nightshift/v1/cluster.pb.h"
#include "worker/input_files.h"

namespace nightshift {

// The spec's data preparation. `roots`: the worker's --data-root folders (resolved).
PrepOptions PrepOptionsFor(const v1::JobSpec& spec, const std::vector<std::string>& roots);

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_ASSIGNMENT_H_
