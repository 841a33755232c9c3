#include "coordinator/kubernetes.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include <google/protobuf/util/time_util.h>

#include "common/log.h"
#include "common/time_util.h"
#include "coordinator/allocation_tokens.h"

namespace nightshift {
namespace {

using nlohmann::json;

constexpr char kManagedBy[] = "app.kubernetes.io/managed-by";
constexpr char kAllocationLabel[] = "nightshift.io/allocation";
// On a Job without a queue: its time limit in seconds, set as its deadline once it runs.
constexpr char kTimeLimitAnnotation[] = "nightshift.io/time-limit-seconds";
constexpr size_t kDeletedKept = 1000;  // deleted Jobs' last states kept for Lookup

const KubernetesPriorityRow* RowFor(int priority, const std::vector<KubernetesPriorityRow>& rows) {
  const KubernetesPriorityRow* row = nullptr;
  for (const auto& r : rows)
    if (r.min_priority <= priority && (row == nullptr || r.min_priority > row->min_priority)) row = &r;
  return row;
}

// "Localhost:<path>" as the API's {type: Localhost, localhostProfile: path}; else {type}.
json SeccompProfile(const std::string& profile) {
  const std::string localhost = "Localhost:";
  if (profile.rfind(localhost, 0) == 0)
    return {{"type", "Localhost"}, {"localhostProfile", profile.substr(localhost.size())}};
  return {{"type", profile}};
}

json PodSpec(const AllocationRequest& r, const KubernetesOptions& o, const std::string& name,
             const KubernetesPriorityRow* row) {
  json requests = json::object(), limits = json::object();
  if (r.cpus_per_node > 0) requests["cpu"] = std::to_string(r.cpus_per_node);
  if (r.memory_gb_per_node > 0) {
    const std::string mem = std::to_string(static_cast<int64_t>(std::ceil(r.memory_gb_per_node * 1024))) + "Mi";
    requests["memory"] = mem;
    limits["memory"] = mem;
  }
  if (r.gpus_per_node > 0) limits["nvidia.com/gpu"] = std::to_string(r.gpus_per_node);
  json mounts = json::array({{{"name", "shm"}, {"mountPath", "/dev/shm"}}});
  json volumes = json::array({{{"name", "shm"}, {"emptyDir", {{"medium", "Memory"}}}}});
  if (!o.checkpoint_claim.empty()) {
    mounts.push_back({{"name", "checkpoints"}, {"mountPath", "/checkpoints"}});
    volumes.push_back({{"name", "checkpoints"}, {"persistentVolumeClaim", {{"claimName", o.checkpoint_claim}}}});
  }
  if (!o.data_claim.empty()) {
    mounts.push_back({{"name", "data"}, {"mountPath", "/data"}, {"readOnly", true}});
    volumes.push_back(
        {{"name", "data"}, {"persistentVolumeClaim", {{"claimName", o.data_claim}, {"readOnly", true}}}});
  }
  if (!o.token_secret.empty()) {
    mounts.push_back({{"name", "token"}, {"mountPath", "/etc/nightshift"}, {"readOnly", true}});
    volumes.push_back({{"name", "token"}, {"secret", {{"secretName", o.token_secret}}}});
  }
  // The allocation the worker says it serves: the coordinator places the attempt only on
  // workers of the allocation it made (under Slurm, $SLURM_JOB_ID).
  std::vector<std::string> command = r.node_command;
  command.insert(command.end(), {"--allocation-id", name});
  json container = {{"name", "worker"},
                    {"image", o.image},
                    {"command", command},
                    {"resources", {{"requests", requests}, {"limits", limits}}},
                    {"volumeMounts", mounts}};
  // From the attempt's own Secret (KubernetesObjects): not in the pod template, which
  // whoever may read Jobs or Pods in the namespace reads.
  if (!r.token.empty())
    container["env"] = json::array(
        {{{"name", kAllocationTokenEnv}, {"valueFrom", {{"secretKeyRef", {{"name", name}, {"key", "token"}}}}}}});
  // Not root, nothing to escalate to: the worker confines its jobs in a user namespace of
  // its own where the runtime's seccomp profile allows one, else runs them as itself (the
  // pod holds one attempt and its token only; docs/security.md).
  container["securityContext"] = {{"allowPrivilegeEscalation", false},
                                  {"capabilities", {{"drop", json::array({"ALL"})}}}};
  json spec = {{"restartPolicy", "Never"},
               {"automountServiceAccountToken", false},  // the pods never call the API (training code runs there)
               {"subdomain", name},  // the headless Service: <job>-<index>.<name> resolves
               {"terminationGracePeriodSeconds", o.termination_grace_seconds},
               {"securityContext",
                {{"runAsNonRoot", true},
                 {"runAsUser", o.run_as_user},
                 {"runAsGroup", o.run_as_user},
                 {"fsGroup", o.run_as_user},
                 // The volume's modes changed only when its root is not the group's yet:
                 // on every mount the kubelet would add group write to each job's
                 // folder, which the worker then refuses (worker/confinement.h).
                 {"fsGroupChangePolicy", "OnRootMismatch"},
                 {"seccompProfile", SeccompProfile(o.seccomp_profile)}}},
               {"containers", json::array({container})},
               {"volumes", volumes}};
  if (row != nullptr && !row->priority_class.empty()) spec["priorityClassName"] = row->priority_class;
  return spec;
}

}  // namespace

std::string KubernetesName(const std::string& job_id, int attempt) {
  std::string name = "nightshift-" + job_id + "-a" + std::to_string(attempt);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return std::isalnum(c) ? static_cast<char>(std::tolower(c)) : '-'; });
  return name;
}

