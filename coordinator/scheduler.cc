#include "coordinator/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <functional>
#include <set>
#include <tuple>
#include <unordered_map>

namespace nightshift {
namespace {

// Whether `w` has the memory per slot `job`'s ranks need (scheduler.h).
bool HoldsRank(const SchedJob& job, const SchedWorker& w) {
  return job.memory_gb <= 0 || w.memory_gb_per_slot <= 0 || job.memory_gb <= w.memory_gb_per_slot;
}

// Whether `job` may run on `w`.
bool Eligible(const SchedJob& job, const SchedWorker& w) { return (!job.needs_gpu || w.gpus) && HoldsRank(job, w); }

std::string Gib(double gb) {
  char s[32];
  std::snprintf(s, sizeof(s), "%.4g", gb);
  return s;
}

// Places all ranks of `job` onto the eligible `workers` (which must have enough free
// slots in all).
std::vector<SchedPart> Place(const SchedJob& job, std::vector<SchedWorker>* workers) {
  std::vector<SchedPart> parts;
  const auto holds = [&](const SchedWorker* w) {
    return std::find(job.holders.begin(), job.holders.end(), w->name) != job.holders.end();
  };
  // Best fit on a single worker, among the holders of its newest checkpoint first.
  SchedWorker* best = nullptr;
  for (auto& w : *workers) {
    if (!Eligible(job, w) || w.free_slots < job.world_size) continue;
    if (best == nullptr || std::make_pair(!holds(&w), w.free_slots) < std::make_pair(!holds(best), best->free_slots))
      best = &w;
  }
  if (best != nullptr) {
    parts.push_back({best->name, 0, job.world_size});
    best->free_slots -= job.world_size;
    return parts;
  }
  std::vector<SchedWorker*> order;
  for (auto& w : *workers)
    if (Eligible(job, w) && w.free_slots > 0) order.push_back(&w);
  std::stable_sort(order.begin(), order.end(), [&](const SchedWorker* a, const SchedWorker* b) {
    return std::make_pair(holds(a), a->free_slots) > std::make_pair(holds(b), b->free_slots);
  });
  int rank = 0;
  for (SchedWorker* w : order) {
    if (rank == job.world_size) break;
    int take = std::min(w->free_slots, job.world_size - rank);
    parts.push_back({w->name, rank, take});
    w->free_slots -= take;
    rank += take;
  }
  return parts;
}

// `other` as a job of `reader`'s owner may read of it: its id, or only whose it is not.
std::string NameFor(const std::string& other, const std::string& other_owner, const SchedJob& reader) {
  return other_owner == reader.owner ? other : "a job of another user";
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// One scheduling pass over a snapshot: the free slots as jobs are placed, and the
// reservation once the first job that does not fit has set it (EASY backfill, see
// scheduler.h). Jobs are considered one at a time, in the order Schedule chooses.
class Pass {
 public:
  Pass(std::vector<SchedWorker> workers, const std::vector<SchedRunning>& running, const ScheduleOptions& options)
      : workers_(std::move(workers)),
        running_(running),
        options_(options),
        held_(running.size(), 0),
        preempting_(running.size(), false) {
    for (size_t i = 0; i < workers_.size(); ++i) {
      index_[workers_[i].name] = i;
      total_ += workers_[i].total_slots;
      free_total_ += workers_[i].free_slots;
    }
    for (size_t i = 0; i < running_.size(); ++i)
      for (const auto& p : running_[i].parts)
        if (index_.count(p.worker)) held_[i] += p.num_ranks;
  }

  // Slots each owner's running jobs hold on the workers that count (fair share).
  std::unordered_map<std::string, int64_t> SlotsByOwner() const {
    std::unordered_map<std::string, int64_t> usage;
    for (size_t i = 0; i < running_.size(); ++i) usage[running_[i].owner] += held_[i];
    return usage;
  }

  // Places `job` now, or records why it waits; whether it was placed.
  bool Consider(const SchedJob& job) {
    const bool everywhere = std::all_of(workers_.begin(), workers_.end(),
                                        [&](const SchedWorker& w) { return HoldsRank(job, w); });
    if (job.needs_gpu || !everywhere) return ConsiderSome(job);
    if (job.world_size > total_) {
      result_.waiting[job.id] = "needs " + std::to_string(job.world_size) + " slots; the cluster has " +
                                std::to_string(total_);
      return false;
    }
    if (!reserved_ && job.world_size > free_total_) {
      Reserve(job);
      return false;
    }
    if (job.world_size > free_total_) {
      result_.waiting[job.id] = ShortOf(job);
      return false;
    }
    if (!SparesReservation(job)) {
      result_.waiting[job.id] = "queued behind " + NameFor(result_.reserved_for, reserved_owner_, job);
      return false;
    }
    PlaceNow(job);
    return true;
  }

  ScheduleResult TakeResult() { return std::move(result_); }

 private:
  // A job only some workers may run (a GPU job: GPU workers; one with resources.memory_gb:
  // those with that much per slot): only their slots count. It does not take the
  // reservation (its arithmetic is over all slots), but the first such job that waits
  // keeps its workers' free slots (HoldFor) and, while no job holds the reservation,
  // preempts lower-priority jobs on those workers when stopping them frees enough there
  // (PreemptOn); it backfills like any job once a reservation exists.
  bool ConsiderSome(const SchedJob& job) {
    int total = 0, free = 0, of_kind = 0;  // of_kind: workers with GPUs where it needs them
    bool short_of_memory = false;          // some of those lack resources.memory_gb per slot
    double most = 0;                       // GiB per slot, the most among those
    for (const auto& w : workers_) {
      if (job.needs_gpu && !w.gpus) continue;
      ++of_kind;
      most = std::max(most, w.memory_gb_per_slot);
      if (HoldsRank(job, w)) total += w.total_slots, free += w.free_slots;
      else short_of_memory = true;
    }
    const std::string kind = (job.needs_gpu ? " GPU slots" : " slots") +
                             (short_of_memory ? " with " + Gib(job.memory_gb) + " GiB" : std::string());
    if (job.needs_gpu && of_kind == 0) {
      result_.waiting[job.id] = "resources.device is cuda but no ready worker has GPUs";
      return false;
    }
    if (total == 0) {
      result_.waiting[job.id] = "resources.memory_gb is " + Gib(job.memory_gb) +
                                " per rank, but no ready worker has that much per slot (the most: " + Gib(most) +
                                " GiB, its memory over its slots)";
      return false;
    }
    if (job.world_size > total) {
      result_.waiting[job.id] = "needs " + std::to_string(job.world_size) + kind + "; the cluster has " +
                                std::to_string(total);
      return false;
    }
    if (job.world_size > free || !SparesReservation(job)) {
      const bool short_now = job.world_size > free;
      result_.waiting[job.id] = short_now ? "waiting for " + std::to_string(job.world_size) + " free" + kind + " (" +
                                                std::to_string(free) + " free now)"
                                          : "queued behind " + NameFor(result_.reserved_for, reserved_owner_, job);
      if (short_now && held_for_.empty() && options_.preemption && !reserved_) PreemptOn(job, free);
      HoldFor(job);
      return false;
    }
    PlaceNow(job);
    return true;
  }

  // The first such job that waits keeps the free slots of the workers it may use from the
  // jobs considered after it in this pass (as a reservation keeps slots), so that smaller
  // jobs cannot take them one by one for ever (and preempts for them: PreemptOn).
  // The slots the running jobs hold on those workers no longer count for the
  // reservation either (Reserve, SetReservationTime, Preempt): they are kept for this job
  // as they free up.
  void HoldFor(const SchedJob& job) {
    if (!held_for_.empty()) return;
    held_for_ = job.id;
    for (auto& w : workers_) {
      if (!Eligible(job, w)) continue;
      free_total_ -= w.free_slots;
      w.free_slots = 0;
    }
    const std::vector<int> kept = HeldWhere(job);
    for (size_t i = 0; i < running_.size(); ++i) held_[i] -= kept[i];
  }

  // The slots each running job holds on the workers `job` may use.
  std::vector<int> HeldWhere(const SchedJob& job) const {
    std::vector<int> held(running_.size(), 0);
    for (size_t i = 0; i < running_.size(); ++i)
      for (const auto& p : running_[i].parts) {
        const auto w = index_.find(p.worker);
        if (w != index_.end() && Eligible(job, workers_[w->second])) held[i] += p.num_ranks;
      }
    return held;
  }

  std::string ShortOf(const SchedJob& job) const {
    return "waiting for " + std::to_string(job.world_size) + " free slots (" + std::to_string(free_total_) +
           " free now)";
  }

  bool EndsBeforeReservation(const SchedJob& job) const {
    return job.expected_seconds < kUnknownSeconds && job.expected_seconds <= reserve_at_;
  }
  // Whether `job` may start now without delaying the reservation: there is none, or the
  // job ends before it, or it fits in the slots the holder will not need then.
  bool SparesReservation(const SchedJob& job) const {
    return !reserved_ || EndsBeforeReservation(job) || job.world_size <= shadow_extra_;
  }
  void PlaceNow(const SchedJob& job) {
    // Still running at the reservation time: it uses up spare slots of that time.
    if (reserved_ && !EndsBeforeReservation(job)) shadow_extra_ -= job.world_size;
    result_.placed[job.id] = Place(job, &workers_);
    free_total_ -= job.world_size;
  }

  // The first restricted job that waits (ConsiderSome), with `free` of its slots free,
  // while no job holds the reservation (the holder, first in the next pass, would count
  // the victims' slots as free at once and could take them): the victims Preempt chooses
  // among the jobs on the workers it may use, counting only their slots there, when the
  // jobs already stopping there do not free enough. Those slots are kept for it (HoldFor)
  // as they free up.
  void PreemptOn(const SchedJob& job, int free) {
    const std::vector<int> held = HeldWhere(job);
    int soon = free;
    for (size_t i = 0; i < running_.size(); ++i)
      if (running_[i].stopping) soon += held[i];
    if (soon < job.world_size) Preempt(job, job.world_size - soon, held);
  }

  // The first job that does not fit gets the reservation, at the earliest time enough
  // slots free up (preempting lower-priority jobs if that is allowed and helps).
  void Reserve(const SchedJob& job) {
    reserved_ = true;
    result_.reserved_for = job.id;
    reserved_owner_ = job.owner;
    // Slots that free up soon: jobs already stopping or chosen by a restricted job before
    // it in this pass (held_ leaves out their slots kept for that job: HoldFor), plus
    // victims chosen now.
    int soon = free_total_;
    for (size_t i = 0; i < running_.size(); ++i)
      if (running_[i].stopping || preempting_[i]) soon += held_[i];
    if (options_.preemption && soon < job.world_size) Preempt(job, job.world_size - soon, held_);
    std::vector<bool> ends_now(running_.size(), false);
    for (size_t i = 0; i < running_.size(); ++i) ends_now[i] = running_[i].stopping || preempting_[i];
    SetReservationTime(job, ends_now);
    if (!result_.waiting.count(job.id)) result_.waiting[job.id] = ShortOf(job);
  }

  // Whether `job` may stop running_[i], which holds held[i] slots where it counts: a
  // lower priority, and either the same owner or the best-effort class
  // (ScheduleOptions::preemptible_below); not one already stopping or chosen in this pass.
  bool MayPreempt(const SchedJob& job, size_t i, const std::vector<int>& held) const {
    const SchedRunning& r = running_[i];
    if (r.stopping || preempting_[i] || held[i] == 0 || r.priority >= job.priority) return false;
    return r.owner == job.owner || r.priority < options_.preemptible_below;
  }

  // Chooses the fewest, lowest-priority running jobs that `job` may preempt (MayPreempt)
  // that free `need` slots (running_[i] frees held[i]), if there are enough; marks them
  // in preempting_.
  void Preempt(const SchedJob& job, int need, const std::vector<int>& held) {
    std::vector<size_t> cand;
    for (size_t i = 0; i < running_.size(); ++i)
      if (MayPreempt(job, i, held)) cand.push_back(i);
    // Lowest priority first; among equals the biggest (fewest victims), then the youngest.
    std::sort(cand.begin(), cand.end(), [&](size_t a, size_t b) {
      const SchedRunning &x = running_[a], &y = running_[b];
      return std::make_tuple(x.priority, -held[a], -static_cast<int64_t>(x.submit_seq)) <
             std::make_tuple(y.priority, -held[b], -static_cast<int64_t>(y.submit_seq));
    });
    std::vector<size_t> chosen;
    int got = 0;
    for (size_t i : cand) {
      if (got >= need) break;
      chosen.push_back(i);
      got += held[i];
    }
    if (got < need) return;
    // Drop victims that turned out unnecessary, most valuable first.
    for (size_t k = chosen.size(); k-- > 0;) {
      if (got - held[chosen[k]] >= need) {
        got -= held[chosen[k]];
        chosen.erase(chosen.begin() + static_cast<long>(k));
      }
    }
    std::vector<std::string> names;
    int others = 0;  // other owners' jobs, counted, not named
    for (size_t i : chosen) {
      preempting_[i] = true;
      if (running_[i].owner == job.owner) names.push_back(running_[i].id);
      else ++others;
      result_.preempt.push_back(running_[i].id);
      result_.preempted_by[running_[i].id] = job.id;
    }
    if (others > 0) names.push_back(others == 1 ? "a job of another user" : std::to_string(others) + " jobs of other users");
    result_.waiting[job.id] = "preempting " + Join(names) + " (lower priority) to start";
  }

  // When enough slots are expected to be free for `job`, from the running jobs' ends
  // (`ends_now`: at once), and how many more than it needs are free then.
  void SetReservationTime(const SchedJob& job, const std::vector<bool>& ends_now) {
    std::vector<std::pair<double, int>> ends;  // (seconds from now, slots)
    for (size_t i = 0; i < running_.size(); ++i)
      if (held_[i] > 0) ends.push_back({ends_now[i] ? 0.0 : running_[i].ends_in_seconds, held_[i]});
    std::sort(ends.begin(), ends.end());
    int avail = free_total_;
    reserve_at_ = kUnknownSeconds;
    shadow_extra_ = 0;
    for (size_t k = 0; k < ends.size() && ends[k].first < kUnknownSeconds; ++k) {
      avail += ends[k].second;
      if (avail >= job.world_size) {
        reserve_at_ = ends[k].first;
        // Others ending at the same moment add to the spare room.
        while (k + 1 < ends.size() && ends[k + 1].first == reserve_at_) avail += ends[++k].second;
        shadow_extra_ = avail - job.world_size;
        break;
      }
    }
    result_.reserved_in_seconds = reserve_at_;
  }

  std::vector<SchedWorker> workers_;        // free_slots drop as jobs are placed
  const std::vector<SchedRunning>& running_;
  const ScheduleOptions options_;
  std::vector<int> held_;                   // slots running_[i] holds on workers_ (not kept: HoldFor)
  std::vector<bool> preempting_;            // running_[i] chosen as a victim in this pass
  std::unordered_map<std::string, size_t> index_;  // worker name -> its index in workers_
  int total_ = 0, free_total_ = 0;          // slots on workers_
  bool reserved_ = false;                   // once set, later jobs only backfill
  std::string reserved_owner_;              // the owner of result_.reserved_for's job
  std::string held_for_;                    // HoldFor's job: its workers' free slots are kept
  double reserve_at_ = 0;                   // seconds from now
  int shadow_extra_ = 0;                    // slots free at reserve_at_ beyond what the holder needs
  ScheduleResult result_;
};

// Places the jobs that have workers of their own (an allocation) there, or says why they
// wait; returns the other jobs, and leaves in *workers only those reserved for nobody.
std::vector<SchedJob> PlaceOnAllocations(std::vector<SchedJob> jobs, std::vector<SchedWorker>* workers,
                                         ScheduleResult* result) {
  std::map<std::string, std::vector<SchedWorker>> reserved;
  std::vector<SchedWorker> shared;
  for (auto& w : *workers) (w.reserved_for.empty() ? shared : reserved[w.reserved_for]).push_back(std::move(w));
  *workers = std::move(shared);
  std::vector<SchedJob> rest;
  for (auto& job : jobs) {
    auto own = reserved.find(job.id);
    if (own == reserved.end() && !job.allocated_only) {
      rest.push_back(std::move(job));
      continue;
    }
    int free = 0;
    if (own != reserved.end())
      for (const auto& w : own->second) free += Eligible(job, w) ? w.free_slots : 0;
    if (free >= job.world_size) {
      result->placed[job.id] = Place(job, &own->second);
      continue;
    }
    std::string why = job.allocation_wait.empty() ? "waiting for its allocation" : job.allocation_wait;
    if (free > 0) why += "; " + std::to_string(free) + " of " + std::to_string(job.world_size) + " slots registered";
    result->waiting[job.id] = why;
  }
  return rest;
}

}  // namespace

ScheduleResult Schedule(std::vector<SchedJob> jobs, std::vector<SchedWorker> workers,
                        const std::vector<SchedRunning>& running, const ScheduleOptions& options) {
  ScheduleResult allocated;
  jobs = PlaceOnAllocations(std::move(jobs), &workers, &allocated);
  Pass pass(std::move(workers), running, options);
  std::unordered_map<std::string, int64_t> usage = pass.SlotsByOwner();  // running plus placed now
  // Priority classes, highest first; within one, fair share between owners.
  std::map<int, std::vector<SchedJob>, std::greater<int>> by_priority;
  for (auto& j : jobs) by_priority[j.priority].push_back(std::move(j));
  for (auto& [priority, level] : by_priority) {
    std::sort(level.begin(), level.end(),
              [](const SchedJob& a, const SchedJob& b) { return a.submit_seq < b.submit_seq; });
    std::unordered_map<std::string, std::deque<const SchedJob*>> queues;
    for (const auto& j : level) queues[j.owner].push_back(&j);
    // (slots held, oldest job's seq, owner): the owner holding least goes next.
    std::set<std::tuple<int64_t, uint64_t, std::string>> ready;
    for (const auto& [owner, q] : queues) ready.insert({usage[owner], q.front()->submit_seq, owner});
    while (!ready.empty()) {
      auto [used, seq, owner] = *ready.begin();
      ready.erase(ready.begin());
      auto& q = queues[owner];
      const SchedJob* job = q.front();
      q.pop_front();
      if (pass.Consider(*job)) usage[owner] += job->world_size;
      if (!q.empty()) ready.insert({usage[owner], q.front()->submit_seq, owner});
    }
  }
  ScheduleResult result = pass.TakeResult();
  result.placed.merge(allocated.placed);
  result.waiting.merge(allocated.waiting);
  return result;
}

}  // namespace nightshift
