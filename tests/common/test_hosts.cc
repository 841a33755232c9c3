#include "tests/common/test_hosts.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

namespace nightshift::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kPrefix[] = "nstest-";
constexpr char kNetnsDir[] = "/var/run/netns";

// Runs a shell command line; its exit code, with stdout and stderr in *out.
int Shell(const std::string& cmd, std::string* out) {
  out->clear();
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[1024];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string FindIp() {
  for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (::access(path, X_OK) == 0) return path;
  return "";
}

// The pid in a name made by Make ("nstest-<pid>-..."), or 0.
pid_t PidOf(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return 0;
  return static_cast<pid_t>(std::atol(name.c_str() + sizeof(kPrefix) - 1));
}

}  // namespace

std::unique_ptr<TestHosts> TestHosts::Make(int n, std::string* why_not) {
  if (::geteuid() != 0) {
    *why_not = "test hosts need root (network namespaces); CI runs the tests as root";
    return nullptr;
  }
  const std::string ip = FindIp();
  if (ip.empty()) {
    *why_not = "test hosts need iproute2 (`ip`), which is not installed";
    return nullptr;
  }
  if (n < 1 || n > 250) {
    *why_not = "test hosts: between 1 and 250 hosts, not " + std::to_string(n);
    return nullptr;
  }
  RemoveStale();
  static std::atomic<int> made{0};
  const std::string prefix = kPrefix + std::to_string(::getpid()) + "-" + std::to_string(made++);
  std::unique_ptr<TestHosts> hosts(new TestHosts(ip, prefix));
  Status built = hosts->Build(n);
  if (!built.ok()) {
    *why_not = "cannot make test hosts: " + built.message();
    return nullptr;  // the destructor removed what was made
  }
  return hosts;
}

TestHosts::TestHosts(std::string ip, std::string prefix) : ip_(std::move(ip)), prefix_(std::move(prefix)) {}

TestHosts::~TestHosts() {
  for (const auto& h : hosts_) (void)Ip("netns del " + h);
  if (!switch_.empty()) (void)Ip("netns del " + switch_);
}

Status TestHosts::Ip(const std::string& args) const {
  std::string out;
  if (Shell(ip_ + " " + args, &out) != 0) return Status::Unavailable("`ip " + args + "` failed: " + out);
  return Status::OK();
}

Status TestHosts::Build(int n) {
  const std::string sw = prefix_ + "-sw";
  NS_RETURN_IF_ERROR(Ip("netns add " + sw));
  switch_ = sw;
  NS_RETURN_IF_ERROR(Ip("-n " + sw + " link add br0 type bridge"));
  NS_RETURN_IF_ERROR(Ip("-n " + sw + " link set br0 up"));
  for (int i = 0; i < n; ++i) {
    const std::string h = prefix_ + "-h" + std::to_string(i);
    const std::string port = "p" + std::to_string(i);  // host i's port on the switch
    NS_RETURN_IF_ERROR(Ip("netns add " + h));
    hosts_.push_back(h);
    NS_RETURN_IF_ERROR(Ip("-n " + h + " link set lo up"));
    NS_RETURN_IF_ERROR(Ip("link add eth0 netns " + h + " type veth peer name " + port + " netns " + sw));
    NS_RETURN_IF_ERROR(Ip("-n " + sw + " link set " + port + " master br0 up"));
    NS_RETURN_IF_ERROR(Ip("-n " + h + " addr add " + address(i) + "/24 dev eth0"));
    NS_RETURN_IF_ERROR(Ip("-n " + h + " link set eth0 up"));
  }
  return Status::OK();
}

std::string TestHosts::address(int i) const { return "198.18.0." + std::to_string(i + 1); }

std::vector<std::string> TestHosts::InHost(int i, const std::vector<std::string>& argv) const {
  std::vector<std::string> wrapped = {ip_, "netns", "exec", netns(i)};
  wrapped.insert(wrapped.end(), argv.begin(), argv.end());
  return wrapped;
}

std::string TestHosts::ShellPrefix(int i) const { return ip_ + " netns exec " + netns(i) + " "; }

Status TestHosts::RunIn(int i, const std::function<void()>& fn) const {
  const std::string path = std::string(kNetnsDir) + "/" + netns(i);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Unavailable("cannot open " + path + ": " + std::strerror(errno));
  Status entered;
  std::thread t([&] {
    if (::setns(fd, CLONE_NEWNET) != 0) {
      entered = Status::Unavailable("setns into " + path + ": " + std::strerror(errno));
      return;
    }
    fn();
  });
  t.join();
  ::close(fd);
  return entered;
}

Status TestHosts::Cut(int i) { return Ip("-n " + switch_ + " link set p" + std::to_string(i) + " down"); }
Status TestHosts::Heal(int i) { return Ip("-n " + switch_ + " link set p" + std::to_string(i) + " up"); }

Status TestHosts::Slow(int i, int delay_ms, double loss_percent) {
  std::string out;
  const std::string cmd = ShellPrefix(i) + "tc qdisc replace dev eth0 root netem delay " + std::to_string(delay_ms) +
                          "ms loss " + std::to_string(loss_percent) + "%";
  if (Shell(cmd, &out) == 0) return Status::OK();
  if (out.find("qdisc kind is unknown") != std::string::npos)
    return Status::Unavailable("this kernel has no netem qdisc (sch_netem), so links cannot be slowed: " + out);
  return Status::Unavailable("cannot slow host " + std::to_string(i) + "'s link: " + out);
}

void TestHosts::RemoveStale() {
  const std::string ip = FindIp();
  std::error_code ec;
  if (ip.empty() || !fs::is_directory(kNetnsDir, ec)) return;
  std::vector<std::string> stale;
  for (const auto& e : fs::directory_iterator(kNetnsDir, ec)) {
    const std::string name = e.path().filename().string();
    const pid_t pid = PidOf(name);
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) stale.push_back(name);
  }
  std::string out;
  for (const auto& name : stale) Shell(ip + " netns del " + name, &out);
}

}  // namespace nightshift::testing
