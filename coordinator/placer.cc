#include "coordinator/placer.h"

#include "common/file_access.h"
#include "common/log.h"
#include "coordinator/checkpoint_records.h"

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

// Why a job waits for its allocation, as the cluster last said.
std::string AllocationWait(const v1::Job& job) {
  const v1::ClusterAllocation& a = job.allocation();
  if (a.id().empty() || a.attempt() != job.attempt()) return "waiting for an allocation from the cluster";
  std::string why = "waiting for " + a.cluster() + " job " + a.id() + " (" + a.state();
  if (!a.reason().empty() && a.reason() != "None") why += ": " + a.reason();
  if (!a.nodes().empty()) why += ", on " + a.nodes();
  return why + ")";
}

}  // namespace

Placer::Placer(JobTable* jobs, const WorkerRegistry* workers, Attempts* attempts, bool allocated_only)
    : jobs_(jobs), workers_(workers), attempts_(attempts), allocated_only_(allocated_only) {}

bool Placer::ServesCurrentAttempt(const v1::WorkerInfo& worker) const {
  const v1::WorkerAllocation& a = worker.allocation();
  const JobEntry* entry = jobs_->Find(a.job_id());
  if (entry == nullptr || IsTerminal(entry->job.state()) || entry->job.attempt() != a.attempt()) return false;
  // ...and it was started in the allocation the provisioner made (or adopted) for it.
  const v1::ClusterAllocation& made = entry->job.allocation();
  return made.attempt() == a.attempt() && !made.id().empty() && made.id() == a.cluster_id();
}

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
    if (job.state() != v1::QUEUED || entry.not_before > now || !job.held_by().empty()) continue;
    SchedJob j{id, job.spec().resources().world_size(), job.spec().priority(), job.submit_seq()};
    j.owner = job.owner();  // per-user fair share (scheduler.h)
    j.expected_seconds = ExpectedSeconds(job);  // backfill (scheduler.h)
    j.needs_gpu = job.spec().resources().device() == "cuda";
    j.memory_gb = job.spec().resources().memory_gb();
    j.holders = NewestHolders(id);
    j.allocated_only = allocated_only_;
    if (allocated_only_) j.allocation_wait = AllocationWait(job);
    s.pending.push_back(std::move(j));
  }
  // A late worker (Late) is not lost yet, but its free slots are offered to nobody: when a
  // rank failed because its peer's worker died, the restart (after the restart backoff, a
  // second by default) must not go back there. Its slots still count in the totals, and
  // nobody is preempted while a worker is late (its free slots may be back in a moment).
  for (const auto& [name, w] : workers_->entries()) {
    if (w.info.state() != v1::WORKER_READY || w.info.cordoned()) continue;
    // A worker of an allocation serves the attempt it was started for, and nothing once
    // that attempt is over (it is told to exit).
    const std::string& reserved_for = w.info.allocation().job_id();
    if (!reserved_for.empty() && !ServesCurrentAttempt(w.info)) continue;
    const bool late = workers_->Late(w, now);
    s.any_late |= late;
    s.workers.push_back({name, w.info.slots(), late ? 0 : std::max(0, w.info.slots() - jobs_->UsedSlots(name)),
                         w.info.gpus_size() > 0, reserved_for});
    // An allocation's worker was sized by the cluster for its job (--mem): not checked.
    if (reserved_for.empty() && w.info.slots() > 0)
      s.workers.back().memory_gb_per_slot = static_cast<double>(w.info.memory_bytes()) / w.info.slots() / (1 << 30);
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
    const v1::Job& holder = jobs_->Find(result.preempted_by.at(victim_id))->job;
    const std::string priorities =
        " (priority " + std::to_string(holder.spec().priority()) + " > " + std::to_string(victim->job.spec().priority()) + ")";
    NS_INFO("job " << victim_id << " preempted by " << holder.id() << priorities);
    // Another owner's job is not named to this one's (its id and priority are theirs).
    attempts_->BeginStopping(victim, v1::PREEMPTED,
                             holder.owner() == victim->job.owner() ? "preempted by " + holder.id() + priorities
                                                                   : "preempted by a job of another user");
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

int64_t Placer::VouchedStep(const v1::Job& job, const std::string& name, const WorkerEntry& w) const {
  auto step = w.held.find(job.id());
  auto digest = w.held_manifest.find(job.id());
  if (step == w.held.end() || digest == w.held_manifest.end()) return 0;
  return Vouched(job, name, step->second, digest->second) ? step->second : 0;
}

std::vector<std::string> Placer::NewestHolders(const std::string& job_id) const {
  std::vector<std::string> holders;
  const JobEntry* entry = jobs_->Find(job_id);
  if (entry == nullptr) return holders;
  int64_t newest = 1;
  for (const auto& [name, w] : workers_->entries()) {
    const int64_t step = w.info.state() == v1::WORKER_READY ? VouchedStep(entry->job, name, w) : 0;
    if (step < newest) continue;
    if (step > newest) holders.clear();
    newest = step;
    holders.push_back(name);
  }
  return holders;
}

int Placer::JudgeClaims(const std::string& worker) {
  const WorkerEntry* w = workers_->Find(worker);
  if (w == nullptr) return 0;
  // A worker of an allocation whose attempt is over (it still heartbeats while it ends)
  // writes nothing the job goes on from: its claim of a newer step is no writer's.
  const bool over = !w->info.allocation().job_id().empty() && !ServesCurrentAttempt(w->info);
  std::set<std::tuple<std::string, int64_t, std::string>> ignored;
  for (const auto& [id, step] : w->held) {
    const std::string digest = w->held_manifest.count(id) ? w->held_manifest.at(id) : "";
    JobEntry* entry = jobs_->Find(id);
    if (entry != nullptr) {
      v1::Job& job = entry->job;
      auto order = entry->copies_ordered.find(worker);
      if (order != entry->copies_ordered.end() && order->second == std::make_pair(step, digest)) {
        entry->copies_ordered.erase(order);  // the copier verified the digest: a holder now
        if (RecordHolder(&job, worker, step, digest, /*copied=*/true)) jobs_->Persist(entry, /*sync=*/false);
      } else if (step > NewestRecordedStep(job) && !over &&
                 (Wrote(job, worker) || (HoldsSlots(job.state()) && RanksOn(job, worker) > 0)) &&
                 RecordHolder(&job, worker, step, digest)) {
        // The writer (of earlier steps, or of the attempt it runs): its trainer's report of
        // the step may come a beat later, or never (the worker restarted and the ranks died
        // with it), and the next attempt would set the step aside.
        NS_INFO("job " << id << ": worker " << worker << ", which wrote its checkpoints, holds step " << step
                       << ", newer than any it reported: recorded");
        jobs_->Persist(entry, /*sync=*/false);
      }
      if (Vouched(job, worker, step, digest)) continue;
    }
    ignored.insert({id, step, digest});
  }
  int fresh = 0;
  const auto& before = ignored_[worker];
  for (const auto& claim : ignored) {
    if (before.count(claim)) continue;
    ++fresh;
    NS_WARN("worker " << worker << " claims checkpoint step " << std::get<1>(claim) << " of job " << std::get<0>(claim)
                      << " (manifest " << (std::get<2>(claim).empty() ? "none" : std::get<2>(claim).substr(0, 12))
                      << "), which no record of the coordinator vouches for: ignored");
  }
  ignored_[worker] = std::move(ignored);
  return fresh;
}

void Placer::AddResumeSources(v1::Assignment* a) const {
  const JobEntry* entry = jobs_->Find(a->task().job_id());
  if (entry == nullptr) return;
  const v1::Job& job = entry->job;
  for (auto& v : VerifiedCheckpoints(job)) *a->add_verified_checkpoints() = std::move(v);
  const int64_t newest = NewestRecordedStep(job);
  if (newest == 0 || a->first_rank() != 0) return;  // one worker fetches; the ranks share it (trainer)
  std::vector<std::string> holders = NewestHolders(job.id());
  if (holders.empty()) return;
  for (const auto& p : job.placements()) {
    const WorkerEntry* w = workers_->Find(p.worker());
    if (w != nullptr && VouchedStep(job, p.worker(), *w) == newest) return;  // the attempt has it
  }
  const std::string& source = holders.front();
  const WorkerEntry* src = workers_->Find(source);
  if (src == nullptr || src->info.log_address().empty() || VouchedStep(job, source, *src) != newest) return;
  v1::CheckpointCopy* fetch = a->mutable_fetch_checkpoint();
  fetch->set_job_id(job.id());
  fetch->set_step(newest);
  fetch->set_source_worker(source);
  fetch->set_source_address(src->info.log_address());
  fetch->set_capability(ReadCheckpointCapability(src->file_key, job.id()));
  fetch->set_manifest_sha256(src->held_manifest.at(job.id()));
}

void Placer::AddCheckpointCopies(const std::string& target, Clock::TimePoint now, HeartbeatReply* reply) {
  // Under a cluster a job resumes only on its next allocation's workers, and a worker of an
  // allocation serves its attempt alone: another job's checkpoints (and the key to read
  // them) never go to it.
  if (allocated_only_) return;
  for (auto& [id, entry] : jobs_->entries()) {
    const v1::Job& job = entry.job;
    if (job.state() != v1::RUNNING || job.placements_size() != 1) continue;
    const std::string& source = job.placements(0).worker();
    const WorkerEntry* src = workers_->Find(source);
    if (source == target || src == nullptr || src->info.state() != v1::WORKER_READY ||
        src->info.log_address().empty())
      continue;
    const int64_t newest = VouchedStep(job, source, *src);
    if (newest == 0) continue;
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
      const int64_t step = VouchedStep(job, name, w);
      if (step > chosen_step) chosen = &name, chosen_step = step;
    }
    if (chosen == nullptr || *chosen != target || chosen_step >= newest) continue;
    v1::CheckpointCopy& copy = reply->copy_checkpoints.emplace_back();
    copy.set_job_id(id);
    copy.set_step(newest);
    copy.set_source_worker(source);
    copy.set_source_address(src->info.log_address());
    copy.set_capability(ReadCheckpointCapability(src->file_key, id));
    copy.set_manifest_sha256(src->held_manifest.at(id));
    entry.copies_ordered[target] = {newest, copy.manifest_sha256()};
  }
}

}  // namespace nightshift