std::vector<json> KubernetesObjects(const AllocationRequest& r, const KubernetesOptions& o) {
  const std::string name = KubernetesName(r.job_id, r.attempt);
  const KubernetesPriorityRow* row = RowFor(r.priority, o.priorities);
  json labels = {{kManagedBy, "nightshift"},
                 {kAllocationLabel, name},
                 {"nightshift.io/job", r.job_id},
                 {"nightshift.io/attempt", std::to_string(r.attempt)}};
  json job_labels = labels;
  const bool queued = row != nullptr && !row->queue.empty();
  if (queued) job_labels["kueue.x-k8s.io/queue-name"] = row->queue;
  std::vector<json> objects;
  if (!r.token.empty())
    objects.push_back({{"apiVersion", "v1"},
                       {"kind", "Secret"},
                       {"metadata", {{"name", name}, {"namespace", o.namespace_name}, {"labels", labels}}},
                       {"type", "Opaque"},
                       {"stringData", {{"token", r.token}}}});
  json service = {{"apiVersion", "v1"},
                  {"kind", "Service"},
                  {"metadata", {{"name", name}, {"namespace", o.namespace_name}, {"labels", labels}}},
                  {"spec",
                   {{"clusterIP", "None"},
                    {"publishNotReadyAddresses", true},
                    {"selector", {{kAllocationLabel, name}}}}}};
  json job_spec = {
      {"completionMode", "Indexed"},
      {"completions", r.nodes},
      {"parallelism", r.nodes},
      {"backoffLimit", 0},
      // The worker's bad-spec exit fails the Job (no retry meets anything else); a pod
      // evicted by a disruption (preemption, a drained node) does not count as a failure.
      {"podFailurePolicy",
       {{"rules",
         json::array({{{"action", "FailJob"},
                       {"onExitCodes",
                        {{"containerName", "worker"}, {"operator", "In"}, {"values", {o.bad_spec_exit_code}}}}},
                      {{"action", "Ignore"},
                       {"onPodConditions", json::array({{{"type", "DisruptionTarget"}, {"status", "True"}}})}}})}}},
      {"template", {{"metadata", {{"labels", labels}}}, {"spec", PodSpec(r, o, name, row)}}}};
  json job_meta = {{"name", name}, {"namespace", o.namespace_name}, {"labels", job_labels}};
  if (queued) job_spec["suspend"] = true;  // Kueue admits it by unsuspending
  // A Job's deadline counts from its start: Kueue's admission (unsuspended, with room for
  // it), else its creation, so without a queue it is set once its pods run (List).
  if (r.time_limit_minutes > 0 && queued) job_spec["activeDeadlineSeconds"] = r.time_limit_minutes * 60;
  if (r.time_limit_minutes > 0 && !queued)
    job_meta["annotations"] = {{kTimeLimitAnnotation, std::to_string(r.time_limit_minutes * 60)}};
  json job = {{"apiVersion", "batch/v1"}, {"kind", "Job"}, {"metadata", job_meta}, {"spec", job_spec}};
  objects.push_back(std::move(service));
  objects.push_back(std::move(job));
  return objects;
}

