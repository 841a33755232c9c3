#include "coordinator/job_table.h"

#include <google/protobuf/util/message_differencer.h>

#include <cctype>
#include <cinttypes>
#include <cstdio>

#include "common/job_state.h"
#include "common/log.h"
#include "common/time_util.h"
#include "coordinator/limits.h"

namespace nightshift {
namespace {

std::string JobIdFor(uint64_t seq) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "j-%06" PRIu64, seq);
  return buf;
}

// A retried submission: the job it created, if the spec (defaults filled) is the same.
StatusOr<v1::Job> SameSubmission(const v1::Job& job, const v1::JobSpec& spec) {
  if (!google::protobuf::util::MessageDifferencer::Equals(job.spec(), spec))
    return Status::InvalidArgument("request_id: '" + job.request_id() + "' already submitted job " + job.id() +
                                   " with a different spec; use a new request_id for a new job");
  return job;
}

// The number in an id the table made ("j-000042" -> 42, with prefix "s-" "s-000003" -> 3);
// 0 for any other id.
uint64_t SeqOfId(const std::string& id, const std::string& prefix = "j-") {
  if (id.rfind(prefix, 0) != 0 || id.size() == prefix.size()) return 0;
  uint64_t seq = 0;
  for (size_t i = prefix.size(); i < id.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(id[i])) || seq > (UINT64_MAX - 9) / 10) return 0;
    seq = seq * 10 + static_cast<uint64_t>(id[i] - '0');
  }
  return seq;
}

}  // namespace

std::string RankRange(const v1::Placement& p) {
  if (p.num_ranks() == 1) return "rank " + std::to_string(p.first_rank());
  return "ranks " + std::to_string(p.first_rank()) + "-" +
         std::to_string(p.first_rank() + p.num_ranks() - 1);
}

int RanksOn(const v1::Job& job, const std::string& worker) {
  int ranks = 0;
  for (const auto& p : job.placements())
    if (p.worker() == worker && !p.finished()) ranks += p.num_ranks();
  return ranks;
}

JobTable::JobTable(std::unique_ptr<JobStore> store, Clock* clock) : store_(std::move(store)), clock_(clock) {}

StatusOr<size_t> JobTable::Load() {
  StoredJobs stored;
  NS_RETURN_IF_ERROR(store_->LoadAll(&stored));
  next_seq_ = std::max(next_seq_, stored.deleted_seq + 1);
  for (const std::string& id : stored.moved_aside) {
    moved_aside_.push_back("job/" + id);
    next_seq_ = std::max(next_seq_, SeqOfId(id) + 1);  // its id is not handed out again
  }
  for (auto& job : stored.jobs) {
    next_seq_ = std::max(next_seq_, job.submit_seq() + 1);
    by_seq_[job.submit_seq()] = job.id();
    if (!job.request_id().empty()) by_request_[{job.owner(), job.request_id()}] = job.id();
    JobEntry entry;
    entry.job = std::move(job);
    entry.last_step = entry.job.progress().step();
    entry.last_advance = entry.stopping_since = entry.progress_at = clock_->Now();
    NS_RETURN_IF_ERROR(LoadHistory(&entry));
    jobs_[entry.job.id()] = std::move(entry);
  }
  std::vector<v1::Sweep> sweeps;
  std::vector<std::string> sweeps_aside;
  uint64_t deleted_sweep_seq = 0;
  NS_RETURN_IF_ERROR(store_->LoadSweeps(&sweeps, &sweeps_aside, &deleted_sweep_seq));
  next_sweep_seq_ = std::max(next_sweep_seq_, deleted_sweep_seq + 1);
  moved_aside_.insert(moved_aside_.end(), sweeps_aside.begin(), sweeps_aside.end());
  for (const std::string& key : sweeps_aside)  // "sweep/s-000003": its id is not handed out again
    next_sweep_seq_ = std::max(next_sweep_seq_, SeqOfId(key.substr(key.find('/') + 1), "s-") + 1);
  for (auto& sweep : sweeps) {
    next_sweep_seq_ = std::max(next_sweep_seq_, sweep.submit_seq() + 1);
    if (!sweep.request_id().empty()) sweep_by_request_[{sweep.owner(), sweep.request_id()}] = sweep.id();
    sweeps_[sweep.id()] = std::move(sweep);
  }
  return stored.jobs.size();
}

