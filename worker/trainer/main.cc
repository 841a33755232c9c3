// nightshift-trainer --config FILE.json [--memory-limit BYTES]
// nightshift-trainer --config FILE.json --export-step N --export-dir DIR
//   (the second form exports the run's kept checkpoint at step N as a model folder, on the
//   CPU, and exits: `nightshift job artifacts --step N`; see export.h)
// Environment: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// NIGHTSHIFT_PROGRESS_FD (progress lines; stdout when unset; "none": no reporting). Logs go
// to stderr.
// Exit: 0 done, 1 error (an `error` event was written), 2 usage, 3 an error every restart
// would meet again (errors.h; its `error` event has "permanent": 1), 143 stopped by SIGTERM.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <stdexcept>
#include <string>

#include "worker/trainer/config.h"
#include "worker/trainer/checkpoint/export.h"
#include "worker/trainer/host_memory.h"
#include "worker/trainer/models/pretrained.h"
#include "worker/trainer/progress_sink.h"
#include "worker/trainer/train.h"

namespace nt = nightshift::trainer;

namespace {

// `permanent`: a restart would fail the same way (a bad config file).
int Fail(nt::ProgressSink& progress, const std::string& message, bool permanent = false) {
  std::fprintf(stderr, "nightshift-trainer: error: %s\n", message.c_str());
  progress.Emit(nightshift::format::ProgressRecord{
      "error", permanent ? std::map<std::string, double>{{"permanent", 1}} : std::map<std::string, double>{},
      {{"message", message}}});
  return permanent ? nt::kExitPermanent : nt::kExitError;
}

// The second form: no ranks, no progress pipe; errors on stderr, exit 1.
int Export(const std::string& config_path, int64_t step, const std::string& dir) {
  try {
    nt::TrainConfig config;
    if (std::string err = nt::LoadTrainConfig(config_path, &config); !err.empty()) throw std::runtime_error(err);
    if (std::string err = nt::hf::ResolvePretrained(&config); !err.empty()) throw std::runtime_error(err);
    nt::ExportCheckpoint(dir, config, step);
    return nt::kExitOk;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nightshift-trainer: error: %s\n", e.what());
    return nt::kExitError;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path, export_dir;
  long long memory_limit = 0;  // bytes; 0: NIGHTSHIFT_MEMORY_LIMIT_BYTES or MemAvailable
  long long export_step = -1;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--config") == 0 && has_value) {
      config_path = argv[++i];
    } else if (std::strncmp(argv[i], "--config=", 9) == 0) {
      config_path = argv[i] + 9;
    } else if (std::strcmp(argv[i], "--memory-limit") == 0 && has_value &&
               std::sscanf(argv[i + 1], "%lld", &memory_limit) == 1 && memory_limit > 0) {
      ++i;
    } else if (std::strcmp(argv[i], "--export-step") == 0 && has_value &&
               std::sscanf(argv[i + 1], "%lld", &export_step) == 1 && export_step >= 0) {
      ++i;
    } else if (std::strcmp(argv[i], "--export-dir") == 0 && has_value) {
      export_dir = argv[++i];
    } else {
      config_path.clear();
      break;
    }
  }
  if (config_path.empty() || (export_step >= 0) != !export_dir.empty()) {
    std::fprintf(stderr,
                 "usage: nightshift-trainer --config FILE.json [--memory-limit BYTES]\n"
                 "       nightshift-trainer --config FILE.json --export-step N --export-dir DIR\n");
    return 2;
  }
  if (export_step >= 0) {
    nt::KeepFreedHostMemory();
    return Export(config_path, export_step, export_dir);
  }

  int fd = 1;
  std::string fd_error = nt::ProgressFdFromEnv(&fd);
  nt::FdProgressSink fd_progress(fd_error.empty() && fd >= 0 ? fd : 1);
  nt::NullProgressSink no_progress;
  nt::ProgressSink& progress = fd == -1 ? static_cast<nt::ProgressSink&>(no_progress) : fd_progress;
  if (!fd_error.empty()) return Fail(progress, fd_error);
  try {
    nt::TrainConfig config;
    if (std::string err = nt::LoadTrainConfig(config_path, &config); !err.empty())
      return Fail(progress, err, /*permanent=*/true);
    // sharding full frees each block after use (host_memory.h); on one rank it is plain AdamW
    if (config.data_parallel.sharding != "full" || config.data_parallel.world_size <= 1) nt::KeepFreedHostMemory();
    if (std::string err = nt::hf::ResolvePretrained(&config); !err.empty())
      return Fail(progress, err, /*permanent=*/true);
    nt::RankInfo rank;
    if (std::string err = nt::ReadRankInfo(&rank); !err.empty()) return Fail(progress, err);
    if (memory_limit > 0) rank.memory_limit_bytes = memory_limit;
    ::signal(SIGPIPE, SIG_IGN);  // a dead reader makes write() fail, not kill us
    nt::InstallStopSignalHandler();
    return nt::RunTraining(config, rank, progress);
  } catch (const std::exception& e) {
    return Fail(progress, e.what());
  } catch (...) {
    return Fail(progress, "unknown exception");
  }
}
