// Several ranks in one test process: threads that join a process group on loopback.
#ifndef NIGHTSHIFT_TESTS_WORKER_TRAINER_RANKS_UTIL_H_
#define NIGHTSHIFT_TESTS_WORKER_TRAINER_RANKS_UTIL_H_

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "worker/trainer/parallel/ddp.h"
#include "worker/trainer/progress_sink.h"
#include "worker/trainer/train.h"

namespace nightshift::trainer::testing {

// A TCP port on 127.0.0.1 that was free a moment ago.
inline int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

inline ProcessGroupOptions Options(int rank, int world, int port, int timeout_ms = 20000) {
  ProcessGroupOptions o;
  o.rank = rank;
  o.world_size = world;
  o.master_addr = "127.0.0.1";
  o.master_port = port;
  o.timeout = std::chrono::milliseconds(timeout_ms);
  return o;
}

// Rank `rank` of `world` threads of this process, the group's store on 127.0.0.1:port.
inline RankInfo LoopbackRank(int rank, int world, int port) {
  RankInfo info;
  info.rank = rank;
  info.world_size = world;
  info.local_world_size = world;
  info.master_addr = "127.0.0.1";
  info.master_port = port;
  return info;
}

// Runs body(rank) on `world` threads; rethrows the first failure.
inline void RunRanks(int world, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Trains `c` on progress->size() loopback ranks, rank r's RankInfo first given to `adjust`
// (its faults, its memory limit), its progress into (*progress)[r]; the ranks' exit codes.
inline std::vector<int> TrainRanks(const TrainConfig& c, std::vector<MemoryProgressSink>* progress,
                                   const std::function<void(int, RankInfo&)>& adjust) {
  const int world = static_cast<int>(progress->size()), port = FreePort();
  std::vector<int> codes(world, -1);
  RunRanks(world, [&](int r) {
    RankInfo rank = LoopbackRank(r, world, port);
    adjust(r, rank);
    codes[r] = RunTraining(c, rank, (*progress)[r]);
  });
  return codes;
}

}  // namespace nightshift::trainer::testing

#endif  // NIGHTSHIFT_TESTS_WORKER_TRAINER_RANKS_UTIL_H_
