// `nightshift job logs ID -f` end to end: a running rank's lines reach the CLI, relayed
// by the coordinator from the worker, within a second of being written.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include "tests/e2e/cluster.h"

namespace nightshift::testing_e2e {
namespace {

using Clock = std::chrono::steady_clock;

TEST(LogsE2E, FollowShowsNewLinesWithinASecond) {
  Cluster cluster("logs");
  const std::string data = cluster.MakeData(100);
  cluster.StartCoordinator();
  cluster.StartWorker("w1", 1);
  v1::Job job;
  ASSERT_TRUE(cluster.Submit("model: {arch: transformer_classifier, layers: 1, d_model: 16, heads: 2, ffn: 32, max_len: 48}\n"
                             "data: {path: " + data + ", tokenizer: {vocab_size: 64}}\n"
                             "train: {epochs: 500, batching: {batch_size: 8}, threads: 1}\n"
                             "checkpoint: {every_steps: 3}\n", &job).ok());
  v1::Job now;
  for (int i = 0; i < 600 && now.state() != v1::RUNNING; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cluster.Get(job.id(), &now);
  }
  ASSERT_EQ(now.state(), v1::RUNNING);
  const std::string log_path = cluster.dir() + "/w1/jobs/" + job.id() + "/attempt-0/rank-0.log";

  // The CLI, following, read on a thread.
  std::mutex mu;
  std::string cli_out;
  FILE* cli = ::popen((cluster.Bin("nightshift") + " --coordinator " + cluster.address() + " job logs " +
                       job.id() + " -f").c_str(), "r");
  ASSERT_NE(cli, nullptr);
  std::thread reader([&] {
    char buf[4096];
    size_t n;
    while ((n = ::read(fileno(cli), buf, sizeof(buf))) > 0) {
      std::lock_guard<std::mutex> lock(mu);
      cli_out.append(buf, n);
    }
  });

  // Watch the file itself; each new complete line must show up in the CLI within 1 s.
  auto file_size = [&] { std::error_code ec; auto s = fs::file_size(log_path, ec); return ec ? 0 : s; };
  size_t seen = file_size();
  int checked = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  while (checked < 3 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    size_t size = file_size();
    if (size <= seen) continue;
    const auto written = Clock::now();
    std::ifstream in(log_path);
    in.seekg(static_cast<std::streamoff>(seen));
    std::string line;
    if (!std::getline(in, line) || in.eof()) continue;  // wait for a complete line
    seen += line.size() + 1;
    bool shown = false;
    while (!shown && Clock::now() - written < std::chrono::seconds(1)) {
      {
        std::lock_guard<std::mutex> lock(mu);
        shown = cli_out.find(line) != std::string::npos;
      }
      if (!shown) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(shown) << "line not shown within 1 s: " << line;
    ++checked;
  }
  EXPECT_EQ(checked, 3);

  // Once the rank ends, the follow ends.
  std::string out;
  ASSERT_EQ(cluster.Cli({"job", "cancel", job.id()}, &out), 0) << out;
  reader.join();  // returns when the CLI exits
  EXPECT_EQ(::pclose(cli), 0);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_NE(cli_out.find("nightshift-trainer"), std::string::npos);
}

}  // namespace
}  // namespace nightshift::testing_e2e