Allocation AllocationOfJob(const json& job) {
  Allocation a;
  const json& meta = job.value("metadata", json::object());
  a.id = meta.value("name", "");
  const json& labels = meta.value("labels", json::object());
  a.job_id = labels.value("nightshift.io/job", "");
  a.attempt = std::atoi(labels.value("nightshift.io/attempt", "0").c_str());
  const json& status = job.value("status", json::object());
  // Pods still running, and (Kubernetes 1.29+) pods deleted but not yet gone: in their
  // grace period after SIGTERM, writing their checkpoint.
  const int active = status.value("active", 0), ready = status.value("ready", 0),
            terminating = status.value("terminating", 0);
  for (const json& c : status.value("conditions", json::array())) {
    if (c.value("status", "") != "True") continue;
    const std::string type = c.value("type", ""), reason = c.value("reason", "");
    if (type == "Complete") {
      a.phase = Allocation::Phase::kEnded;
      a.state = "Complete";
      return a;
    }
    if (type == "Failed") {
      a.state = "Failed";
      a.reason = reason + (c.contains("message") ? ": " + c.value("message", "") : "");
      if (reason == "DeadlineExceeded") a.end = Allocation::End::kTimeLimit;
      if (reason == "PodFailurePolicy") a.end = Allocation::End::kRefused;
      // Over once its pods are gone (a deadline's SIGTERM is no warning: they checkpoint in
      // their grace period, and the next attempt must resume from that checkpoint).
      if (active + terminating > 0) {
        a.phase = Allocation::Phase::kRunning;
        a.reason += " (" + std::to_string(active + terminating) + " pods stopping)";
        return a;
      }
      a.phase = Allocation::Phase::kEnded;
      return a;
    }
    if (type == "Suspended") {
      a.state = "Suspended";
      a.reason = c.value("message", reason);
      // Kueue took it back: the Job controller deletes its pods, which checkpoint in their
      // grace period. Pending (preempted, if it ran) only once they are gone, as a failed
      // Job above.
      if (active + terminating > 0) {
        a.phase = Allocation::Phase::kRunning;
        a.reason += " (" + std::to_string(active + terminating) + " pods stopping)";
      }
      return a;
    }
  }
  // Pods terminating count too: a Job Kueue admitted again before its last pods were gone
  // (the Suspended condition False) must not be taken for pending, a preemption.
  a.phase = active + terminating > 0 ? Allocation::Phase::kRunning : Allocation::Phase::kPending;
  a.state = active + terminating > 0 ? "Active" : "Pending";
  if (active > 0) a.reason = std::to_string(ready) + " of " + std::to_string(active) + " pods ready";
  if (terminating > 0) a.reason += (a.reason.empty() ? "" : "; ") + std::to_string(terminating) + " pods stopping";
  return a;
}

KubernetesCluster::KubernetesCluster(KubernetesOptions options, HttpApi* api)
    : options_(std::move(options)), api_(api) {}

