// Scheduler and submit benchmarks (issue 6); results in RESULTS.md.
//
//   sched_bench schedule [QUEUED] [WORKERS]   one Schedule() pass, in process: QUEUED jobs
//                                             (default 10000, 1-8 ranks, 4 priorities,
//                                             20 owners) onto WORKERS 8-slot workers
//                                             (default 100), half of them busy
//   sched_bench submit ADDR [N] [THREADS]     N SubmitJob calls (default 2000) from THREADS
//                                             client threads (default 8) to a running
//                                             coordinator: latency p50/p99, throughput
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/scheduler.h"
#include "nightshift/v1/jobs.grpc.pb.h"

namespace nightshift {
namespace {

using Clock = std::chrono::steady_clock;
double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

int BenchSchedule(int queued, int workers) {
  std::mt19937 rng(7);
  std::vector<SchedWorker> ws;
  std::vector<SchedRunning> running;
  for (int i = 0; i < workers; ++i) {
    const std::string name = "w" + std::to_string(i);
    const int busy = i % 2 == 0 ? 8 : 0;
    ws.push_back({name, 8, 8 - busy});
    if (busy) {
      running.push_back({"r" + std::to_string(i), static_cast<int>(rng() % 4), static_cast<uint64_t>(i),
                         "u" + std::to_string(rng() % 20), {{name, 0, busy}}, 10.0 + rng() % 3600});
    }
  }
  std::vector<SchedJob> jobs;
  for (int i = 0; i < queued; ++i) {
    jobs.push_back({"j" + std::to_string(i), 1 + static_cast<int>(rng() % 8), static_cast<int>(rng() % 4),
                    static_cast<uint64_t>(1000 + i), "u" + std::to_string(rng() % 20)});
  }
  std::vector<double> times;
  ScheduleResult r;
  for (int rep = 0; rep < 20; ++rep) {
    auto t0 = Clock::now();
    r = Schedule(jobs, ws, running);
    times.push_back(Ms(Clock::now() - t0));
  }
  std::sort(times.begin(), times.end());
  std::printf("schedule pass: %d queued jobs, %d workers (%zu running jobs): median %.2f ms, max %.2f ms; "
              "placed %zu, waiting %zu, reserved for %s\n",
              queued, workers, running.size(), times[times.size() / 2], times.back(), r.placed.size(),
              r.waiting.size(), r.reserved_for.c_str());
  return 0;
}

int BenchSubmit(const std::string& address, int n, int threads) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = v1::JobService::NewStub(channel);
  std::atomic<int> next{0}, failed{0};
  std::mutex mu;
  std::vector<double> lat;
  auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      std::vector<double> mine;
      while (next.fetch_add(1) < n) {
        v1::SubmitJobRequest req;
        req.set_spec_yaml("name: bench\nmodel: {arch: transformer_classifier}\ndata: {path: /nonexistent}\n");
        v1::Job job;
        grpc::ClientContext ctx;
        auto s0 = Clock::now();
        grpc::Status s = stub->SubmitJob(&ctx, req, &job);
        mine.push_back(Ms(Clock::now() - s0));
        if (!s.ok()) failed++;
      }
      std::lock_guard<std::mutex> lock(mu);
      lat.insert(lat.end(), mine.begin(), mine.end());
    });
  }
  for (auto& th : pool) th.join();
  const double secs = Ms(Clock::now() - t0) / 1000;
  std::sort(lat.begin(), lat.end());
  std::printf("submit: %d jobs from %d threads to %s: p50 %.2f ms, p99 %.2f ms, %.0f jobs/s, %d failed\n", n,
              threads, address.c_str(), lat[lat.size() / 2], lat[lat.size() * 99 / 100], n / secs, failed.load());
  return failed.load() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace nightshift

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "schedule")
    return nightshift::BenchSchedule(argc > 2 ? std::atoi(argv[2]) : 10000, argc > 3 ? std::atoi(argv[3]) : 100);
  if (mode == "submit" && argc > 2)
    return nightshift::BenchSubmit(argv[2], argc > 3 ? std::atoi(argv[3]) : 2000, argc > 4 ? std::atoi(argv[4]) : 8);
  std::fprintf(stderr, "usage: sched_bench schedule [QUEUED] [WORKERS] | submit ADDR [N] [THREADS]\n");
  return 2;
}
