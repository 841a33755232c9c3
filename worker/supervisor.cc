#include "worker/supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "common/log.h"
#include "worker/launcher.h"

namespace nightshift {
namespace {
bool ExitedZero(int wait_status) { return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0; }
}  // namespace

bool Supervisor::Exit::ok() const { return ExitedZero(wait_status); }

const Supervisor::Exit* Supervisor::Result::failed() const {
  // The others were stopped because of the first failure: it is the cause.
  for (const Exit& e : exits)
    if (!e.ok() && (!first_failure || *first_failure == e.id)) return &e;
  return nullptr;
}

Supervisor::Supervisor(Options options) : options_(std::move(options)) {}

Supervisor::~Supervisor() {
  if (children_.empty()) return;
  SignalAll(SIGKILL);
  Collect();
}

Status Supervisor::Start(const std::vector<Child>& children) {
  for (const Child& c : children) {
    // Output through a pipe, into a RotatingLog.
    auto proc = SpawnProcess(c.argv, c.env, /*log_path=*/"", c.limits, c.view ? &*c.view : nullptr);
    if (!proc.ok()) {
      SignalAll(SIGKILL);
      Collect();
      return proc.status();
    }
    children_.push_back({c.id, proc->pid, proc->progress_fd, proc->output_fd, c.log_path,
                         std::make_unique<RotatingLog>(c.log_path, options_.log_max_bytes, options_.log_keep)});
    std::lock_guard<std::mutex> lock(mu_);
    pids_[c.id] = proc->pid;
  }
  if (stopping_) SignalAll(SIGTERM);
  return Status::OK();
}

Supervisor::Result Supervisor::Wait(const LineFn& on_line) {
  while (true) {
    std::vector<pollfd> fds;
    std::vector<Running*> owners;
    for (Running& c : children_) {
      for (int fd : {c.progress_fd, c.output_fd}) {
        if (fd < 0) continue;
        fds.push_back({fd, POLLIN, 0});
        owners.push_back(&c);
      }
    }
    if (fds.empty()) break;
    const int n = ::poll(fds.data(), fds.size(), /*timeout_ms=*/200);
    EnforceStop();
    ReapExited();
    if (n <= 0) continue;
    for (size_t k = 0; k < fds.size(); ++k)
      if (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) ReadPipe(owners[k], fds[k].fd, on_line);
  }
  return Collect();
}

void Supervisor::Stop(bool dump_stacks) {
  if (dump_stacks) dump_stacks_ = true;
  if (stopping_.exchange(true)) return;
  if (dump_stacks) return;  // hung children would not act on SIGTERM: Wait kills them
  SignalAll(SIGTERM);
  // A stopped child (SIGSTOP, or frozen with its host cut off) acts on the SIGTERM only
  // once it runs again; without this it would wait for the SIGKILL after the grace.
  SignalAll(SIGCONT);
}

void Supervisor::Signal(int id, int sig) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pids_.find(id);
  if (it != pids_.end()) ::kill(it->second, sig);
}

void Supervisor::SignalAll(int sig) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, pid] : pids_) ::kill(-pid, sig);
}

void Supervisor::EnforceStop() {
  const auto now = std::chrono::steady_clock::now();
  if (stopping_ && stop_deadline_ == std::chrono::steady_clock::time_point::max())
    stop_deadline_ = now + std::chrono::milliseconds(static_cast<int64_t>(options_.stop_grace_seconds * 1000));
  if (now > stop_deadline_) SignalAll(SIGKILL);
  if (!dump_stacks_ || stacks_dumped_) return;
  stacks_dumped_ = true;
  for (const Running& c : children_) {
    // Appended (O_APPEND, like the child's own output) to its log.
    if (!c.exited) std::ofstream(c.log_path, std::ios::app) << ThreadStacks(c.pid);
  }
  NS_WARN(options_.name << ": hung; thread stacks written to the logs, killing the processes");
  SignalAll(SIGKILL);
}

void Supervisor::ReapExited() {
  for (Running& c : children_) {
    if (c.exited || ::waitpid(c.pid, &c.wait_status, WNOHANG) != c.pid) continue;
    c.exited = true;
    if (ExitedZero(c.wait_status) || first_failure_ || stopping_) continue;
    first_failure_ = c.id;
    stopping_ = true;  // its peers would wait for it in a collective: stop them now
    SignalAll(SIGTERM);
  }
}

void Supervisor::ReadPipe(Running* c, int fd, const LineFn& on_line) {
  char buf[65536];
  const bool output = fd == c->output_fd;
  const ssize_t got = ::read(fd, buf, sizeof(buf));
  if (got <= 0) {
    ::close(fd);
    (output ? c->output_fd : c->progress_fd) = -1;
    return;
  }
  if (output) return c->log->Write(buf, static_cast<size_t>(got));
  c->partial.append(buf, static_cast<size_t>(got));
  size_t nl;
  while ((nl = c->partial.find('\n')) != std::string::npos) {
    const std::string line = c->partial.substr(0, nl);
    c->partial.erase(0, nl + 1);
    on_line(c->id, line);
  }
}

Supervisor::Result Supervisor::Collect() {
  Result result;
  for (Running& c : children_) {
    for (int fd : {c.progress_fd, c.output_fd})
      if (fd >= 0) ::close(fd);
    if (!c.exited) ::waitpid(c.pid, &c.wait_status, 0);
    result.exits.push_back({c.id, c.wait_status, c.log_path});
  }
  result.first_failure = first_failure_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pids_.clear();
  }
  children_.clear();
  first_failure_.reset();
  stacks_dumped_ = false;
  return result;
}

}  // namespace nightshift
