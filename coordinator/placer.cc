#include "coordinator/placer.h"

#include "common/file_access.h"

#include <algorithm>
#include <chrono>


namespace nightshift {
namespace {

// Seconds a queued job should run once placed: the steps left after its checkpoint at the
// step time its last attempt measured (rank 0's progress outlives the attempt). Unknown
// for a job that has not run yet.
double ExpectedSeconds(const v1::Job& job) {
  const v1::Progress& p = job.progress();
  if (p.total_steps() <= 0 || p.step_seconds() <= 0) return kUnknownSeconds;
  return static_cast<double>(std::max<int64_t>(0, p.total_steps() - job.checkpoint_step())) * p.step_seconds();
}

}  // namespace

Placer::Placer(JobTable* jobs, const WorkerRegistry* workers, Attempts* attempts)
    : jobs_(jobs), workers_(workers), attempts_(attempts) {}

void Placer::SchedulingPass(Clock::TimePoint now, ScheduleOptions options) {
  Snapshot snapshot = SnapshotForScheduler(now);
  if (snapshot.pending.empty()) return;
  options.preemption = options.preemption && !snapshot.any_late;
  ApplySchedule(Schedule(std::move(snapshot.pending), std::move(snapshot.workers), snapshot.running, options));
}

Placer::Snapshot Placer::SnapshotForScheduler(Clock::TimePoint now) const {
  Snapshot s;
  for (const auto& [id, entry] : jobs_->entries()) {
    const v1::Job& job = entry.job;
    if (job.state() != v1::QUEUED || entry.not_before > now) continue;
    SchedJob j{id, job.spec().resources().world_size(), job.spec().priority(), job.submit_seq()};
    j.owner = job.owner();  // per-user fair share (scheduler.h)
    j.expected_seconds = ExpectedSeconds(job);  // backfill (scheduler.h)
    j.needs_gpu = job.spec().resources().device() == "cuda";
    j.holders = NewestHolders(id);
    s.pending.push_back(std::move(j));
  }
  // A late worker (Late) is not lost yet, but its free slots are offered to nobody: when a
  // rank failed because its peer's worker died, the restart (after the restart backoff, a
  // second by default) must not go back there. Its slots still count in the totals, and
  // nobody is preempted while a worker is late (its free slots may be back in a moment).
  for (const auto& [name, w] : workers_->entries()) {
    if (w.info.state() != v1::WORKER_READY || w.info.cordoned()) continue;
    const bool late = workers_->Late(w, now);
    s.any_late |= late;
    s.workers.push_back({name, w.info.slots(), late ? 0 : std::max(0, w.info.slots() - jobs_->UsedSlots(name)),
                         w.info.gpus_size() > 0});
  }
  for (const auto& [id, entry] : jobs_->entries()) {
    const v1::Job& job = entry.job;
    if (!HoldsSlots(job.state())) continue;
    SchedRunning r{id, job.spec().priority(), job.submit_seq(), job.owner()};
    for (const auto& p : job.placements())
      if (!p.finished()) r.parts.push_back({p.worker(), p.first_rank(), p.num_ranks()});
    r.stopping = IsStopping(job.state());
    // The eta counts from when the coordinator took the report (progress.updated is the
    // worker's clock, which ours need not agree with).
    if (job.state() == v1::RUNNING && job.progress().eta_seconds() > 0)
      r.ends_in_seconds =
          std::max(0.0, job.progress().eta_seconds() - std::chrono::duration<double>(now - entry.progress_at).count());
    s.running.push_back(std::move(r));
  }
  return s;
}

void Placer::ApplySchedule(const ScheduleResult& result) {
  for (const auto& victim_id : result.preempt) {
    JobEntry* victim = jobs_->Find(victim_id);
    const v1::Job& holder = jobs_->Find(result.reserved_for)->job;
    attempts_->BeginStopping(victim, v1::PREEMPTED,
                             "preempted by " + holder.id() + " (priority " + std::to_string(holder.spec().priority()) +
                                 " > " + std::to_string(victim->job.spec().priority()) + ")");
  }
  for (const auto& [id, parts] : result.placed) attempts_->Place(jobs_->Find(id), parts);
  for (const auto& [id, reason] : result.waiting) {
    JobEntry* entry = jobs_->Find(id);
    if (entry->job.reason() != reason) {
      entry->job.set_reason(reason);
      jobs_->Persist(entry, /*sync=*/false);
    }
  }
}

std::vector<std::string> Placer::NewestHolders(const std::string& job_id) const {
  std::vector<std::string> holders;
  int64_t newest = 0;
  for (const auto& [name, w] : workers_->entries()) {
    auto it = w.held.find(job_id);
    if (w.info.state() != v1::WORKER_READY || it == w.held.end() || it->second < newest) continue;
    if (it->second > newest) holders.clear();
    newest = it->second;
    holders.push_back(name);
  }
  return holders;
}

void Placer::AddCheckpointCopies(const std::string& target, Clock::TimePoint now, HeartbeatReply* reply) const {
  for (const auto& [id, entry] : jobs_->entries()) {
    const v1::Job& job = entry.job;
    if (job.state() != v1::RUNNING || job.placements_size() != 1) continue;
    const std::string& source = job.placements(0).worker();
    const WorkerEntry* src = workers_->Find(source);
    if (source == target || src == nullptr || src->info.state() != v1::WORKER_READY ||
        src->info.log_address().empty())
      continue;
    auto newest = src->held.find(id);
    if (newest == src->held.end()) continue;
    // Where the job could resume: ready, uncordoned, not late, with GPUs for a cuda job.
    const bool cuda = job.spec().resources().device() == "cuda";
    const auto could_resume = [&](const WorkerEntry& w) {
      return w.info.state() == v1::WORKER_READY && !w.info.cordoned() && !workers_->Late(w, now) &&
             (!cuda || w.info.gpus_size() > 0);
    };
    // The one other worker that keeps a copy (std::map: by name, so the first on ties).
    const std::string* chosen = nullptr;
    int64_t chosen_step = -1;
    for (const auto& [name, w] : workers_->entries()) {
      if (name == source || !could_resume(w)) continue;
      auto it = w.held.find(id);
      const int64_t step = it == w.held.end() ? 0 : it->second;
      if (step > chosen_step) chosen = &name, chosen_step = step;
    }
    if (chosen == nullptr || *chosen != target || chosen_step >= newest->second) continue;
    v1::CheckpointCopy& copy = reply->copy_checkpoints.emplace_back();
    copy.set_job_id(id);
    copy.set_step(newest->second);
    copy.set_source_worker(source);
    copy.set_source_address(src->info.log_address());
    copy.set_capability(ReadCheckpointCapability(src->file_key, id));
    copy.set_manifest_sha256(src->held_manifest.count(id) ? src->held_manifest.at(id) : "");
  }
}

}  // namespace nightshift