StatusOr<v1::Sweep> JobTable::SubmitSweep(v1::SweepSpec spec, const std::string& owner,
                                          const std::string& request_id) {
  auto it = sweep_by_request_.find({owner, request_id});
  auto found = it == sweep_by_request_.end() ? sweeps_.end() : sweeps_.find(it->second);
  if (!request_id.empty() && found != sweeps_.end()) {
    const v1::Sweep& known = found->second;
    if (!google::protobuf::util::MessageDifferencer::Equals(known.spec(), spec))
      return Status::InvalidArgument("request_id: '" + request_id + "' already submitted sweep " + known.id() +
                                     " with a different sweep; use a new request_id for a new sweep");
    NS_INFO("sweep " << known.id() << ": submitted again with request_id " << request_id);
    return known;
  }
  char id[32];
  std::snprintf(id, sizeof id, "s-%06" PRIu64, next_sweep_seq_);
  v1::Sweep& sweep = sweeps_[id];
  sweep.set_id(id);
  sweep.set_submit_seq(next_sweep_seq_++);
  *sweep.mutable_spec() = std::move(spec);
  sweep.set_owner(owner);
  sweep.set_request_id(request_id);
  sweep.set_state(v1::RUNNING);
  *sweep.mutable_created() = ToTimestamp(clock_->WallNow());
  AddSweepEvent(&sweep, "submitted: " + sweep.spec().method() + ", " + std::to_string(sweep.spec().max_trials()) +
                            " trials, " + std::to_string(sweep.spec().parallelism()) + " at a time");
  PersistSweep(&sweep);
  if (!store_error_.ok()) {
    sweeps_.erase(id);
    return store_error_;
  }
  if (!request_id.empty()) sweep_by_request_[{owner, request_id}] = id;
  return sweep;
}

void JobTable::PersistSweep(v1::Sweep* sweep) {
  if (!store_error_.ok()) return;
  *sweep->mutable_updated() = ToTimestamp(clock_->WallNow());
  for (v1::SweepEvent& ev : *sweep->mutable_events())
    if (!ev.has_time()) *ev.mutable_time() = sweep->updated();
  CheckWrite(store_->PutSweep(*sweep, /*sync=*/true));
}

void JobTable::AddSweepEvent(v1::Sweep* sweep, const std::string& text) const {
  v1::SweepEvent* ev = sweep->add_events();
  *ev->mutable_time() = ToTimestamp(clock_->WallNow());
  ev->set_text(text);
}

Status JobTable::LoadHistory(JobEntry* entry) {
  Status history = store_->GetMetrics(entry->job.id(), &entry->history);
  if (history.code() == Status::kDataLoss) {  // moved aside by the store; the reports that follow rebuild it
    moved_aside_.push_back("metrics/" + entry->job.id());
    entry->history.Clear();
  } else if (!history.ok() && history.code() != Status::kNotFound) {
    return history;
  }
  entry->history.set_job_id(entry->job.id());
  return Status::OK();
}

Status JobTable::CheckRequestId(const std::string& id) {
  if (id.size() > limits::kRequestIdBytes)
    return Status::InvalidArgument("request_id: longer than " + std::to_string(limits::kRequestIdBytes) + " characters");
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != ':' && c != '-')
      return Status::InvalidArgument("request_id: only letters, digits and . _ : - are allowed");
  return Status::OK();
}

