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

// Slow's wire when the kernel has no netem: run in the switch's namespace between host
// i's port p<i> (out of the bridge) and a tap t<i> on the bridge.
constexpr char kSlowWire[] = R"PY(
# A slow wire: frames that host's port receives (what the host sends) are dropped with
# probability LOSS and passed on DELAY_MS later to a tap on the switch; frames the switch
# sends to the tap go to the host at once. Offloads pass through as virtio-net headers, so
# large (GSO) frames and unfinished checksums travel as the kernel made them.
import fcntl, heapq, os, random, select, socket, struct, sys, time
port, tap, delay_ms, loss = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]) / 100
TUNSETIFF, IFF_TAP, IFF_NO_PI, IFF_VNET_HDR = 0x400454CA, 0x0002, 0x1000, 0x4000
SOL_PACKET, PACKET_VNET_HDR, PACKET_OUTGOING, ETH_P_ALL = 263, 15, 4, 3
t = os.open("/dev/net/tun", os.O_RDWR)
fcntl.ioctl(t, TUNSETIFF, struct.pack("16sH", tap.encode(), IFF_TAP | IFF_NO_PI | IFF_VNET_HDR))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
s.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
s.bind((port, 0))
sys.stdout.write("ready\n")
sys.stdout.flush()
rng = random.Random(1)
due = []  # (time, seq, frame) heap
seq = 0
while True:
    timeout = max(0.0, due[0][0] - time.monotonic()) if due else None
    readable, _, _ = select.select([s, t], [], [], timeout)
    try:  # a cut port (link down: ENETDOWN) drops what it cannot carry, as a cable would
        if s in readable:
            frame, addr = s.recvfrom(70000)
            if addr[2] != PACKET_OUTGOING and rng.random() >= loss:
                seq += 1
                heapq.heappush(due, (time.monotonic() + delay_ms / 1000, seq, frame))
        if t in readable:
            s.send(os.read(t, 70000))
        now = time.monotonic()
        while due and due[0][0] <= now:
            os.write(t, heapq.heappop(due)[2])
    except OSError:
        pass
)PY";

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
  for (const pid_t wire : wires_) {
    ::kill(wire, SIGKILL);
    ::waitpid(wire, nullptr, 0);
  }
  if (!wire_script_.empty()) ::unlink(wire_script_.c_str());
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
  if (out.find("qdisc kind is unknown") == std::string::npos)
    return Status::Unavailable("cannot slow host " + std::to_string(i) + "'s link: " + out);
  return SlowWire(i, delay_ms, loss_percent);
}

// No netem: host i's port leaves the bridge, and a user-space wire (kSlowWire) carries its
// frames to a tap on the bridge, delaying and dropping what host i sends as netem would
// (per frame; a large offloaded frame is one frame, as it is for netem).
Status TestHosts::SlowWire(int i, int delay_ms, double loss_percent) {
  const std::string port = "p" + std::to_string(i), tap = "t" + std::to_string(i);
  if (wire_script_.empty()) {
    wire_script_ = (fs::temp_directory_path() / (prefix_ + "-slow-wire.py")).string();
    FILE* f = std::fopen(wire_script_.c_str(), "w");
    if (f == nullptr) return Status::Unavailable("cannot write " + wire_script_ + ": " + std::strerror(errno));
    std::fputs(kSlowWire, f);
    std::fclose(f);
  }
  NS_RETURN_IF_ERROR(Ip("-n " + switch_ + " link set " + port + " nomaster"));
  NS_RETURN_IF_ERROR(Ip("-n " + switch_ + " tuntap add dev " + tap + " mode tap vnet_hdr"));
  NS_RETURN_IF_ERROR(Ip("-n " + switch_ + " link set " + tap + " master br0 up"));
  int ready[2];
  if (::pipe(ready) != 0) return Status::Unavailable(std::string("pipe: ") + std::strerror(errno));
  const std::vector<std::string> argv = {ip_, "netns", "exec", switch_, "python3", wire_script_, port, tap,
                                         std::to_string(delay_ms), std::to_string(loss_percent)};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(ready[1], STDOUT_FILENO);
    ::close(ready[0]);
    ::close(ready[1]);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(ip_.c_str(), args.data());
    ::_exit(127);
  }
  ::close(ready[1]);
  if (pid < 0) {
    ::close(ready[0]);
    return Status::Unavailable(std::string("fork: ") + std::strerror(errno));
  }
  wires_.push_back(pid);
  char buf[16] = {0};
  const ssize_t n = ::read(ready[0], buf, sizeof(buf) - 1);  // "ready\n" once it listens on both
  ::close(ready[0]);
  if (n <= 0 || std::string(buf).rfind("ready", 0) != 0)
    return Status::Unavailable("the slow wire for host " + std::to_string(i) + " did not start (python3?)");
  return Status::OK();
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
