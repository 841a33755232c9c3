// Feature-cache benchmark (issue 5): preparation time of a dataset on a miss (build)
// and on a hit (key + checksum verification), and tokenization throughput on 1 and 2
// threads. Runs the real nightshift-prepare, as the worker does.
//   usage: cache_bench DATA_PATH [VOCAB_SIZE] [MAX_LEN]
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "common/format/progress.h"
#include "worker/feature_cache.h"
#include "worker/launcher.h"

namespace fs = std::filesystem;
using namespace nightshift;

namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Runs nightshift-prepare; returns its "prepared" record.
format::ProgressRecord Prepare(const PrepOptions& o, const std::string& out_dir, int threads) {
  fs::path self = fs::read_symlink("/proc/self/exe");
  std::vector<std::string> argv = {(self.parent_path() / "nightshift-prepare").string(), "--path", o.path,
                                   "--vocab-size", std::to_string(o.vocab_size), "--max-len",
                                   std::to_string(o.max_len), "--output-dir", out_dir, "--threads",
                                   std::to_string(threads)};
  auto proc = SpawnProcess(argv, {}, out_dir + ".log");
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(proc->progress_fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  ::close(proc->progress_fd);
  ::waitpid(proc->pid, nullptr, 0);
  format::ProgressRecord r;
  format::ParseProgressLine(out.substr(0, out.find('\n')), &r);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: cache_bench DATA_PATH [VOCAB_SIZE] [MAX_LEN]\n");
    return 2;
  }
  PrepOptions o;
  o.path = fs::absolute(argv[1]).string();
  if (argc > 2) o.vocab_size = std::atoi(argv[2]);
  if (argc > 3) o.max_len = std::atoi(argv[3]);
  const std::string tmp = "/tmp/nightshift-cache-bench-" + std::to_string(::getpid());
  fs::create_directories(tmp);

  for (int threads : {1, 2}) {
    auto r = Prepare(o, tmp + "/prep-t" + std::to_string(threads), threads);
    const double mb = r.Number("input_bytes") / 1e6;
    std::printf("prepare threads=%d: total %.1f s (read %.2f s, tokenizer training %.1f s, tokenize %.2f s); "
                "tokenization %.1f MB/s, read+tokenize %.1f MB/s\n",
                threads, r.Number("seconds"), r.Number("read_seconds"), r.Number("tokenizer_seconds"),
                r.Number("tokenize_seconds"), mb / r.Number("tokenize_seconds"),
                mb / (r.Number("read_seconds") + r.Number("tokenize_seconds")));
  }

  auto cache = FeatureCache::Open({tmp + "/cache", 0});
  auto t0 = std::chrono::steady_clock::now();
  std::string key = cache.value()->KeyFor(o).value();
  const double cold_key = Since(t0);
  bool hit = false;
  auto build = [&](const std::string& dir) {
    auto r = Prepare(o, dir, 2);
    return r.event == "prepared" ? Status::OK() : Status::Internal(r.String("message"));
  };
  t0 = std::chrono::steady_clock::now();
  auto lease = cache.value()->Acquire(key, o.path, build, &hit);
  const double miss = cold_key + Since(t0);
  lease.value().reset();
  t0 = std::chrono::steady_clock::now();
  key = cache.value()->KeyFor(o).value();
  const double warm_key = Since(t0);
  t0 = std::chrono::steady_clock::now();
  lease = cache.value()->Acquire(key, o.path, build, &hit);
  const double verify = Since(t0);
  const double hit_total = warm_key + verify;
  std::printf("cache miss (key %.2f s + build): %.1f s; cache hit (key %.3f s + verify %.3f s): %.3f s; "
              "hit/miss = %.4f (%s)\n",
              cold_key, miss, warm_key, verify, hit_total, hit_total / miss, hit ? "hit" : "NOT A HIT");
  lease.value().reset();
  cache.value().reset();
  fs::remove_all(tmp);
  return hit ? 0 : 1;
}
