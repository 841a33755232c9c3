// Kubernetes as the cluster under the coordinator (--cluster kubernetes, issue 44): each
// attempt of a job becomes an Indexed batch/v1 Job of its nodes (one pod per node, each
// running the in-allocation worker), a headless Service, so the pods have names, and a
// Secret holding the attempt's worker token (when the coordinator has tokens);
// Kubernetes' scheduler, Kueue's quotas and PriorityClasses decide when it runs. Talks
// to the API server over HTTP(S) with the service account's token (HttpApi, libcurl),
// lists the Jobs it made and follows them with a watch from the list's resourceVersion
// (410 Gone: listed again).
//
// Tested against the schemas of Kubernetes 1.30-1.37 (kubernetes-validate) and a fake API
// server (tests/support/fake_kube_api.py); no real cluster, kube-scheduler, Kueue or GPU
// device plugin has run it (docs/operating.md says how to try it on one).
#ifndef NIGHTSHIFT_COORDINATOR_KUBERNETES_H_
#define NIGHTSHIFT_COORDINATOR_KUBERNETES_H_

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "coordinator/cluster_allocator.h"
#include "coordinator/http_api.h"

namespace nightshift {

// The operator's table from a job's priority to a PriorityClass and a Kueue LocalQueue:
// the row with the largest min_priority at or below the job's applies.
struct KubernetesPriorityRow {
  int min_priority = 0;
  std::string priority_class, queue;  // empty: not set
};

struct KubernetesOptions {
  std::string api = "https://kubernetes.default.svc";  // the API server
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";  // "": none
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";    // "": the system's
  std::string namespace_name = "nightshift";
  std::string image;                 // the worker image (required)
  std::string checkpoint_claim;      // a ReadWriteMany PVC mounted at /checkpoints ("": none)
  std::string data_claim;            // a PVC mounted read-only at /data ("": none)
  std::string token_secret;          // a Secret with key `worker-token`, at /etc/nightshift ("": none)
  int termination_grace_seconds = 300;  // SIGTERM, then this long to checkpoint
  // The pods run the worker as this user and group (the images' `nightshift`), never as
  // root, with no capabilities (Pod Security's "restricted"); fsGroup too, so volumes that
  // support it are made writable by the group. A checkpoint claim that does not (NFS)
  // must be writable by this id.
  int run_as_user = 10001;
  // The pods' seccomp profile: RuntimeDefault, Unconfined or Localhost:<path on the node>.
  // containerd's and Docker's defaults refuse the worker the user namespace it confines
  // its jobs in (unshare without CAP_SYS_ADMIN); a Localhost profile that allows it (as
  // podman's default does) keeps Pod Security's "restricted" (docs/security.md).
  std::string seccomp_profile = "RuntimeDefault";
  int bad_spec_exit_code = 2;        // the worker's exit when it refuses its flags (and only then): fails the Job
  std::vector<KubernetesPriorityRow> priorities;
  double call_timeout_seconds = 30;
  double watch_seconds = 1;          // each List follows the watch this long
  // What a passing refusal (a quota, the role) left is kept for the retry, and deleted
  // once no retry of it came this long (the provisioner asks each pass while it wants it).
  double refused_kept_seconds = 60;
};

// The allocation's name (Job, Service and Secret): "nightshift-<job>-a<attempt>", lower case.
std::string KubernetesName(const std::string& job_id, int attempt);

// The objects of one allocation in the order they are created: [Secret (with a token:
// key `token`, which the pods' NIGHTSHIFT_ALLOCATION_TOKEN reads), Service, Job], as the
// API takes them. Cancel deletes all three.
std::vector<nlohmann::json> KubernetesObjects(const AllocationRequest& request, const KubernetesOptions& options);

// The API server over libcurl: options.api, with options.token_file and options.ca_file.
std::unique_ptr<HttpApi> MakeKubernetesApi(const KubernetesOptions& options);

class KubernetesCluster : public ClusterAllocator {
 public:
  KubernetesCluster(KubernetesOptions options, HttpApi* api);  // api not owned
  const char* name() const override { return "kubernetes"; }
  bool KeepsEndedAllocations() const override { return true; }
  // Creates the Secret, the Service and the Job (KubernetesObjects); one that exists
  // already (409; a Job refused again though it exists, by a quota's admission) is
  // adopted. The API's refusal of the objects (400, 422, a webhook's 403) is
  // INVALID_ARGUMENT with its message, and what the attempt made is deleted; a
  // namespace's quota (403 "exceeded quota"), the coordinator's role (RBAC's 403) and any
  // other answer are UNAVAILABLE, retried, what was made kept for the retry (deleted by
  // List once none came for refused_kept_seconds). Then the Secret and the
  // Service are patched to be owned by the Job (ownerReferences with its uid), so that
  // Kubernetes deletes them with it; a failed patch does not fail the submission (the Job
  // runs; Cancel still deletes them): it is tried again at each List while the Job is
  // listed, and, after a coordinator's restart (which forgets which failed), once for
  // every Job of the first List.
  StatusOr<std::string> Submit(const AllocationRequest& request) override;
  // Deletes the Job (its pods get SIGTERM and the grace period), then its Service and
  // Secret: an error only when the Job could not be deleted (tried again while it is
  // listed); those two are deleted again at each List until they are gone.
  Status Cancel(const std::string& id) override;
  // Our Jobs: listed once, then followed with a watch from the last resourceVersion;
  // a 410 (the version is gone) lists again. A Job with a time limit and no queue gets
  // its deadline once all its pods are ready (activeDeadlineSeconds counts from the Job's
  // start, which without Kueue is its creation: the wait for nodes would count): PATCHed
  // to the time since its start plus the limit (nightshift.io/time-limit-seconds).
  // The first that lists also deletes the Secrets and Services of ours whose Job was never
  // made, which a restart forgot (DeleteOrphans).
  StatusOr<std::vector<Allocation>> List() override;
  // A Job the list does not show (the watch behind, deleted): as its deletion's event
  // last showed it (ended however it read: deleted is over), else as the API has it now;
  // NOT_FOUND when neither has it.
  StatusOr<Allocation> Lookup(const std::string& id) override;

