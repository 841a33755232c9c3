// SweepRunner: runs every sweep's trials (issue 45; the file format: sweep_spec.h; users:
// docs/sweeps.md). A pass, on its own thread every --sweep-poll-seconds (0.5 s), reads each
// RUNNING sweep and through the coordinator's calls:
//
// - judges every new evaluation of the sweep's metric of each running trial: method asha
//   with the rules of coordinator/asha.h, at rungs of min_steps x eta^(s+k) steps (or
//   min_epochs x eta^(s+k) epochs); a trial whose job has trained its last step completes
//   whatever its rung says; any other trial not in its rung's top 1/eta is paused
//   (Coordinator::Hold: its ranks checkpoint and stop, its slots free at once), and an
//   event on the sweep (and the job) gives the rung, the value and the cut-off;
// - promotes a paused trial that the values recorded since put within its rung's top
//   1/eta (Release: it resumes from its checkpoint, no step recomputed), before making
//   new ones;
// - makes new trials (ordinary jobs of the sweep's owner, SubmitTrial with request id
//   <sweep>-t<index>, so one made again after a crash is the same job) while fewer than
//   `parallelism` run and the budget allows;
// - ends the sweep SUCCEEDED once the budget is spent and nothing runs or can be promoted:
//   trials still paused are STOPPED (their jobs CANCELLED, checkpoints kept), and the best
//   trial is the one with the best final metric. A sweep that FAILED (a trial it could not
//   make: its spec invalid, its request id taken) stops its paused trials the same way in
//   the pass that fails it: no pass comes after, and a held job would stay QUEUED for ever.
//
// Everything it decides is in the sweep's record (trials, rung values, the step judged up
// to), written synced at the end of the pass, so a coordinator killed mid-sweep goes on
// where the record was. A pass that did not get written (an error in it, a crash) may have
// held or released jobs already: the next pass makes each job agree with the record again
// (released if the record says the trial runs, held if it says paused) and judges again,
// possibly differently (more values may have come); a trial it made is found again by its
// request id; a trial whose job the sweep cancelled to stop it is STOPPED. One sweep's
// error does not stop the others' passes.
#ifndef NIGHTSHIFT_COORDINATOR_SWEEPS_H_
#define NIGHTSHIFT_COORDINATOR_SWEEPS_H_

#include "common/status.h"
#include "coordinator/coordinator.h"

namespace nightshift {

class SweepRunner {
 public:
  explicit SweepRunner(Coordinator* coordinator) : coordinator_(coordinator) {}  // not owned

  // One step of every RUNNING sweep; the first error (the sweeps after it wait).
  Status Pass();

 private:
  struct SweepPass;  // one pass over one sweep (sweeps.cc)
  Status Step(v1::Sweep sweep);

  Coordinator* const coordinator_;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_SWEEPS_H_
