// Supervisor: owns the processes of one task (its data preparation, then its ranks).
// It starts them, copies their output into their logs, hands their progress lines to
// the caller and stops them together. A child that fails while no stop was asked for
// stops the others: ranks would wait for it in a collective.
//
// Threading: Start and Wait run on the task's thread, one run at a time; Stop, Signal
// and stopping() are safe from any thread.
#ifndef NIGHTSHIFT_WORKER_SUPERVISOR_H_
#define NIGHTSHIFT_WORKER_SUPERVISOR_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/launcher.h"
#include "worker/rotating_log.h"

namespace nightshift {

class Supervisor {
 public:
  struct Options {
    std::string name;                  // names the task in log lines ("job J attempt A")
    double stop_grace_seconds = 10;    // SIGTERM, then SIGKILL after this long
    int64_t log_max_bytes = 64 << 20;  // a child's log rotates past this size
    int log_keep = 3;                  // rotated logs kept
  };
  struct Child {
    int id;                                  // the global rank, for a trainer
    std::vector<std::string> argv;           // argv[0]: the binary's path
    std::map<std::string, std::string> env;  // on top of the worker's environment
    std::string log_path;                    // its stdout and stderr (rotated)
    ProcessLimits limits = {};               // launcher.h
    // A job's process (a rank, an export): its own folders, and it runs as the job's user
    // (worker/confinement.h). None: a process of the worker's own (data preparation).
    std::optional<JobView> view = std::nullopt;
  };
  struct Exit {
    int id;
    int wait_status;  // as waitpid(2) gives it
    std::string log_path;
    bool ok() const;  // exited with code 0
  };
  struct Result {
    std::vector<Exit> exits;         // in the order the children were given
    std::optional<int> first_failure;  // the child that failed while no stop was asked for
    // The exit to blame: the first failure, else the first child that did not exit 0;
    // null when all did.
    const Exit* failed() const;
  };
  // Called with each whole progress line (fd 3 of the child, without the '\n').
  using LineFn = std::function<void(int id, const std::string& line)>;

  explicit Supervisor(Options options);
  ~Supervisor();  // kills (SIGKILL) and reaps children a Wait did not
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts every child, each the leader of its own process group. If one cannot start,
  // kills those started and returns why. After a Stop, the children get SIGTERM at once.
  Status Start(const std::vector<Child>& children);
  // Follows the children until each has exited and closed its pipes, calling `on_line`
  // on this thread; then they are reaped and Start may be called again.
  Result Wait(const LineFn& on_line);

  // Asks the children (also those started later) to stop: SIGTERM now (ranks checkpoint
  // and exit), SIGKILL after the grace. `dump_stacks`: they are hung; write each one's
  // thread stacks to its log, then SIGKILL them. Repeating it does nothing more, except
  // that a later dump_stacks still dumps.
  void Stop(bool dump_stacks = false);
  // True once a stop was asked for, or a child failed (which stops its peers).
  bool stopping() const { return stopping_; }
  // Sends `sig` to child `id` itself, not its group (fault injection: SIGSTOP).
  void Signal(int id, int sig);

 private:
  struct Running {
    int id;
    pid_t pid;
    int progress_fd, output_fd;  // owned; -1 once closed
    std::string log_path;
    std::unique_ptr<RotatingLog> log;
    std::string partial;  // progress bytes after the last '\n'
    int wait_status = 0;
    bool exited = false;
  };
  void SignalAll(int sig);  // to every child's process group
  void EnforceStop();       // the grace's SIGKILL, stack dumps
  void ReapExited();        // a child that died without closing its pipes, too
  void ReadPipe(Running* child, int fd, const LineFn& on_line);
  Result Collect();         // reaps everything, ends the run

  const Options options_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> dump_stacks_{false};

  // The task's thread only.
  std::vector<Running> children_;
  std::optional<int> first_failure_;
  bool stacks_dumped_ = false;
  std::chrono::steady_clock::time_point stop_deadline_ = std::chrono::steady_clock::time_point::max();

  std::mutex mu_;
  std::map<int, pid_t> pids_;  // GUARDED_BY(mu_): children of the current run, by id
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_SUPERVISOR_H_