 private:
  Status Relist();
  Status Watch();
  // PATCHes `kind`'s object of attempt `name` to be owned by the Job of uid `uid`; true
  // when it is (or is gone), else logged once per attempt and kind.
  bool OwnByJob(const std::string& name, const std::string& uid, const std::string& kind);
  // Starts the time limit of `job` (in jobs_) once its pods are all ready (List).
  void StartDeadline(nlohmann::json* job);
  // Deletes attempt `id`'s Service and Secret, and again at each List until both are gone.
  void DeleteServiceAndSecret(const std::string& id);
  // Deletes what of attempt `id`'s Service and Secret is left (leftovers_).
  void DeleteLeftovers(const std::string& id);
  // The first List's: the Secrets and Services labelled as ours that no Job owns and whose
  // attempt has no Job (what a Submit refused or cancelled before a restart left) become
  // leftovers_. A failed listing is logged, not an error (tried again at the next restart).
  void DeleteOrphans();
  // After the API refused attempt `name`'s objects (`refused`, returned): for good, what
  // it made is deleted; passing, it is kept in refused_ for the retry.
  Status Refused(const std::string& name, const Status& refused);
  // The attempts whose Secret or Service is not owned yet, and those kinds (Submit);
  // tried again while their Job is listed, forgotten when owned or cancelled.
  std::map<std::string, std::set<std::string>> unowned_;
  bool owners_checked_ = false;  // the first List filled unowned_ with every listed Job's
  const KubernetesOptions options_;
  HttpApi* const api_;
  std::map<std::string, nlohmann::json> jobs_;  // by name, as last seen
  // Jobs the watch saw deleted, as last seen (how they ended: Lookup), until looked up;
  // at most kDeletedKept (ours, cancelled, are never looked up: the first by name go).
  std::map<std::string, nlohmann::json> deleted_;
  // Attempts' kinds (Service, Secret) not deleted yet (cancelled, refused for good, or
  // refused with no retry since, or found by DeleteOrphans); in memory only: after a
  // coordinator restart those no Job owns are found again by its first List's DeleteOrphans.
  std::map<std::string, std::set<std::string>> leftovers_;
  std::set<std::string> deadline_warned_;  // Jobs whose deadline patch failed (said once)
  std::set<std::string> leftover_warned_;  // "KIND ID" of leftovers whose delete failed (said once)
  // Attempts whose creation a passing refusal stopped, and when (options_.refused_kept_seconds).
  std::map<std::string, std::chrono::steady_clock::time_point> refused_;
  std::string resource_version_;                // "" : list first
};

// A Job as an allocation: Complete -> ended; Failed -> ended once no pod is active or
// terminating (status.terminating, Kubernetes 1.29+; running until then: pods deleted at a
// deadline checkpoint in their grace period) (DeadlineExceeded: its time limit; PodFailurePolicy: refused, the bad-spec exit code); Suspended (Kueue has
// not admitted it, or took it back) -> pending with the condition's message once no pod is
// active or terminating (running until then: the pods checkpoint in their grace period);
// pods active -> running; else pending.
Allocation AllocationOfJob(const nlohmann::json& job);

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_KUBERNETES_H_