namespace {

// The API's Status object's message, else the body.
std::string ApiMessage(const HttpResponse& r) {
  const json body = json::parse(r.body, nullptr, false);
  if (body.is_object() && body.contains("message")) return body.value("message", "");
  return r.body.substr(0, 500);
}

Status Refusal(const std::string& what, const HttpResponse& r) {
  const std::string api = ApiMessage(r), message = what + ": HTTP " + std::to_string(r.status) + ": " + api;
  // Malformed, invalid or denied objects (an admission webhook's or policy's 403) are not
  // a retry's business. Two 403s pass, told by the words the API server puts right after
  // "is forbidden: " (a webhook's own text comes later, or after "admission webhook"): a
  // namespace's ResourceQuota ("exceeded quota: ...", or "status unknown for quota: ..."
  // before its usage is counted) clears as other Jobs end, and the authorizer's
  // ("User \"...\" cannot create resource ...") is the coordinator's role to fix.
  const size_t at = api.rfind("admission webhook", 0) == 0 ? std::string::npos : api.find("is forbidden: ");
  const std::string after = at == std::string::npos ? "" : api.substr(at + 14);
  // A namespace being deleted ("unable to create new content in namespace ... because it
  // is being terminated") is the operator's, passing too.
  const bool quota = after.rfind("exceeded quota: ", 0) == 0 || after.rfind("status unknown for quota: ", 0) == 0 ||
                     after.rfind("unable to create new content in namespace ", 0) == 0;
  const bool role = after.rfind("User \"", 0) == 0;
  if (r.status == 403 && role)
    return Status::Unavailable(message + " (the coordinator's role needs create, patch and delete on jobs, services "
                                         "and secrets: apply deploy/kubernetes/rbac.yaml)");
  if (r.status == 400 || r.status == 422 || (r.status == 403 && !quota)) return Status::InvalidArgument(message);
  return Status::Unavailable(message);
}

// Where objects of `kind` (Secret, Service, Job) of the options' namespace are created;
// NAME appended, where one is deleted.
std::string CollectionPath(const KubernetesOptions& o, const std::string& kind) {
  const std::string ns = "/namespaces/" + o.namespace_name;
  if (kind == "Job") return "/apis/batch/v1" + ns + "/jobs";
  return "/api/v1" + ns + (kind == "Service" ? "/services" : "/secrets");
}
}  // namespace

StatusOr<std::string> KubernetesCluster::Submit(const AllocationRequest& request) {
  if (options_.image.empty()) return Status::InvalidArgument("kubernetes: no worker image (--kubernetes-image)");
  const std::string name = KubernetesName(request.job_id, request.attempt);
  std::string job_uid;
  std::vector<std::string> owned_kinds;  // the Secret (with tokens) and the Service, made or adopted
  for (const json& object : KubernetesObjects(request, options_)) {  // the Job last: its pods need the rest
    const std::string kind = object["kind"], path = CollectionPath(options_, kind);
    StatusOr<HttpResponse> r = api_->Call("POST", path, object.dump(), options_.call_timeout_seconds);
    if (!r.ok()) return Refused(name, r.status());  // unanswered: the Job may exist; kept for the retry
    if (r->status == 409 && kind != "Job") r->status = 200;  // made before (a retry, a restart): adopted
    if (kind == "Job" && r->status != 201 && r->status < 500) {
      // Made before (409), or refused again though it exists (admission, a quota's 403,
      // comes before the store finds it does): a Job that exists is adopted. A GET that
      // cannot tell decides nothing.
      StatusOr<HttpResponse> got = api_->Call("GET", path + "/" + name, "", options_.call_timeout_seconds);
      if (!got.ok()) return Refused(name, got.status());
      if (got->status == 200) r = got;
      if (got->status != 200 && (got->status != 404 || r->status == 409))
        return Refused(name, Status::Unavailable("reading " + path + "/" + name + ": HTTP " + std::to_string(got->status)));
    }
    if (r->status != 201 && r->status != 200) return Refused(name, Refusal("creating " + path, *r));
    if (kind != "Job") {
      owned_kinds.push_back(kind);
      auto left = leftovers_.find(name);  // this attempt's now: not deleted as a cancelled one's
      if (left != leftovers_.end() && left->second.erase(kind) && left->second.empty()) leftovers_.erase(left);
      leftover_warned_.erase(kind + " " + name);
      continue;
    }
    deleted_.erase(name);  // an earlier copy's deletion is not this one's
    job_uid = json::parse(r->body, nullptr, false).value("metadata", json::object()).value("uid", "");
  }
  refused_.erase(name);
  // The Secret and Service become the Job's (ownerReferences): Kubernetes' garbage
  // collector deletes them with it, whoever deletes it (a person, or after a coordinator
  // that never came back); Cancel deletes them anyway. The Job runs either way, and once
  // it is listed it is followed, never submitted again: a failed patch is tried again at
  // the next List.
  for (const std::string& kind : owned_kinds)
    if (!OwnByJob(name, job_uid, kind)) unowned_[name].insert(kind);
  return name;
}

