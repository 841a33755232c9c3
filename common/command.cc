#include "common/command.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace nightshift {
namespace {

constexpr size_t kMaxOutput = size_t{16} << 20;

std::string Joined(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

void CloseBoth(int fds[2]) {
  for (int i = 0; i < 2; ++i)
    if (fds[i] >= 0) ::close(fds[i]);
}

// This process's environment with `env` put over it, as NAME=value.
std::vector<std::string> ChildEnvironment(const std::map<std::string, std::string>& env) {
  std::vector<std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var = *e;
    if (!env.count(var.substr(0, var.find('=')))) vars.push_back(var);
  }
  for (const auto& [k, v] : env) vars.push_back(k + "=" + v);
  return vars;
}

// `name` looked up in the PATH of `vars` (execvpe would search this process's).
std::string InChildPath(const std::string& name, const std::vector<std::string>& vars) {
  if (name.find('/') != std::string::npos) return name;
  std::string path = "/usr/bin:/bin";
  for (const std::string& v : vars)
    if (v.rfind("PATH=", 0) == 0) path = v.substr(5);
  for (size_t at = 0; at <= path.size();) {
    const size_t end = std::min(path.find(':', at), path.size());
    const std::string candidate = (end > at ? path.substr(at, end - at) : ".") + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    at = end + 1;
  }
  return name;  // exec fails: exit code 127
}

// Feeds `input` to the child's stdin and drains its stdout and stderr together (a large
// output never blocks the child while we write, nor a large input while it writes),
// until both outputs end or the time is up (true). Closes the three descriptors. Each
// output keeps its first kMaxOutput bytes; *cut says stdout had more.
// Writes never block, and a child that exits without reading all of its input is EPIPE,
// not a SIGPIPE that kills this process: SIGPIPE is blocked on this thread meanwhile,
// and a pending one taken back.
bool Exchange(int to_child, int out, int err, const std::string& input, double timeout_seconds,
              CommandResult* result, bool* cut) {
  ::fcntl(to_child, F_SETFL, ::fcntl(to_child, F_GETFL) | O_NONBLOCK);
  sigset_t pipe_signal, old_mask;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_signal, &old_mask);
  size_t written = 0;
  if (input.empty()) ::close(to_child), to_child = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  bool timed_out = false;
  for (int open = 2; open > 0 || to_child >= 0;) {
    pollfd fds[3];
    int n = 0;
    if (out >= 0) fds[n++] = {out, POLLIN, 0};
    if (err >= 0) fds[n++] = {err, POLLIN, 0};
    if (to_child >= 0) fds[n++] = {to_child, POLLOUT, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    if (::poll(fds, n, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == to_child) {
        const ssize_t w = ::write(to_child, input.data() + written, input.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if (w < 0 && errno == EPIPE) {
          const timespec now = {0, 0};
          ::sigtimedwait(&pipe_signal, nullptr, &now);
        }
        if ((w < 0 && errno != EAGAIN && errno != EINTR) || written == input.size()) ::close(to_child), to_child = -1;
        continue;
      }
      char buf[65536];
      const ssize_t r = ::read(fds[i].fd, buf, sizeof(buf));
      std::string& into = fds[i].fd == out ? result->out : result->err;
      if (r > 0) {
        const size_t room = kMaxOutput - into.size();  // into never grows past kMaxOutput
        into.append(buf, std::min(room, static_cast<size_t>(r)));
        if (static_cast<size_t>(r) > room && &into == &result->out) *cut = true;
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      (fds[i].fd == out ? out : err) = -1;
      ::close(fds[i].fd);
      --open;
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  for (int fd : {to_child, out, err})
    if (fd >= 0) ::close(fd);
  return timed_out;
}

}  // namespace

StatusOr<CommandResult> SubprocessRunner::Run(const std::vector<std::string>& argv, const std::string& input,
                                              const std::map<std::string, std::string>& env, double timeout_seconds) {
  if (argv.empty()) return Status::InvalidArgument("command: no program");
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    const std::string why = std::strerror(errno);
    CloseBoth(in), CloseBoth(out), CloseBoth(err);
    return Status::Internal("command " + argv[0] + ": pipe: " + why);
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // Made here: after fork only async-signal-safe calls are safe (another thread may have
  // held the allocator's lock at the fork).
  std::vector<std::string> vars = ChildEnvironment(env);
  std::vector<char*> envp;
  for (std::string& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  const std::string program = InChildPath(argv[0], vars);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const std::string why = std::strerror(errno);
    CloseBoth(in), CloseBoth(out), CloseBoth(err);
    return Status::Internal("command " + argv[0] + ": fork: " + why);
  }
  if (pid == 0) {  // the child: async-signal-safe calls only, until exec
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execve(program.c_str(), args.data(), envp.data());
    ::_exit(127);
  }
  ::close(in[0]), ::close(out[1]), ::close(err[1]);
  CommandResult result;
  bool cut = false;
  const bool timed_out = Exchange(in[1], out[0], err[0], input, timeout_seconds, &result, &cut);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    return Status::DeadlineExceeded("command `" + Joined(argv) + "` ran past " + std::to_string(timeout_seconds) +
                                    " s and was killed");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && result.out.empty())
    return Status::NotFound("command `" + argv[0] + "` could not be run (not installed, or not in PATH)");
  if (cut)  // a cut output read as whole would mislead (a JSON list cut short does not parse)
    return Status::ResourceExhausted("command `" + Joined(argv) + "` wrote more than " +
                                     std::to_string(kMaxOutput >> 20) + " MiB to its output: not read");
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace nightshift
