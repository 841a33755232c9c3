#include "worker/checkpoint_export.h"

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <thread>

#include "common/model_folder.h"
#include "worker/assignment.h"
#include "worker/launcher.h"
#include "worker/supervisor.h"

namespace nightshift {
namespace {

namespace fs = std::filesystem;

bool HasFolder(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / kChecksumsFile, ec);
}

// <work_dir>/jobs/<job>/attempt-<n>/trainer-config.json of the highest n; "" when none.
std::string NewestTrainerConfig(const fs::path& job_dir) {
  std::string best;
  long best_attempt = -1;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(job_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("attempt-", 0) != 0) continue;
    char* end = nullptr;
    const long n = std::strtol(name.c_str() + 8, &end, 10);
    if (*end != '\0' || n <= best_attempt || !fs::is_regular_file(entry.path() / "trainer-config.json", ec)) continue;
    best_attempt = n;
    best = (entry.path() / "trainer-config.json").string();
  }
  return best;
}

}  // namespace

StatusOr<std::string> CheckpointExporter::FolderAt(const std::string& job_id, int64_t step) {
  const fs::path job_root = fs::path(options_.checkpoint_root) / job_id;
  const fs::path final_model = job_root / "model";
  if (step == 0 || (HasFolder(final_model) && ModelFolderStep(final_model.string()) == step)) return final_model.string();
  const fs::path dir = job_root / ModelStepFolderName(step);
  if (HasFolder(dir)) return dir.string();  // exported before: no wait (an export renames it in whole)
  // One export at a time, and nobody queues behind it: a request while one runs is told
  // to come back (a download of anything already exported is served meanwhile).
  std::unique_lock<std::mutex> lock(export_mu_, std::try_to_lock);
  if (!lock.owns_lock())
    return Status::Unavailable("this worker is exporting another checkpoint (one at a time, at most " +
                               std::to_string(static_cast<int>(options_.timeout_seconds)) +
                               " s); ask again when it is done");
  if (HasFolder(dir)) return dir.string();
  const fs::path job_dir = fs::path(options_.work_dir) / "jobs" / job_id;
  const std::string config = NewestTrainerConfig(job_dir);
  if (config.empty()) return Status::NotFound("job " + job_id + " has no trainer configuration on this worker");
  NS_RETURN_IF_ERROR(RunExport(config, step, dir.string(), (job_dir / ("export-step-" + std::to_string(step) + ".log")).string()));
  return dir.string();
}

Status CheckpointExporter::RunExport(const std::string& config, int64_t step, const std::string& dir,
                                     const std::string& log) {
  // The trainer reads the job's checkpoint (user data): as the job's user, seeing only
  // this job's folders, as its ranks did.
  auto view = TrainerViewOf(config);
  if (!view.ok()) return view.status();
  Supervisor supervisor(Supervisor::Options{"export of step " + std::to_string(step)});
  NS_RETURN_IF_ERROR(supervisor.Start({{0,
                                        {options_.trainer_path, "--config", config, "--export-step",
                                         std::to_string(step), "--export-dir", dir},
                                        {{"NIGHTSHIFT_PROGRESS_FD", "none"}},
                                        log,
                                        {},
                                        view.value()}}));
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, std::chrono::duration<double>(options_.timeout_seconds), [&] { return done; }))
      supervisor.Stop();
  });
  const Supervisor::Result result = supervisor.Wait([](int, const std::string&) {});
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
  if (result.exits.at(0).ok()) return Status::OK();
  const std::string why = "exporting step " + std::to_string(step) + ": nightshift-trainer " +
                          DescribeWaitStatus(result.exits[0].wait_status) + ": " + TailOfFile(log, 1);
  return why.find("no complete checkpoint") != std::string::npos ? Status::NotFound(why) : Status::Internal(why);
}

}  // namespace nightshift