StatusOr<v1::Job> JobTable::Submit(v1::JobSpec spec, const std::string& owner, const std::string& request_id,
                                   int max_unfinished, v1::Job base) {
  if (auto it = by_request_.find({owner, request_id}); !request_id.empty() && it != by_request_.end()) {
    NS_INFO("job " << it->second << ": submitted again with request_id " << request_id);
    return SameSubmission(jobs_.at(it->second).job, spec);
  }
  int unfinished = 0;
  for (const auto& [id, e] : jobs_) unfinished += e.job.owner() == owner && !IsTerminal(e.job.state());
  if (unfinished >= max_unfinished)
    return Status::ResourceExhausted("user '" + owner + "' already has " + std::to_string(unfinished) +
                                     " unfinished jobs (at most " + std::to_string(max_unfinished) +
                                     "); wait for some to end or cancel them");
  JobEntry entry;
  v1::Job& job = entry.job;
  job = std::move(base);
  job.clear_events();  // Submit's own: the one below is the first
  const uint64_t seq = next_seq_;
  job.set_id(JobIdFor(seq));
  job.set_submit_seq(seq);
  job.set_owner(owner);
  job.set_request_id(request_id);
  *job.mutable_spec() = std::move(spec);
  *job.mutable_created() = ToTimestamp(clock_->WallNow());
  *job.mutable_updated() = job.created();
  job.set_state(v1::QUEUED);
  job.set_reason("accepted");
  v1::JobEvent* ev = job.add_events();
  *ev->mutable_time() = job.created();
  ev->set_state(v1::QUEUED);
  ev->set_reason("accepted");
  // The synced write comes before anything else can see the job, and before the answer.
  Status s = store_->Put(job, /*sync=*/true);
  if (!s.ok()) return Status::Unavailable("job not accepted: " + s.message());
  next_seq_++;
  by_seq_[seq] = job.id();
  if (!request_id.empty()) by_request_[{owner, request_id}] = job.id();
  const std::string id = job.id();
  v1::Job copy = job;
  jobs_[id] = std::move(entry);
  NS_INFO("job " << id << " accepted: " << copy.spec().name() << ", world_size "
                 << copy.spec().resources().world_size());
  changed_.notify_all();
  return copy;
}

JobEntry* JobTable::Find(const std::string& id) {
  return const_cast<JobEntry*>(static_cast<const JobTable*>(this)->Find(id));  // this table is not const
}

const JobEntry* JobTable::Find(const std::string& id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

StatusOr<const JobEntry*> JobTable::Get(const std::string& id) const {
  const JobEntry* entry = Find(id);
  if (entry == nullptr) return Status::NotFound("no job " + id);
  return entry;
}

StatusOr<JobEntry*> JobTable::Get(const std::string& id) {
  auto entry = static_cast<const JobTable*>(this)->Get(id);
  if (!entry.ok()) return entry.status();
  return const_cast<JobEntry*>(entry.value());  // this table is not const
}

JobPage JobTable::List(const JobQuery& query, const std::string* owner) const {
  JobPage page;
  for (auto it = by_seq_.upper_bound(query.after_seq); it != by_seq_.end(); ++it) {
    const v1::Job& job = jobs_.at(it->second).job;
    if (!query.states.empty() && !query.states.count(job.state())) continue;
    if (owner != nullptr && job.owner() != *owner) continue;
    if (static_cast<int>(page.jobs.size()) >= query.limit) {
      page.next_after_seq = page.jobs.back().submit_seq();
      break;
    }
    page.jobs.push_back(job);
  }
  return page;
}

StatusOr<v1::Job> JobTable::WaitForChange(std::unique_lock<std::mutex>& lock, const std::string& id,
                                          uint64_t* version, std::chrono::milliseconds timeout) const {
  // A real wait (the caller blocks on it), so on real time, not on clock_.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    NS_RETURN_IF_ERROR(store_error_);
    const JobEntry* entry = Find(id);
    if (entry == nullptr) return Status::NotFound("no job " + id);
    if (entry->version > *version) {
      *version = entry->version;
      return entry->job;
    }
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout)
      return Status::DeadlineExceeded("no change");
  }
}

