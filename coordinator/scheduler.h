// Scheduler: pure placement decisions over in-memory state. No I/O, no clock, no locks:
// the coordinator hands it a snapshot and applies what it returns.
//
// Policy: jobs in order of (priority desc, submit order asc). All of a job's ranks are
// placed at once or none are (gang). A job that fits on one worker goes to the worker
// with the fewest free slots that fits (best fit, keeps big holes for big jobs);
// otherwise onto the workers with the most free slots first, so it spans as few workers
// as possible. A job that needs more slots than the whole cluster has is skipped with a
// reason and does not hold up the queue; a job that could fit but not now holds up the
// jobs behind it (strict order, so large jobs are not starved).
#ifndef NIGHTSHIFT_COORDINATOR_SCHEDULER_H_
#define NIGHTSHIFT_COORDINATOR_SCHEDULER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nightshift {

struct SchedWorker {
  std::string name;
  int total_slots = 0;
  int free_slots = 0;
};

struct SchedJob {
  std::string id;
  int world_size = 1;
  int priority = 0;
  uint64_t submit_seq = 0;
};

struct SchedPart {
  std::string worker;
  int first_rank = 0;
  int num_ranks = 0;
};

struct ScheduleResult {
  std::map<std::string, std::vector<SchedPart>> placed;  // job id -> parts, rank order
  std::map<std::string, std::string> waiting;            // job id -> why it waits
};

ScheduleResult Schedule(std::vector<SchedJob> jobs, std::vector<SchedWorker> workers);

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_SCHEDULER_H_
