// The test hosts themselves: two hosts reach each other over TCP, a cut link stops
// that until it is healed, and nothing is left behind.
#include "tests/common/test_hosts.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

namespace nightshift::testing {
namespace {

// Runs a shell command line; its stdout.
std::string Output(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[1024];
  size_t n;
  while (p != nullptr && (n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  if (p != nullptr) ::pclose(p);
  return out;
}

sockaddr_in Addr(const std::string& ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

// A TCP socket listening on ip:<a free port>, made inside host `h`; its port in *port.
int Listen(const TestHosts& hosts, int h, int* port) {
  int fd = -1;
  EXPECT_TRUE(hosts.RunIn(h, [&] {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = Addr(hosts.address(h), 0);
    socklen_t len = sizeof(a);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd, 16) != 0) return;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    *port = ntohs(a.sin_port);
  }).ok());
  return fd;
}

// Whether a TCP connect from host `from` to ip:port completes within `timeout_ms`.
bool Connects(const TestHosts& hosts, int from, const std::string& ip, int port, int timeout_ms) {
  bool connected = false;
  EXPECT_TRUE(hosts.RunIn(from, [&] {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_in a = Addr(ip, port);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno != EINPROGRESS) {
      ::close(fd);
      return;
    }
    pollfd p{fd, POLLOUT, 0};
    int err = -1;
    socklen_t len = sizeof(err);
    if (::poll(&p, 1, timeout_ms) == 1) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    connected = err == 0;
    ::close(fd);
  }).ok());
  return connected;
}

class TestHostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    hosts_ = TestHosts::Make(2, &why);
    if (hosts_ == nullptr) GTEST_SKIP() << why;
  }
  std::unique_ptr<TestHosts> hosts_;
};

TEST_F(TestHostsTest, TwoHostsReachEachOtherByTcpAndNothingElse) {
  EXPECT_EQ(hosts_->address(0), "198.18.0.1");
  EXPECT_EQ(hosts_->address(1), "198.18.0.2");
  int port = 0;
  const int server = Listen(*hosts_, 1, &port);
  ASSERT_GT(port, 0);
  EXPECT_TRUE(Connects(*hosts_, 0, hosts_->address(1), port, 5000));
  // Each host's loopback is its own: host 0 has no listener on its 127.0.0.1.
  EXPECT_FALSE(Connects(*hosts_, 0, "127.0.0.1", port, 1000));
  ::close(server);
  // The only way out of a host is the switch: routes for 198.18.0.0/24 alone.
  for (int h = 0; h < 2; ++h)
    EXPECT_EQ(Output(hosts_->ShellPrefix(h) + "ip -4 route"),
              "198.18.0.0/24 dev eth0 proto kernel scope link src " + hosts_->address(h) + " \n");
}

TEST_F(TestHostsTest, ACutLinkStopsConnectsUntilHealed) {
  int port = 0;
  const int server = Listen(*hosts_, 1, &port);
  ASSERT_GT(port, 0);
  ASSERT_TRUE(hosts_->Cut(1).ok());
  EXPECT_FALSE(Connects(*hosts_, 0, hosts_->address(1), port, 1500));
  ASSERT_TRUE(hosts_->Heal(1).ok());
  EXPECT_TRUE(Connects(*hosts_, 0, hosts_->address(1), port, 10000));
  ::close(server);
}

// 200 ms and 5% loss on what host 0 sends (netem, or the user-space wire on a kernel
// without it): a handshake takes at least the delay, 300 KB still arrive whole, and a
// slowed host can still be cut and healed.
TEST_F(TestHostsTest, ASlowLinkDelaysAndDropsButTcpStillDeliversEverything) {
  Status slowed = hosts_->Slow(0, 200, 5);
  ASSERT_TRUE(slowed.ok()) << slowed.ToString();
  int port = 0;
  const int server = Listen(*hosts_, 1, &port);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(Connects(*hosts_, 0, hosts_->address(1), port, 10000));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));  // the delay's floor

  std::string sent(300'000, '\0');
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>(i * 7919 % 253);
  std::string received;
  timeval limit{30, 0};  // a broken link fails the test instead of hanging it in accept
  ::setsockopt(server, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  std::thread reader([&] {
    const int conn = ::accept(server, nullptr, nullptr);  // the handshake above was accepted first
    if (conn >= 0) ::close(conn);
    const int c = ::accept(server, nullptr, nullptr);
    char buf[65536];
    for (ssize_t n; c >= 0 && (n = ::read(c, buf, sizeof(buf))) > 0;) received.append(buf, static_cast<size_t>(n));
    if (c >= 0) ::close(c);
  });
  ASSERT_TRUE(hosts_->RunIn(0, [&] {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = Addr(hosts_->address(1), port);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0)
      for (size_t at = 0; at < sent.size();) {
        const ssize_t n = ::write(fd, sent.data() + at, sent.size() - at);
        if (n <= 0) break;
        at += static_cast<size_t>(n);
      }
    ::close(fd);
  }).ok());
  reader.join();
  EXPECT_TRUE(received == sent) << received.size() << " of " << sent.size() << " bytes, or other bytes";

  ASSERT_TRUE(hosts_->Cut(0).ok());
  EXPECT_FALSE(Connects(*hosts_, 0, hosts_->address(1), port, 1500));
  ASSERT_TRUE(hosts_->Heal(0).ok());
  EXPECT_TRUE(Connects(*hosts_, 0, hosts_->address(1), port, 10000));
  ::close(server);
}

TEST_F(TestHostsTest, NothingIsLeftAfterwardsAndStaleHostsAreRemoved) {
  const std::string name = hosts_->netns(0);
  ASSERT_NE(Output("ip netns list").find(name), std::string::npos);
  hosts_.reset();
  const std::string prefix = name.substr(0, name.rfind("-h"));
  EXPECT_EQ(Output("ip netns list").find(prefix + "-"), std::string::npos) << Output("ip netns list");

  // A namespace named for a test process that is gone (it died before its destructor).
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string stale = "nstest-" + std::to_string(dead) + "-0-sw";
  ASSERT_EQ(std::system(("ip netns add " + stale).c_str()), 0);
  TestHosts::RemoveStale();
  EXPECT_EQ(Output("ip netns list").find(stale), std::string::npos) << Output("ip netns list");
}

}  // namespace
}  // namespace nightshift::testing
