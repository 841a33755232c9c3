// Test hosts: separate network stacks on this one machine, for tests that need a real
// network between the coordinator, workers and clients. Each host is a network namespace
// with its loopback up and one interface, eth0, cabled to a bridge that lives in a
// namespace of its own (the switch); host i has address 198.18.0.<i+1>/24. Only the
// 198.18.0.0/15 range (RFC 2544, set aside for network tests) is used, and nothing is
// cabled to the machine's own namespace, so no traffic leaves these namespaces.
//
// Names are `nstest-<pid>-<n>-...`: the destructor removes them, and Make first removes
// those of test processes that died without running it (a crash, SIGKILL, abort).
// Needs root and iproute2; Make says why not otherwise, for GTEST_SKIP.
#ifndef NIGHTSHIFT_TESTS_COMMON_TEST_HOSTS_H_
#define NIGHTSHIFT_TESTS_COMMON_TEST_HOSTS_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace nightshift::testing {

class TestHosts {
 public:
  // `n` hosts (1 to 250) on one switch; null with *why_not set when this machine
  // cannot make them (not root, no `ip`, `ip netns add` refused).
  static std::unique_ptr<TestHosts> Make(int n, std::string* why_not);
  // Removes every namespace (and so every link). Stop the processes inside first: a
  // namespace lives on, nameless, while a process is in it.
  ~TestHosts();
  TestHosts(const TestHosts&) = delete;
  TestHosts& operator=(const TestHosts&) = delete;

  int size() const { return static_cast<int>(hosts_.size()); }
  std::string address(int i) const;  // "198.18.0.<i+1>"
  const std::string& netns(int i) const { return hosts_.at(i); }

  // `argv` run inside host i: `ip netns exec NAME argv...`. ip execs the program, so the
  // process that runs this argv is the program (same pid: signals reach it directly).
  std::vector<std::string> InHost(int i, const std::vector<std::string>& argv) const;
  // The same for a shell command line: put this in front of it.
  std::string ShellPrefix(int i) const;
  // Runs `fn` on a thread of this process that has entered host i's network stack
  // (setns), and waits for it: sockets `fn` makes belong to host i (and keep doing so
  // on any thread). Not for gRPC, whose I/O runs on threads of its own.
  Status RunIn(int i, const std::function<void()>& fn) const;

  // Unplugs host i's cable at the switch (its port goes down): what it sends and what is
  // sent to it is dropped, silently, until Heal. Processes and sockets stay as they are.
  Status Cut(int i);
  Status Heal(int i);
  // Adds `delay_ms` and `loss_percent` to everything host i sends: netem on its eth0, or,
  // on a kernel without the netem qdisc, a user-space wire at the switch that does the
  // same per frame (python3 in the switch's namespace, stopped by the destructor). Once
  // per host; Cut and Heal still work on a slowed host.
  Status Slow(int i, int delay_ms, double loss_percent);

  // Removes the namespaces of test processes that are gone. Make calls it.
  static void RemoveStale();

 private:
  TestHosts(std::string ip, std::string prefix);
  Status Build(int n);  // the switch, then each host cabled to it
  Status Ip(const std::string& args) const;  // runs `ip ARGS`; errors carry its output
  Status SlowWire(int i, int delay_ms, double loss_percent);  // Slow without netem

  const std::string ip_;      // path of the ip binary
  const std::string prefix_;  // nstest-<pid>-<n>
  std::string switch_;        // the switch's namespace, once made
  std::vector<std::string> hosts_;  // each host's namespace, in order
  std::vector<pid_t> wires_;        // Slow's user-space wires, killed by the destructor
  std::string wire_script_;         // their program, written once
};

}  // namespace nightshift::testing

#endif  // NIGHTSHIFT_TESTS_COMMON_TEST_HOSTS_H_
