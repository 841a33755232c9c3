// Submits that survive a lost reply, on real (namespaced) hosts: 8 clients in one host
// run `nightshift job submit` 25 times each against a coordinator in another, while the
// coordinator drops the reply of a fifth of the submits it stored (the test-only fault),
// its host's link is cut and healed, and it is SIGKILLed and restarted on the same store
// and address. Every submit must end accepted, and the store must then hold each of the
// 200 exactly once, under the id the CLI printed. Jobs stay QUEUED: there are no workers.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "common/job_store.h"
#include "tests/common/test_hosts.h"
#include "tests/e2e/cluster.h"

namespace nightshift::testing_e2e {
namespace {

constexpr int kClients = 8;
constexpr int kSubmitsPerClient = 25;
constexpr int kSubmits = kClients * kSubmitsPerClient;
constexpr int kCoordinatorHost = 0;
constexpr int kClientHost = 1;
const std::map<std::string, std::string> kDropReplies = {{"NIGHTSHIFT_FAULT_DROP_SUBMIT_REPLY", "0.2"}};

// What one `job submit` said.
struct Outcome {
  int code = -1;
  std::string output;  // stdout and stderr
  std::string id;      // the job id it printed (its last line), if any
};

std::string NameOf(int n) { return "submit-" + std::to_string(n); }

std::string LastLine(const std::string& text) {
  std::string line, last;
  std::istringstream in(text);
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last;
}

// Polls `pred` every 20 ms for up to `seconds`; whether it came true.
template <typename Pred>
bool WaitUntil(Pred pred, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

class SubmitPartitionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    hosts_ = testing::TestHosts::Make(2, &why);
    if (hosts_ == nullptr) GTEST_SKIP() << why;
  }

  // Client `c`'s submits, one after another, from the client host.
  void RunClient(const Cluster& cluster, const std::string& address, int c) {
    for (int k = 0; k < kSubmitsPerClient; ++k) {
      const int n = c * kSubmitsPerClient + k;
      const std::string spec = cluster.dir() + "/" + NameOf(n) + ".yaml";
      std::ofstream(spec) << "name: " << NameOf(n) << "\nmodel: {arch: transformer_classifier}\ndata: {path: /data}\n";
      Outcome& o = outcomes_[n];
      o.code = Cluster::Shell(hosts_->ShellPrefix(kClientHost) + cluster.Bin("nightshift") + " --coordinator " +
                                  address + " job submit " + spec + " --retry-for 60",
                              &o.output);
      o.id = LastLine(o.output);
      ++done_;
    }
  }

  // The faults, each once the clients are well under way: the coordinator's link cut for
  // 3 s, then the coordinator SIGKILLed and restarted on the same store and address.
  void InjectFaults(Cluster* cluster) {
    EXPECT_TRUE(WaitUntil([&] { return done_ >= kSubmits / 4; }, 30)) << done_ << " submits done";
    ASSERT_TRUE(hosts_->Cut(kCoordinatorHost).ok());
    std::this_thread::sleep_for(std::chrono::seconds(3));  // how long the partition lasts
    ASSERT_TRUE(hosts_->Heal(kCoordinatorHost).ok());
    EXPECT_TRUE(WaitUntil([&] { return done_ >= kSubmits * 3 / 5; }, 40)) << done_ << " submits done";
    cluster->coordinator().Kill(SIGKILL);
    cluster->StartCoordinator({}, /*same_port=*/true, kDropReplies);
  }

  std::unique_ptr<testing::TestHosts> hosts_;
  std::vector<Outcome> outcomes_ = std::vector<Outcome>(kSubmits);
  std::atomic<int> done_{0};
};

TEST_F(SubmitPartitionTest, EverySubmitIsStoredExactlyOnce) {
  Cluster cluster("submit-partition");
  cluster.UseHosts(hosts_.get(), kCoordinatorHost);
  cluster.StartCoordinator({}, false, kDropReplies);
  const std::string address = cluster.address();
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) clients.emplace_back([&, c] { RunClient(cluster, address, c); });
  InjectFaults(&cluster);
  for (auto& t : clients) t.join();
  cluster.coordinator().Kill(SIGTERM);

  // Retries the CLI noted: after a dropped reply, and after nobody answered (the cut
  // link, the dead coordinator). Both must have happened, or the test proved nothing.
  int dropped = 0, unreachable = 0;
  for (int n = 0; n < kSubmits; ++n) {
    EXPECT_EQ(outcomes_[n].code, 0) << NameOf(n) << ": " << outcomes_[n].output;
    std::istringstream lines(outcomes_[n].output);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("note: ", 0) != 0) continue;
      (line.find("injected fault") != std::string::npos ? dropped : unreachable)++;
    }
  }
  std::printf("retries after a dropped reply: %d, after no answer: %d\n", dropped, unreachable);
  EXPECT_GT(dropped, 0) << "no reply was dropped: the fault was not on";
  EXPECT_GT(unreachable, 0) << "no submit met the cut link or the dead coordinator";

  auto store = JobStore::Open(cluster.dir() + "/coordinator-db");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  StoredJobs stored;
  ASSERT_TRUE(store.value()->LoadAll(&stored).ok());
  EXPECT_TRUE(stored.moved_aside.empty());
  const std::vector<v1::Job>& jobs = stored.jobs;
  std::map<std::string, std::vector<std::string>> ids_by_name;
  for (const auto& job : jobs) ids_by_name[job.spec().name()].push_back(job.id());
  EXPECT_EQ(jobs.size(), static_cast<size_t>(kSubmits));
  for (int n = 0; n < kSubmits; ++n) {
    const auto& ids = ids_by_name[NameOf(n)];
    EXPECT_EQ(ids, std::vector<std::string>{outcomes_[n].id}) << NameOf(n) << ": " << outcomes_[n].output;
  }
}

}  // namespace
}  // namespace nightshift::testing_e2e
