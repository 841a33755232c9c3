// Errors of the trainer that say what a restart would do.
#ifndef NIGHTSHIFT_WORKER_TRAINER_ERRORS_H_
#define NIGHTSHIFT_WORKER_TRAINER_ERRORS_H_

#include <stdexcept>

namespace nightshift::trainer {

// An error that every restart of the job would meet again, the same way: a checkpoint of
// another run configuration or of an unknown version, ranks that disagree on the data, a
// world size that does not match, an init_from folder of other sizes, a bad config. The
// trainer exits with kExitPermanent (train.h) and its `error` event has "permanent": 1,
// so the worker reports a user error and the coordinator fails the job at once instead
// of spending its restarts.
class PermanentError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_ERRORS_H_