Status KubernetesCluster::Refused(const std::string& name, const Status& refused) {
  if (refused.code() == Status::kInvalidArgument) {  // for good: what the attempt made goes
    refused_.erase(name);
    DeleteServiceAndSecret(name);
  } else {
    // Passing (a quota, the role, a 5xx after which the Job may exist): kept for the retry,
    // which adopts them (no churn of writes each pass); deleted by List once no retry
    // came for a while (the job held or cancelled meanwhile).
    refused_[name] = std::chrono::steady_clock::now();
  }
  return refused;
}

bool KubernetesCluster::OwnByJob(const std::string& name, const std::string& uid, const std::string& kind) {
  const std::string path = CollectionPath(options_, kind) + "/" + name;
  const json owned = {
      {"metadata", {{"ownerReferences", {{{"apiVersion", "batch/v1"}, {"kind", "Job"}, {"name", name}, {"uid", uid}}}}}}};
  StatusOr<HttpResponse> r = uid.empty() ? StatusOr<HttpResponse>(Status::Unavailable("the Job has no metadata.uid"))
                                         : api_->Call("PATCH", path, owned.dump(), options_.call_timeout_seconds);
  if (r.ok() && (r->status == 200 || r->status == 404)) {
    if (unowned_.count(name)) NS_INFO("kubernetes: " << path << " is owned by its Job now");
    return true;
  }
  if (!unowned_.count(name) || !unowned_[name].count(kind))  // once, not at every List
    NS_WARN("kubernetes: " << path << " is not owned by its Job yet (deleted with the attempt only until it is): "
                           << (r.ok() ? "HTTP " + std::to_string(r->status) + ": " + ApiMessage(*r) : r.status().ToString())
                           << (r.ok() && r->status == 403 ? " (apply deploy/kubernetes/rbac.yaml)" : ""));
  return false;
}

namespace {
// DELETEs `path`; gone already (404) is done.
Status DeleteObject(HttpApi* api, const std::string& path, double timeout_seconds) {
  StatusOr<HttpResponse> r = api->Call("DELETE", path, "", timeout_seconds);
  if (!r.ok()) return r.status();
  if (r->status != 200 && r->status != 202 && r->status != 404) return Refusal("deleting " + path, *r);
  return Status::OK();
}
}  // namespace

Status KubernetesCluster::Cancel(const std::string& id) {
  // The Job first: its pods stop whatever else fails. Its Service and Secret (which the
  // garbage collector takes with it once they are its own) are deleted here too, and
  // again at each List until they are gone (once the Job is, nothing lists them).
  NS_RETURN_IF_ERROR(DeleteObject(api_, CollectionPath(options_, "Job") + "/" + id + "?propagationPolicy=Background",
                                  options_.call_timeout_seconds));
  unowned_.erase(id);
  DeleteServiceAndSecret(id);
  return Status::OK();
}

void KubernetesCluster::DeleteServiceAndSecret(const std::string& id) {
  leftovers_[id] = {"Service", "Secret"};
  DeleteLeftovers(id);
}

void KubernetesCluster::DeleteLeftovers(const std::string& id) {
  std::set<std::string>& kinds = leftovers_[id];
  for (auto kind = kinds.begin(); kind != kinds.end();) {
    const Status s = DeleteObject(api_, CollectionPath(options_, *kind) + "/" + id, options_.call_timeout_seconds);
    if (!s.ok() && leftover_warned_.insert(*kind + " " + id).second)
      NS_WARN("kubernetes: the " << *kind << " of ended attempt " << id << " is not deleted yet (again at each list): "
                                 << s.ToString());
    if (s.ok()) leftover_warned_.erase(*kind + " " + id);
    kind = s.ok() ? kinds.erase(kind) : std::next(kind);
  }
  if (kinds.empty()) leftovers_.erase(id);
}

