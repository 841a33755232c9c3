#include "coordinator/provisioner.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <utility>

#include "common/log.h"
#include "common/time_util.h"

namespace nightshift {
namespace {

constexpr int kStoppedByCluster = 128 + 15;  // nightshift-worker's exit after SIGTERM in an allocation

v1::ClusterAllocation ToProto(const char* cluster, const Allocation& a) {
  v1::ClusterAllocation p;
  p.set_cluster(cluster);
  p.set_id(a.id);
  p.set_attempt(a.attempt);
  p.set_state(a.state);
  p.set_reason(a.reason);
  p.set_nodes(a.nodes);
  if (a.end == Allocation::End::kNodeFail) p.set_failed_nodes(a.failed_nodes);
  return p;
}

AllocationEnd EndOf(const Allocation& a) {
  switch (a.end) {
    case Allocation::End::kPreempted: return AllocationEnd::kPreempted;
    case Allocation::End::kTimeLimit: return AllocationEnd::kTimeLimit;  // its workers exit 143 too
    case Allocation::End::kNodeFail: return AllocationEnd::kNodeFail;    // its survivors exit 143 too
    case Allocation::End::kDone: case Allocation::End::kRefused: break;
  }
  // Its workers exit 143 when the cluster's SIGTERM stopped them (before the time limit,
  // or a preemption's grace) after their ranks checkpointed: the cluster took it back.
  return a.exit_code == kStoppedByCluster ? AllocationEnd::kPreempted : AllocationEnd::kOther;
}

}  // namespace

Provisioner::Provisioner(ProvisionerOptions options, Coordinator* coordinator, ClusterAllocator* cluster)
    : options_(std::move(options)), coordinator_(coordinator), cluster_(cluster) {}

AllocationRequest Provisioner::RequestFor(const AllocationNeed& need) const {
  const int world = need.spec.resources().world_size(), per = std::max(1, options_.ranks_per_node);
  AllocationRequest r;
  r.job_id = need.job_id;
  r.attempt = need.attempt;
  r.priority = need.spec.priority();
  r.owner = need.owner;
  r.nodes = (world + per - 1) / per;
  const int ranks_per_node = (world + r.nodes - 1) / r.nodes;  // spread evenly
  r.gpus_per_node = need.spec.resources().device() == "cuda" ? ranks_per_node : 0;
  r.cpus_per_node = ranks_per_node;
  r.memory_gb_per_node = need.spec.resources().memory_gb() * ranks_per_node;
  r.time_limit_minutes = need.spec.resources().time_limit_minutes();
  if (every_node_.count(need.job_id) == 0) r.exclude_nodes = need.excluded_nodes;
  r.node_command = options_.worker_command;
  for (const std::string& word : {std::string("--coordinator"), options_.coordinator_address,
                                  std::string("--allocation-job"), need.job_id, std::string("--allocation-attempt"),
                                  std::to_string(need.attempt), std::string("--cpu-slots"),
                                  std::to_string(ranks_per_node)})
    r.node_command.push_back(word);
  if (options_.tokens != nullptr) r.token = options_.tokens->For(need.job_id, need.attempt);
  return r;
}

Status Provisioner::Pass() {
  // The needs first: an allocation listed after them that is pending while its attempt
  // was already placed went back to pending after running (see Follow).
  const std::vector<AllocationNeed> needs = coordinator_->AllocationNeeds();
  StatusOr<std::vector<Allocation>> listed = cluster_->List();
  if (!listed.ok()) return listed.status();  // nothing submitted blind
  std::map<std::string, const AllocationNeed*> need_of;
  std::set<std::string> listing;  // a job with an allocation listed, or that this pass may submit for
  for (const AllocationNeed& n : needs) need_of[n.job_id] = &n, listing.insert(n.job_id);
  std::map<std::pair<std::string, int>, const Allocation*> of_attempt;
  Status first;
  const Clock::TimePoint now = options_.clock->Now();
  std::set<std::string> over_now;
  for (const Allocation& a : *listed) {
    auto n = need_of.find(a.job_id);
    const bool recorded = n != need_of.end() && n->second->allocation.id() == a.id;  // sbatch told us its id
    if (!recorded && !RunsAsSubmitted(a, n != need_of.end() ? &n->second->owner : nullptr)) continue;  // another user's
    if (a.phase != Allocation::Phase::kEnded || cluster_->KeepsEndedAllocations()) listing.insert(a.job_id);
    const bool wanted = n != need_of.end() && n->second->attempt == a.attempt;
    if (wanted) {
      const Allocation*& slot = of_attempt[{a.job_id, a.attempt}];
      if (slot == nullptr || slot->phase == Allocation::Phase::kEnded) slot = &a;  // a live one first
      continue;
    }
    if ((a.phase != Allocation::Phase::kEnded || cluster_->KeepsEndedAllocations()) && !cancelled_.count(a.id)) {
      // A running one's workers are told to release and exit, and it ends on its own
      // (completed, not cancelled, in the cluster's records): cancelled only if it still
      // runs after the grace.
      if (a.phase == Allocation::Phase::kRunning) {
        over_now.insert(a.id);
        const Clock::TimePoint since = over_since_.try_emplace(a.id, now).first->second;
        if (now - since < std::chrono::duration<double>(options_.release_grace_seconds)) continue;
      }
      cancelled_.insert(a.id);
      NS_INFO("provisioner: cancelling " << cluster_->name() << " job " << a.id << " (" << a.job_id << " attempt "
                                         << a.attempt << " is over)");
      if (Status s = cluster_->Cancel(a.id); !s.ok()) {
        cancelled_.erase(a.id);  // tried again next pass
        if (first.ok()) first = s;
      }
    }
  }
  coordinator_->NoteClusterListing(std::move(listing));  // kept from deletion: their owners stay known
  std::set<std::string> unlisted;
  for (const AllocationNeed& n : needs) {
    auto a = of_attempt.find({n.job_id, n.attempt});
    Status s;
    if (a != of_attempt.end()) {
      s = Follow(n, *a->second);
    } else if (n.allocation.attempt() == n.attempt && !n.allocation.id().empty()) {
      unlisted.insert(n.allocation.id());
      s = Unlisted(n);
    } else if (n.may_start) {
      s = Start(n);
    }
    if (!s.ok() && first.ok()) first = s;
  }
  for (auto it = unrecorded_.begin(); it != unrecorded_.end();)  // their attempts moved on
    it = unlisted.count(it->first) ? std::next(it) : unrecorded_.erase(it);
  for (auto it = over_since_.begin(); it != over_since_.end();)  // ended, or cancelled
    it = over_now.count(it->first) && !cancelled_.count(it->first) ? std::next(it) : over_since_.erase(it);
  return first;
}

bool Provisioner::RunsAsSubmitted(const Allocation& a, const std::string* owner) const {
  std::string job_owner;
  if (owner == nullptr) {  // a job with no allocation needed now: its owner from its record
    StatusOr<v1::Job> job = coordinator_->Get(a.job_id);
    if (job.ok() && job->allocation().id() == a.id) return true;  // sbatch told us its id
    if (job.ok()) job_owner = job->owner();  // kept while listed (NoteClusterListing)
    owner = &job_owner;
  }
  const std::string runs_as = cluster_->RunsAs(*owner);
  // A cluster that does not name the user (no Slurm version's JSON leaves it out) cannot
  // tell: taken as ours, or each pass would submit the attempt again.
  return runs_as.empty() || a.user.empty() || a.user == runs_as;
}

// Ours, and no longer listed: it ended and left the list before we saw how. The cluster's
// records say how where it keeps them (a preemption stays one).
Status Provisioner::Unlisted(const AllocationNeed& n) {
  const std::string& id = n.allocation.id();
  StatusOr<Allocation> record = cluster_->Lookup(id);
  const bool ours = record.ok() && record->job_id == n.job_id && record->attempt == n.attempt;
  if (ours && record->phase == Allocation::Phase::kEnded) {
    unrecorded_.erase(id);
    return Follow(n, *record);
  }
  // The records unreachable, or not yet showing the end: asked again next pass, a while,
  // counted from the first pass that missed it, before a coordinator restart too (the
  // job's allocation keeps when: unlisted_since).
  const bool later = ours || record.status().code() == Status::kUnavailable;
  const Clock::TimePoint now = options_.clock->Now();
  auto [first, fresh] = unrecorded_.try_emplace(id, now);
  const bool noted = n.allocation.state() == kAllocationUnlisted && n.allocation.has_unlisted_since();
  if (fresh && noted) {
    const double ago = std::min(SecondsSince(n.allocation.unlisted_since(), options_.clock->WallNow()),
                                options_.record_wait_seconds);  // a wall clock may jump
    first->second = now - std::chrono::duration_cast<Clock::Duration>(std::chrono::duration<double>(std::max(ago, 0.0)));
  }
  if (later && now - first->second < std::chrono::duration<double>(options_.record_wait_seconds)) {
    v1::ClusterAllocation waiting = n.allocation;
    waiting.set_state(kAllocationUnlisted);
    waiting.set_reason("its end is not in " + std::string(cluster_->name()) + "'s records yet");
    if (!noted) *waiting.mutable_unlisted_since() = ToTimestamp(options_.clock->WallNow());
    return coordinator_->NoteAllocation(n.job_id, waiting);
  }
  std::string why = record.ok() ? "" : " (" + record.status().message() + ")";
  if (ours) {  // alive as far as the records say, hidden from the list: not left to run beside the next attempt
    why = " (its record still says " + record->state + ")";
    if (Status s = cluster_->Cancel(id); !s.ok()) return s;  // the attempt ends once it is cancelled
    cancelled_.insert(id);
  }
  unrecorded_.erase(id);
  v1::ClusterAllocation gone = n.allocation;
  gone.set_state("GONE");
  gone.clear_reason();
  gone.clear_unlisted_since();
  return coordinator_->AllocationEnded(n.job_id, gone, AllocationEnd::kOther,
                                       "no longer listed by " + std::string(cluster_->name()) + why);
}

Status Provisioner::Follow(const AllocationNeed& need, const Allocation& a) {
  const v1::ClusterAllocation noted = ToProto(cluster_->name(), a);
  const bool placed = need.state == v1::SCHEDULED || need.state == v1::RUNNING;
  if (a.phase == Allocation::Phase::kPending && placed)  // Kueue suspended it, Slurm requeued it
    return coordinator_->AllocationEnded(need.job_id, noted, AllocationEnd::kPreempted, "pending again");
  if (a.phase != Allocation::Phase::kEnded) return coordinator_->NoteAllocation(need.job_id, noted);
  if (a.end == Allocation::End::kRefused)
    return coordinator_->AllocationRefused(need.job_id, need.attempt,
                                           std::string(cluster_->name()) + " job " + a.id + " failed: " + a.reason);
  if (a.end == Allocation::End::kNodeFail && !a.failed_nodes.empty()) every_node_.erase(need.job_id);
  return coordinator_->AllocationEnded(need.job_id, noted, EndOf(a),
                                       "exit code " + std::to_string(a.exit_code));
}

Status Provisioner::Start(const AllocationNeed& need) {
  const AllocationRequest request = RequestFor(need);
  StatusOr<std::string> id = cluster_->Submit(request);
  if (id.status().code() == Status::kInvalidArgument && !request.exclude_nodes.empty()) {
    // Impossible maybe only without the failed nodes: the next pass asks without them.
    every_node_.insert(need.job_id);
    return Status::Unavailable(id.status().message() + " (asked without " + request.exclude_nodes +
                               "; asking again with every node)");
  }
  if (id.status().code() == Status::kInvalidArgument)
    return coordinator_->AllocationRefused(need.job_id, need.attempt, id.status().message());
  if (!id.ok()) return id.status();
  NS_INFO("provisioner: " << need.job_id << " attempt " << need.attempt << " is " << cluster_->name() << " job "
                          << *id << " (" << request.nodes << " nodes)");
  Allocation submitted;
  submitted.id = *id;
  submitted.job_id = need.job_id;
  submitted.attempt = need.attempt;
  submitted.state = "SUBMITTED";
  return coordinator_->NoteAllocation(need.job_id, ToProto(cluster_->name(), submitted));
}

}  // namespace nightshift
