#include "worker/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
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

std::vector<std::string>& Hidden() {
  static std::vector<std::string> paths;  // absolute; set before any child starts
  return paths;
}

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

// In the child, between fork and exec: a private view of the mounts in which /dev/null
// covers each Hidden() path, seen by this child only. False if that failed (the child
// must not start then); true at once when nothing is hidden.
bool HideInPrivateMounts() {
  if (Hidden().empty()) return true;
  if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return false;
  for (const std::string& p : Hidden())
    if (::mount("/dev/null", p.c_str(), nullptr, MS_BIND, nullptr) != 0) return false;
  return true;
}

}  // namespace

bool HideFromChildren(const std::string& path) {
  if (::geteuid() != 0) return false;
  std::error_code ec;
  Hidden().push_back(fs::absolute(path, ec).string());
  return true;
}

StatusOr<ChildProcess> SpawnProcess(const std::vector<std::string>& argv,
                                const std::map<std::string, std::string>& extra_env,
                                const std::string& log_path, const ProcessLimits& limits) {
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
  if (log_fd < 0) {
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return Status::IOError("cannot open log " + log_path + ": " + std::strerror(errno));
  }
  // Everything the child needs is built before fork (no allocation after it).
  std::vector<std::string> env_strings = ChildEnvironment(extra_env);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);
  const pid_t parent = ::getpid();

  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    ::close(log_fd);
    if (out_pipe[0] >= 0) ::close(out_pipe[0]);
    return Status::Internal(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(pipefd[1], 3);  // dup2 clears O_CLOEXEC on the new descriptor
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ApplyLimits(limits);
    if (!HideInPrivateMounts()) {
      const char msg[] = "nightshift-worker: cannot hide the worker's token file from the job; not started\n";
      (void)!::write(2, msg, sizeof(msg) - 1);
      ::_exit(126);
    }
    ::execve(args[0], args.data(), envp.data());
    const char msg[] = "nightshift-worker: exec of the trainer failed\n";
    (void)!::write(2, msg, sizeof(msg) - 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from the parent, so a kill right after fork reaches it
  ::close(pipefd[1]);
  ::close(log_fd);
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
