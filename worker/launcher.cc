#include "worker/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>

extern char** environ;

namespace fs = std::filesystem;

namespace nightshift {

bool PassedToChildren(const std::string& name) {
  static const char* const kExact[] = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR",
                                       "LD_LIBRARY_PATH", "MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_"};
  static const char* const kPrefixes[] = {"LC_",     "CUDA_",   "NCCL_",   "GLOO_",  "OMP_",  "MKL_",
                                          "KMP_",    "TORCH_",  "PYTORCH_", "CUBLAS_", "CUDNN_", "NVIDIA_",
                                          "ASAN_",   "UBSAN_",  "LSAN_",    "TSAN_",   "NIGHTSHIFT_FAULT_"};
  for (const char* e : kExact)
    if (name == e) return true;
  for (const char* p : kPrefixes)
    if (name.compare(0, std::strlen(p), p) == 0) return true;
  return false;
}

namespace {

// "K=V" for each variable of ours that PassedToChildren, then extra_env over them, and
// the progress pipe's fd.
std::vector<std::string> ChildEnvironment(const std::map<std::string, std::string>& extra_env) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos && PassedToChildren(kv.substr(0, eq))) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : extra_env) env[k] = v;
  env["NIGHTSHIFT_PROGRESS_FD"] = "3";
  std::vector<std::string> strings;
  for (const auto& [k, v] : env) strings.push_back(k + "=" + v);
  return strings;
}

// In the child, between fork and exec (system calls only, no allocation): its rlimits.
void ApplyLimits(const ProcessLimits& limits) {
  if (limits.data_bytes > 0) {
    const struct rlimit data = {limits.data_bytes, limits.data_bytes};
    ::setrlimit(RLIMIT_DATA, &data);
  }
  if (limits.processes > 0) {
    const struct rlimit procs = {limits.processes, limits.processes};
    ::setrlimit(RLIMIT_NPROC, &procs);
  }
}

// Everything the child needs, made before fork (the child of a threaded process must
// not allocate): its argv and environment as C arrays, its confinement, and its binary
// opened (a job's user may not reach the folder the worker runs it from).
struct ChildPlan {
  std::vector<std::string> argv_strings, env_strings;
  std::vector<char*> args, envp;
  ChildSetup setup;
  int exe = -1;  // O_PATH of argv[0], for a job's process
};

// The plan's C arrays point into its own strings: it is filled in place.
Status PlanChild(const std::vector<std::string>& argv, const std::map<std::string, std::string>& extra_env,
                 const JobView* view, ChildPlan* plan) {
  auto setup = ChildSetup::Prepare(view);
  if (!setup.ok()) return setup.status();
  plan->setup = std::move(setup.value());
  std::map<std::string, std::string> env = plan->setup.env();
  for (const auto& [k, v] : extra_env) env[k] = v;
  plan->env_strings = ChildEnvironment(env);
  for (auto& e : plan->env_strings) plan->envp.push_back(e.data());
  plan->envp.push_back(nullptr);
  plan->argv_strings = argv;
  for (auto& a : plan->argv_strings) plan->args.push_back(a.data());
  plan->args.push_back(nullptr);
  if (view != nullptr && !argv.empty()) plan->exe = ::open(argv[0].c_str(), O_PATH | O_CLOEXEC);
  return Status::OK();
}

void Say(const char* text) { (void)!::write(2, text, std::strlen(text)); }

// errno's name ("EACCES"): a static string, no allocation.
const char* ErrnoName() {
  const char* name = ::strerrorname_np(errno);
  return name != nullptr ? name : "an unknown error";
}