namespace {
// The objects of `kind` (Job, Service, Secret) labelled as ours, in the options' namespace.
std::string ListPath(const KubernetesOptions& o, const std::string& kind) {
  return CollectionPath(o, kind) + "?labelSelector=" + kManagedBy + "%3Dnightshift";
}
}  // namespace

namespace {

// Labelled as ours, and named as we name the Job of the attempt its labels say: anyone who
// may make Jobs in the namespace could label one so, and it is then never followed,
// cancelled, looked up, nor made the owner of a Secret or Service of ours.
bool NamedAsOurs(const json& job) {
  const Allocation a = AllocationOfJob(job);
  return !a.job_id.empty() && a.id == KubernetesName(a.job_id, a.attempt);
}

}  // namespace

Status KubernetesCluster::Relist() {
  StatusOr<HttpResponse> r = api_->Call("GET", ListPath(options_, "Job"), "", options_.call_timeout_seconds);
  if (!r.ok()) return r.status();
  if (r->status != 200) return Status::Unavailable("listing jobs: HTTP " + std::to_string(r->status) + ": " + ApiMessage(*r));
  const json list = json::parse(r->body, nullptr, false);
  if (!list.is_object() || !list.contains("items")) return Status::Unavailable("listing jobs: not a list");
  jobs_.clear();
  for (const json& item : list["items"])
    if (NamedAsOurs(item)) jobs_[item["metadata"].value("name", "")] = item;
  resource_version_ = list["metadata"].value("resourceVersion", "");
  return Status::OK();
}

// One watch from resource_version_, for options_.watch_seconds: each event applied.
Status KubernetesCluster::Watch() {
  const int seconds = std::max(1, static_cast<int>(options_.watch_seconds));
  StatusOr<HttpResponse> r =
      api_->Call("GET", ListPath(options_, "Job") + "&watch=1&allowWatchBookmarks=true&resourceVersion=" + resource_version_ +
                            "&timeoutSeconds=" + std::to_string(seconds),
                 "", options_.call_timeout_seconds + seconds);
  if (!r.ok()) return r.status();
  if (r->status == 410) return Relist();  // the version is gone: start again from a list
  if (r->status != 200) return Status::Unavailable("watching jobs: HTTP " + std::to_string(r->status));
  std::istringstream lines(r->body);
  for (std::string line; std::getline(lines, line);) {
    const json event = json::parse(line, nullptr, false);
    if (!event.is_object()) continue;  // a line cut by the timeout
    const std::string type = event.value("type", "");
    const json& object = event.value("object", json::object());
    if (type == "ERROR") {
      if (object.value("code", 0) == 410) return Relist();
      return Status::Unavailable("watching jobs: " + object.value("message", line));
    }
    const std::string name = object.value("metadata", json::object()).value("name", "");
    if (type == "ADDED" || type == "MODIFIED") {
      if (NamedAsOurs(object)) jobs_[name] = object;
      else jobs_.erase(name);  // relabelled: no longer ours
    }
    if (type == "DELETED" && (NamedAsOurs(object) || jobs_.count(name))) {
      jobs_.erase(name);
      if (deleted_.size() >= kDeletedKept) deleted_.erase(deleted_.begin());
      deleted_[name] = object;
    }
    const std::string version = object.value("metadata", json::object()).value("resourceVersion", "");
    if (!version.empty()) resource_version_ = version;  // BOOKMARK events carry only this
  }
  return Status::OK();
}