void JobTable::SetState(JobEntry* entry, v1::JobState state, const std::string& reason, int64_t step) {
  v1::Job& job = entry->job;
  job.set_state(state);
  job.set_reason(reason);
  AddEvent(&job, reason, step);
  if (state == v1::RUNNING) {
    entry->last_step = job.progress().step();
    entry->last_advance = clock_->Now();
  }
  NS_INFO("job " << job.id() << " -> " << v1::JobState_Name(state) << ": " << reason);
  Persist(entry, /*sync=*/true);
}

void JobTable::AddEvent(v1::Job* job, const std::string& reason, int64_t step) const {
  v1::JobEvent* ev = job->add_events();
  *ev->mutable_time() = ToTimestamp(clock_->WallNow());
  ev->set_state(job->state());
  ev->set_reason(reason);
  ev->set_attempt(job->attempt());
  ev->set_step(step);
}

void JobTable::Persist(JobEntry* entry, bool sync) {
  if (!store_error_.ok()) return;  // stopped: nothing more is written or told
  entry->version++;
  *entry->job.mutable_updated() = ToTimestamp(clock_->WallNow());
  CheckWrite(store_->Put(entry->job, sync));
  changed_.notify_all();
}

void JobTable::PersistHistory(JobEntry* entry) {
  if (!store_error_.ok()) return;
  entry->history.set_job_id(entry->job.id());
  CheckWrite(store_->PutMetrics(entry->history, /*sync=*/false));
}

void JobTable::CheckWrite(const Status& write) {
  if (write.ok()) return;
  store_error_ = Status::Unavailable("the coordinator stopped after a failed job store write (" + write.message() +
                                     "); restart it once the store is writable");
  NS_ERROR("coordinator: " << store_error_.message());
}

void JobTable::Remove(JobEntry* entry) {
  if (!store_error_.ok()) return;
  const v1::Job& job = entry->job;
  CheckWrite(store_->Delete(job, /*sync=*/true));
  if (!store_error_.ok()) return;
  NS_INFO("job " << job.id() << " (" << v1::JobState_Name(job.state()) << ") removed");
  by_seq_.erase(job.submit_seq());
  if (!job.request_id().empty()) by_request_.erase({job.owner(), job.request_id()});
  jobs_.erase(job.id());  // `entry` and `job` are gone from here on
  changed_.notify_all();  // its watchers see NOT_FOUND
}

int JobTable::RemoveFinishedBefore(std::chrono::system_clock::time_point cutoff,
                                   const std::function<bool(const v1::Job&)>& keep) {
  std::vector<JobEntry*> expired;
  for (auto& [id, entry] : jobs_) {
    const v1::Job& job = entry.job;
    if (IsTerminal(job.state()) && job.events_size() > 0 &&
        SecondsSince(job.events(job.events_size() - 1).time(), cutoff) > 0 && !(keep && keep(job)))
      expired.push_back(&entry);
  }
  for (JobEntry* entry : expired) Remove(entry);
  if (!store_error_.ok()) return 0;
  // Sweeps likewise, from their last event (their trials ended before it).
  std::vector<std::string> ended;
  for (const auto& [id, sweep] : sweeps_) {
    const google::protobuf::Timestamp& last = sweep.events_size() > 0 ? sweep.events(sweep.events_size() - 1).time()
                                                                      : sweep.updated();
    if (IsTerminal(sweep.state()) && SecondsSince(last, cutoff) > 0) ended.push_back(id);
  }
  for (const std::string& id : ended) {
    CheckWrite(store_->DeleteSweep(sweeps_.at(id), /*sync=*/true));
    if (!store_error_.ok()) return 0;
    const v1::Sweep& sweep = sweeps_.at(id);
    NS_INFO("sweep " << id << " (" << v1::JobState_Name(sweep.state()) << ") removed");
    if (!sweep.request_id().empty()) sweep_by_request_.erase({sweep.owner(), sweep.request_id()});
    sweeps_.erase(id);
  }
  return static_cast<int>(expired.size() + ended.size());
}

int JobTable::UsedSlots(const std::string& worker) const {
  int used = 0;
  for (const auto& [id, entry] : jobs_)
    if (HoldsSlots(entry.job.state())) used += RanksOn(entry.job, worker);
  return used;
}

}  // namespace nightshift
