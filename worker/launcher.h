// Launcher: starts one child (a trainer rank, or data preparation), with its progress pipe on fd 3
// and its stdout/stderr appended to a log file. The child is its own process group
// leader (so a stop reaches everything it started), dies with the worker
// (PR_SET_PDEATHSIG), so a killed worker leaves no orphan ranks, and is confined
// (worker/confinement.h: the token file hidden; a job's process runs as the job's user and
// sees only its own folders of the worker's).
#ifndef NIGHTSHIFT_WORKER_LAUNCHER_H_
#define NIGHTSHIFT_WORKER_LAUNCHER_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/confinement.h"

namespace nightshift {

struct ChildProcess {
  pid_t pid = -1;
  int progress_fd = -1;   // read end of the child's fd 3; owned by the caller
  int output_fd = -1;     // read end of the child's stdout+stderr when log_path was empty
  std::string log_path;
};

// Whether the worker passes its environment variable `name` to the processes it starts.
// A job's processes run the user's code (a TorchScript module, a crafted checkpoint): they
// get what the runtime reads (PATH, locale, temp dir, library path, CUDA_*, NCCL_*,
// GLOO_*, OMP_*, MKL_*, TORCH_*, sanitizer options, NIGHTSHIFT_FAULT_* for tests) and
// nothing else: no NIGHTSHIFT_TOKEN, no cloud credentials, no other secret of the worker's.
bool PassedToChildren(const std::string& name);

// Resource limits of a child, as rlimits (0: none). The data limit (RLIMIT_DATA: its heap
// and other private writable mappings, not the address space a CUDA runtime reserves)
// makes an allocation past it fail inside the child, which then exits naming it.
struct ProcessLimits {
  uint64_t data_bytes = 0;
  uint64_t processes = 0;  // RLIMIT_NPROC: processes of the child's user (root is exempt)
};

// log_path empty: the child's stdout and stderr go to a pipe (output_fd) instead. The
// child's environment: the worker's variables that PassedToChildren, then extra_env.
// The child is confined as ConfineChildren decided (worker/confinement.h): `view` null for
// a process of the worker's own (data preparation), else the job's own folders: the child
// is then a job's process (a rank, an export), run as the job's user.
StatusOr<ChildProcess> SpawnProcess(const std::vector<std::string>& argv,
                                const std::map<std::string, std::string>& extra_env,
                                const std::string& log_path, const ProcessLimits& limits = {},
                                const JobView* view = nullptr);

// The path of binary `name` in the folder this process's binary is in.
std::string BinaryBesideUs(const std::string& name);

// "exited with code 1", "killed by signal 9 (SIGKILL)".
std::string DescribeWaitStatus(int wait_status);

// The last `max_lines` non-empty lines of a file (for error reports).
std::string TailOfFile(const std::string& path, int max_lines);

// Every thread's stack of a (hung) process, for its log: gdb if it can attach (within
// 30 s), else what the kernel shows in /proc/PID/task/*/stack (root only) and wchan.
std::string ThreadStacks(pid_t pid);

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_LAUNCHER_H_