StatusOr<std::vector<Allocation>> KubernetesCluster::List() {
  Status s = resource_version_.empty() ? Relist() : Watch();
  if (!s.ok()) {
    resource_version_.clear();  // list again next time
    return s;
  }
  // The first list of this process: a patch that failed before a restart was forgotten
  // with it, so every listed Job's Secret and Service is patched once (the patch is the
  // same each time; a Secret that is not there, without tokens, is a 404: done).
  if (!owners_checked_) {
    owners_checked_ = true;
    for (const auto& [name, job] : jobs_) unowned_[name].insert({"Secret", "Service"});
    if (!jobs_.empty()) NS_INFO("kubernetes: making sure the Secrets and Services of " << jobs_.size() << " listed Jobs are theirs");
    DeleteOrphans();  // into leftovers_, deleted below
  }
  // Secrets and Services whose ownerReferences patch failed: again while their Job is listed.
  for (auto it = unowned_.begin(); it != unowned_.end();) {
    auto job = jobs_.find(it->first);
    if (job != jobs_.end()) {
      const std::string uid = job->second.value("metadata", json::object()).value("uid", "");
      for (auto kind = it->second.begin(); kind != it->second.end();)
        kind = OwnByJob(it->first, uid, *kind) ? it->second.erase(kind) : std::next(kind);
    }
    it = it->second.empty() ? unowned_.erase(it) : std::next(it);
  }
  const auto now = std::chrono::steady_clock::now();
  for (auto it = refused_.begin(); it != refused_.end();) {  // refusals no retry followed
    const std::string id = it->first;
    const bool over = now - it->second >= std::chrono::duration<double>(options_.refused_kept_seconds);
    if (!jobs_.count(id) && !over) {
      ++it;
      continue;
    }
    it = refused_.erase(it);
    if (jobs_.count(id)) {  // its Job exists after all (a 5xx that made it): followed, and
      unowned_[id].insert({"Secret", "Service"});  // its Secret and Service made its own (next List)
      continue;
    }
    DeleteServiceAndSecret(id);
  }
  for (auto it = leftovers_.begin(); it != leftovers_.end();) {
    const std::string id = (it++)->first;  // DeleteLeftovers may erase it
    DeleteLeftovers(id);
  }
  for (auto it = deadline_warned_.begin(); it != deadline_warned_.end();)  // Jobs no longer listed: forgotten
    it = jobs_.count(*it) ? std::next(it) : deadline_warned_.erase(it);
  std::vector<Allocation> allocations;
  for (auto& [name, job] : jobs_) {
    StartDeadline(&job);
    allocations.push_back(AllocationOfJob(job));
  }
  return allocations;
}

void KubernetesCluster::DeleteOrphans() {
  // Invariant: a Secret or Service is deleted here only when it is labelled and named as
  // ours, no Job owns it, this process keeps it for no retry (refused_), and its attempt
  // has no Job: none listed, and a GET of the Job's name answered 404 (one relabelled or
  // made since counts as there). No Start of this process comes before its first List
  // (Provisioner::Pass lists first) and one coordinator runs at a time, so no Job is on
  // its way for such an attempt: its Secret and Service were left by a Submit refused,
  // cancelled or cut short before a restart, which forgot them (refused_, leftovers_).
  for (const std::string kind : {"Secret", "Service"}) {
    const std::string path = ListPath(options_, kind);
    StatusOr<HttpResponse> r = api_->Call("GET", path, "", options_.call_timeout_seconds);
    const json list = r.ok() && r->status == 200 ? json::parse(r->body, nullptr, false) : json();
    if (!list.is_object() || !list.contains("items")) {  // tried again at the next restart
      NS_WARN("kubernetes: " << path << ": not listed, so those of Jobs never made are not deleted: "
                             << (r.ok() ? "HTTP " + std::to_string(r->status) + ": " + ApiMessage(*r) : r.status().ToString())
                             << (r.ok() && r->status == 403
                                     ? " (the role needs list on services and secrets: apply deploy/kubernetes/rbac.yaml)"
                                     : ""));
      continue;
    }
    for (const json& item : list["items"]) {
      const json& meta = item.value("metadata", json::object());
      const std::string name = meta.value("name", "");
      bool owned = false;  // by a Job: the garbage collector's
      for (const json& owner : meta.value("ownerReferences", json::array())) owned |= owner.value("kind", "") == "Job";
      if (owned || meta.value("labels", json::object()).value(kManagedBy, "") != "nightshift" || !NamedAsOurs(item) ||
          jobs_.count(name) || refused_.count(name))
        continue;
      StatusOr<HttpResponse> job =
          api_->Call("GET", CollectionPath(options_, "Job") + "/" + name, "", options_.call_timeout_seconds);
      if (!job.ok() || job->status != 404) continue;  // its Job is there, or no telling: kept
      NS_INFO("kubernetes: deleting " << kind << " " << name << ", left by an attempt whose Job was never made");
      leftovers_[name].insert(kind);  // deleted (404: gone already) at this List and each after until it is
    }
  }
}