// The child, between fork and exec: system calls only, no allocation.
[[noreturn]] void RunChild(ChildPlan& plan, pid_t parent, int progress_fd, int log_fd, const ProcessLimits& limits) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);
  ::dup2(progress_fd, 3);  // dup2 clears O_CLOEXEC on the new descriptor
  ::dup2(log_fd, 1);
  ::dup2(log_fd, 2);
  int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0) ::dup2(devnull, 0);
  ApplyLimits(limits);
  if (const char* failed = plan.setup.Enter()) {
    Say("nightshift-worker: cannot confine the job's process (");
    Say(failed);
    Say(": ");
    Say(ErrnoName());
    Say("); not started\n");
    ::_exit(126);
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a change of user cleared it
  if (::getppid() != parent) ::_exit(127);
  ::execve(plan.args[0], plan.args.data(), plan.envp.data());
  if (errno == EACCES && plan.exe >= 0)  // the job's user cannot reach the binary's folder: run the one we opened
    ::syscall(SYS_execveat, plan.exe, "", plan.args.data(), plan.envp.data(), AT_EMPTY_PATH);
  Say("nightshift-worker: exec of ");
  Say(plan.args[0]);
  Say(" failed: ");
  Say(ErrnoName());
  Say("\n");
  ::_exit(127);
}

}  // namespace

StatusOr<ChildProcess> SpawnProcess(const std::vector<std::string>& argv,
                                const std::map<std::string, std::string>& extra_env,
                                const std::string& log_path, const ProcessLimits& limits, const JobView* view) {
  ChildPlan plan;
  NS_RETURN_IF_ERROR(PlanChild(argv, extra_env, view, &plan));
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return Status::Internal(std::string("pipe: ") + std::strerror(errno));
  int out_pipe[2] = {-1, -1};
  int log_fd;
  if (log_path.empty()) {
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) log_fd = -1;
    else log_fd = out_pipe[1];
  } else {
    log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
  const auto close_exe = [&] {
    if (plan.exe >= 0) ::close(plan.exe);
  };
  if (log_fd < 0) {
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    close_exe();
    return Status::IOError("cannot open log " + log_path + ": " + std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) RunChild(plan, parent, pipefd[1], log_fd, limits);
  close_exe();
  ::close(pipefd[1]);
  ::close(log_fd);
  if (pid < 0) {
    ::close(pipefd[0]);
    if (out_pipe[0] >= 0) ::close(out_pipe[0]);
    return Status::Internal(std::string("fork: ") + std::strerror(errno));
  }
  ::setpgid(pid, pid);  // also from the parent, so a kill right after fork reaches it
  ChildProcess p;
  p.pid = pid;
  p.progress_fd = pipefd[0];
  p.output_fd = out_pipe[0];
  p.log_path = log_path;
  return p;
}

std::string BinaryBesideUs(const std::string& name) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / name).string();
}

std::string DescribeWaitStatus(int ws) {
  if (WIFEXITED(ws)) return "exited with code " + std::to_string(WEXITSTATUS(ws));
  if (WIFSIGNALED(ws)) {
    int sig = WTERMSIG(ws);
    const char* name = sigabbrev_np(sig);
    return "killed by signal " + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "ended with status " + std::to_string(ws);
}

std::string TailOfFile(const std::string& path, int max_lines) {
  std::ifstream in(path);
  std::deque<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    lines.push_back(line);
    if (static_cast<int>(lines.size()) > max_lines) lines.pop_front();
  }
  std::string out;
  for (const auto& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

std::string ThreadStacks(pid_t pid) {
  const std::string p = std::to_string(pid);
  std::string out = "\n==== nightshift: rank hung; thread stacks of pid " + p + " ====\n";
  std::string gdb;
  if (FILE* f = ::popen(("timeout 30 gdb -p " + p + " -batch -ex 'thread apply all bt' 2>&1").c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) gdb.append(buf, n);
    ::pclose(f);
  }
  if (gdb.find("Thread ") != std::string::npos) return out + gdb + "==== end of stacks ====\n";
  out += "(gdb could not attach; kernel stacks follow)\n" + gdb;
  std::error_code ec;
  for (const auto& t : fs::directory_iterator("/proc/" + p + "/task", ec)) {
    std::ifstream comm(t.path() / "comm"), wchan(t.path() / "wchan"), stack(t.path() / "stack");
    std::string name, wait;
    std::getline(comm, name);
    std::getline(wchan, wait);
    out += "thread " + t.path().filename().string() + " (" + name + ") in " + wait + "\n";
    out += std::string(std::istreambuf_iterator<char>(stack), std::istreambuf_iterator<char>());
  }
  return out + "==== end of stacks ====\n";
}

}  // namespace nightshift