void KubernetesCluster::StartDeadline(json* job) {
  const json& meta = job->value("metadata", json::object());
  const std::string limit = meta.value("annotations", json::object()).value(kTimeLimitAnnotation, "");
  const json& spec = job->value("spec", json::object());
  const json& status = job->value("status", json::object());
  if (limit.empty() || spec.contains("activeDeadlineSeconds") || !status.contains("startTime") ||
      status.value("ready", 0) < spec.value("parallelism", 1))
    return;
  google::protobuf::Timestamp start;
  if (!google::protobuf::util::TimeUtil::FromString(status.value("startTime", ""), &start)) return;
  const int64_t deadline = static_cast<int64_t>(std::ceil(std::max(0.0, SecondsSince(start, std::chrono::system_clock::now())))) +
                           std::atoll(limit.c_str());
  const std::string path = CollectionPath(options_, "Job") + "/" + meta.value("name", "");
  const json patch = {{"spec", {{"activeDeadlineSeconds", deadline}}}};
  StatusOr<HttpResponse> r = api_->Call("PATCH", path, patch.dump(), options_.call_timeout_seconds);
  const json patched = r.ok() && r->status == 200 ? json::parse(r->body, nullptr, false) : json();
  if (!patched.is_object()) {  // tried again at the next List; said once
    if (deadline_warned_.insert(meta.value("name", "")).second)
      NS_WARN("kubernetes: " << path << ": its time limit not started (tried again at each list): "
                             << (r.ok() ? "HTTP " + std::to_string(r->status) + ": " + ApiMessage(*r) : r.status().ToString())
                             << (r.ok() && r->status == 403 ? " (the role needs patch on jobs: apply deploy/kubernetes/rbac.yaml)" : ""));
    return;
  }
  deadline_warned_.erase(meta.value("name", ""));
  NS_INFO("kubernetes: " << path << " runs: its deadline is " << deadline << " s from its start");
  *job = patched;
}

StatusOr<Allocation> KubernetesCluster::Lookup(const std::string& id) {
  auto gone = deleted_.find(id);
  if (gone != deleted_.end()) {  // deleted: over, however its last state read
    Allocation a = AllocationOfJob(gone->second);
    deleted_.erase(gone);
    if (a.phase != Allocation::Phase::kEnded) {  // deleted while it ran or waited (a person's kubectl)
      a.phase = Allocation::Phase::kEnded;  // a.end as its state said: a deadline's failure still stopping stays one
      a.reason = "the Job was deleted, not by the coordinator (last " + a.state + (a.reason.empty() ? "" : ": " + a.reason) + ")";
      a.state = "Deleted";
    }
    return a;
  }
  const std::string path = CollectionPath(options_, "Job") + "/" + id;
  StatusOr<HttpResponse> r = api_->Call("GET", path, "", options_.call_timeout_seconds);
  if (!r.ok()) return Status::Unavailable("reading " + path + ": " + r.status().message());
  if (r->status == 404) return Status::NotFound("no Job " + id + " (deleted, not by the coordinator)");
  const json job = r->status == 200 ? json::parse(r->body, nullptr, false) : json();
  if (!job.is_object()) return Status::Unavailable("reading " + path + ": HTTP " + std::to_string(r->status));
  return AllocationOfJob(job);
}

std::unique_ptr<HttpApi> MakeKubernetesApi(const KubernetesOptions& options) {
  HttpApiOptions http;
  http.base = options.api;
  http.token_file = options.token_file;
  http.ca_file = options.ca_file;
  return MakeCurlHttpApi(http);
}

}  // namespace nightshift
