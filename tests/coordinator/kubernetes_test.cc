// coordinator/kubernetes.h: the objects of an allocation checked against the schemas of
// Kubernetes 1.30 to 1.37 (kubernetes-validate, strict: no field a version lacks), a Job's
// status read as an allocation, and KubernetesCluster through libcurl against a fake API
// server (tests/support/fake_kube_api.py): create, 409 adopted, 422 refused, a watch
// that follows changes, a resourceVersion gap (410) listed again, delete and 404, and what
// a restart left of attempts whose Job was never made deleted by its first list.
#include "coordinator/kubernetes.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/command.h"

namespace nightshift {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

AllocationRequest Request() {
  AllocationRequest r;
  r.job_id = "j-000007";
  r.attempt = 3;
  r.priority = 50;
  r.nodes = 2;
  r.gpus_per_node = 8;
  r.cpus_per_node = 8;
  r.memory_gb_per_node = 64;
  r.time_limit_minutes = 120;
  r.node_command = {"nightshift-worker", "--work-dir=/var/lib/nightshift", "--coordinator",
                    "nightshift-coordinator:7070", "--allocation-job", "j-000007", "--allocation-attempt", "3"};
  r.token = "allocation:j-000007:3:" + std::string(64, 'e');
  return r;
}

KubernetesOptions Options() {
  KubernetesOptions o;
  o.namespace_name = "ml";
  o.image = "localhost/nightshift-worker:0.44";
  o.checkpoint_claim = "nightshift-checkpoints";
  o.data_claim = "nightshift-data";
  o.token_secret = "nightshift-worker-token";
  o.priorities = {{0, "", "batch"}, {50, "high-priority", "urgent"}};
  return o;
}

TEST(KubernetesTest, TheObjectsAreAnIndexedJobAHeadlessServiceAndTheTokensSecret) {
  const std::vector<json> objects = KubernetesObjects(Request(), Options());
  ASSERT_EQ(objects.size(), 3u);
  const json& secret = objects[0];  // made first: the Job's pods read it
  const json& service = objects[1];
  const json& job = objects[2];
  EXPECT_EQ(secret["kind"], "Secret");
  EXPECT_EQ(secret["metadata"]["name"], "nightshift-j-000007-a3");
  EXPECT_EQ(secret["stringData"]["token"], Request().token);
  EXPECT_EQ(service["spec"]["clusterIP"], "None");
  EXPECT_EQ(service["metadata"]["name"], "nightshift-j-000007-a3");
  const json& spec = job["spec"];
  EXPECT_EQ(spec["completionMode"], "Indexed");
  EXPECT_EQ(spec["completions"], 2);
  EXPECT_EQ(spec["parallelism"], 2);
  EXPECT_EQ(spec["backoffLimit"], 0);
  EXPECT_EQ(spec["suspend"], true);  // Kueue admits it
  EXPECT_EQ(job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "urgent");
  EXPECT_EQ(spec["activeDeadlineSeconds"], 7200);  // from Kueue's admission
  const json& rules = spec["podFailurePolicy"]["rules"];
  EXPECT_EQ(rules[0]["action"], "FailJob");
  EXPECT_EQ(rules[0]["onExitCodes"]["values"], json::array({2}));
  EXPECT_EQ(rules[1]["action"], "Ignore");
  EXPECT_EQ(rules[1]["onPodConditions"][0]["type"], "DisruptionTarget");
  const json& pod = spec["template"]["spec"];
  EXPECT_EQ(pod["restartPolicy"], "Never");
  EXPECT_EQ(pod["automountServiceAccountToken"], false);  // no API token where training code runs
  EXPECT_EQ(pod["subdomain"], "nightshift-j-000007-a3");
  EXPECT_EQ(pod["priorityClassName"], "high-priority");
  EXPECT_EQ(pod["terminationGracePeriodSeconds"], 300);
  const json& container = pod["containers"][0];
  // The worker says which allocation it serves: the Job (the coordinator places the
  // attempt on its workers only).
  std::vector<std::string> command = Request().node_command;
  command.insert(command.end(), {"--allocation-id", "nightshift-j-000007-a3"});
  EXPECT_EQ(container["command"], json(command));
  // The attempt's token in its environment (allocation_tokens.h), from the Secret: not in
  // the Job (whoever may read Jobs reads it), nor in the command.
  EXPECT_EQ(container["env"],
            json::array({{{"name", "NIGHTSHIFT_ALLOCATION_TOKEN"},
                          {"valueFrom", {{"secretKeyRef", {{"name", "nightshift-j-000007-a3"}, {"key", "token"}}}}}}}));
  EXPECT_EQ(job.dump().find(Request().token), std::string::npos);
  EXPECT_EQ(container["resources"]["limits"]["nvidia.com/gpu"], "8");
  EXPECT_EQ(container["resources"]["requests"]["memory"], "65536Mi");
  EXPECT_EQ(container["volumeMounts"][0]["mountPath"], "/dev/shm");
  EXPECT_EQ(pod["volumes"][0]["emptyDir"]["medium"], "Memory");
  // Not root and no capabilities (the pods of Pod Security's "restricted" profile):
  // tests/deploy/kube_play_test.py runs such a pod from the worker image.
  EXPECT_EQ(pod["securityContext"]["runAsNonRoot"], true);
  EXPECT_EQ(pod["securityContext"]["runAsUser"], 10001);
  EXPECT_EQ(pod["securityContext"]["fsGroup"], 10001);
  EXPECT_EQ(container["securityContext"]["allowPrivilegeEscalation"], false);
  EXPECT_EQ(container["securityContext"]["capabilities"]["drop"], json::array({"ALL"}));
  EXPECT_EQ(pod["securityContext"]["seccompProfile"], json({{"type", "RuntimeDefault"}}));
  KubernetesOptions localhost = Options();
  localhost.seccomp_profile = "Localhost:profiles/nightshift-worker.json";
  EXPECT_EQ(KubernetesObjects(Request(), localhost)[2]["spec"]["template"]["spec"]["securityContext"]["seccompProfile"],
            json({{"type", "Localhost"}, {"localhostProfile", "profiles/nightshift-worker.json"}}));
  // Without a queue: not suspended, no label; the Job starts when it is made, so its
  // deadline waits for its pods (List), the limit in an annotation.
  KubernetesOptions plain = Options();
  plain.priorities.clear();
  const json unqueued = KubernetesObjects(Request(), plain)[2];
  EXPECT_FALSE(unqueued["spec"].contains("suspend"));
  EXPECT_FALSE(unqueued["metadata"]["labels"].contains("kueue.x-k8s.io/queue-name"));
  EXPECT_FALSE(unqueued["spec"].contains("activeDeadlineSeconds"));
  EXPECT_EQ(unqueued["metadata"]["annotations"]["nightshift.io/time-limit-seconds"], "7200");
  // Without tokens (no --token-file): no Secret, no env.
  AllocationRequest tokenless = Request();
  tokenless.token.clear();
  const std::vector<json> plain_objects = KubernetesObjects(tokenless, plain);
  ASSERT_EQ(plain_objects.size(), 2u);
  EXPECT_EQ(plain_objects[0]["kind"], "Service");
  EXPECT_FALSE(plain_objects[1]["spec"]["template"]["spec"]["containers"][0].contains("env"));
}

// kubernetes-validate --strict for every minor version from 1.30 to 1.37.
TEST(KubernetesTest, TheObjectsValidateAgainstKubernetes130To137) {
  const fs::path file = fs::temp_directory_path() / ("nightshift-k8s-" + std::to_string(::getpid()) + ".json");
  json list = {{"apiVersion", "v1"}, {"kind", "List"}, {"items", KubernetesObjects(Request(), Options())}};
  {
    KubernetesOptions plain = Options();
    plain.priorities.clear();
    for (const json& o : KubernetesObjects(Request(), plain)) list["items"].push_back(o);
  }
  SubprocessRunner runner;
  for (const json& object : list["items"]) {
    std::ofstream(file) << object.dump(1);
    for (int minor = 30; minor <= 37; ++minor) {
      const std::string version = "1." + std::to_string(minor) + ".0";
      StatusOr<CommandResult> r = runner.Run(
          {NIGHTSHIFT_PYTHON, "-m", "kubernetes_validate", "--strict", "-k", version, file.string()}, "", {}, 120);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(r->exit_code, 0) << object["kind"] << " against " << version << ":\n" << r->out << r->err;
    }
  }
  fs::remove(file);
}

json JobWithStatus(const json& status) {
  return {{"metadata",
           {{"name", "nightshift-j-000007-a3"},
            {"labels", {{"nightshift.io/job", "j-000007"}, {"nightshift.io/attempt", "3"}}}}},
          {"status", status}};
}

TEST(KubernetesTest, AJobsStatusIsReadAsAnAllocation) {
  Allocation a = AllocationOfJob(JobWithStatus(json::object()));
  EXPECT_EQ(a.id, "nightshift-j-000007-a3");
  EXPECT_EQ(a.job_id, "j-000007");
  EXPECT_EQ(a.attempt, 3);
  EXPECT_EQ(a.phase, Allocation::Phase::kPending);
  a = AllocationOfJob(JobWithStatus({{"conditions", {{{"type", "Suspended"}, {"status", "True"}, {"reason", "JobSuspended"},
                                                      {"message", "Not admitted by cluster queue"}}}}}));
  EXPECT_EQ(a.phase, Allocation::Phase::kPending);
  EXPECT_EQ(a.state, "Suspended");
  EXPECT_EQ(a.reason, "Not admitted by cluster queue");
  // Suspended while it ran (Kueue preempts it): its pods are deleted and checkpoint in their
  // grace period; the allocation goes back to pending (a preemption) only once they are gone.
  for (const char* count : {"terminating", "active"}) {
    a = AllocationOfJob(JobWithStatus({{"conditions", {{{"type", "Suspended"}, {"status", "True"}, {"reason", "JobSuspended"}}}},
                                       {count, 2}}));
    EXPECT_EQ(a.phase, Allocation::Phase::kRunning) << count;
    EXPECT_NE(a.reason.find("2 pods stopping"), std::string::npos) << a.reason;
  }
  // ...and when Kueue admits it again before they are gone (the condition False).
  a = AllocationOfJob(JobWithStatus({{"conditions", {{{"type", "Suspended"}, {"status", "False"}}}}, {"terminating", 2}}));
  EXPECT_EQ(a.phase, Allocation::Phase::kRunning);
  EXPECT_EQ(a.reason, "2 pods stopping");
  a = AllocationOfJob(JobWithStatus({{"active", 2}, {"ready", 1}}));
  EXPECT_EQ(a.phase, Allocation::Phase::kRunning);
  EXPECT_EQ(a.reason, "1 of 2 pods ready");
  a = AllocationOfJob(JobWithStatus({{"conditions", {{{"type", "Complete"}, {"status", "True"}}}}}));
  EXPECT_EQ(a.phase, Allocation::Phase::kEnded);
  EXPECT_EQ(a.end, Allocation::End::kDone);
  a = AllocationOfJob(JobWithStatus({{"conditions", {{{"type", "Failed"}, {"status", "True"}, {"reason", "PodFailurePolicy"},
                                                      {"message", "Container worker for pod ml/x-0 failed with exit code 2"}}}}}));
  EXPECT_EQ(a.end, Allocation::End::kRefused);
  a = AllocationOfJob(JobWithStatus({{"conditions", {{{"type", "Failed"}, {"status", "True"}, {"reason", "DeadlineExceeded"}}}}}));
  EXPECT_EQ(a.phase, Allocation::Phase::kEnded);
  EXPECT_EQ(a.end, Allocation::End::kTimeLimit);
  // At the deadline the Job controller deletes the pods (SIGTERM, then their grace period to
  // checkpoint): not over while they are terminating, so the next attempt resumes from the
  // checkpoint they are writing.
  for (const char* count : {"terminating", "active"}) {
    a = AllocationOfJob(JobWithStatus({{"conditions", {{{"type", "Failed"}, {"status", "True"}, {"reason", "DeadlineExceeded"}}}},
                                       {count, 2}}));
    EXPECT_EQ(a.phase, Allocation::Phase::kRunning) << count;
    EXPECT_NE(a.reason.find("2 pods stopping"), std::string::npos) << a.reason;
  }
  a = AllocationOfJob(JobWithStatus({{"conditions", {{{"type", "Failed"}, {"status", "True"}, {"reason", "BackoffLimitExceeded"}}}}}));
  EXPECT_EQ(a.end, Allocation::End::kDone);
  a = AllocationOfJob(JobWithStatus({{"conditions", {{{"type", "Failed"}, {"status", "False"}}}}, {"active", 1}}));
  EXPECT_EQ(a.phase, Allocation::Phase::kRunning);
}

// The fake API server, started for one test and gone with it (its stdin is ours); `args`:
// fake_kube_api.py's options (--tls, --token).
class FakeApiServer {
 public:
  explicit FakeApiServer(const std::vector<std::string>& args = {}) {
    const std::string script = std::string(NIGHTSHIFT_SOURCE_DIR) + "/tests/support/fake_kube_api.py";
    std::vector<const char*> argv = {"python3", script.c_str()};
    for (const std::string& a : args) argv.push_back(a.c_str());
    argv.push_back(nullptr);
    int in[2], out[2];
    if (::pipe(in) != 0 || ::pipe(out) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::close(in[1]);
      ::close(out[0]);
      ::execv("/usr/bin/python3", const_cast<char* const*>(argv.data()));
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    FILE* f = ::fdopen(out[0], "r");
    char line[32] = {0};
    if (f != nullptr && std::fgets(line, sizeof(line), f) != nullptr) port_ = std::atoi(line);
    if (f != nullptr) std::fclose(f);
  }
  ~FakeApiServer() {
    if (stdin_ >= 0) ::close(stdin_);
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  // The test's options, pointed at this server over plain http.
  KubernetesOptions Options() const {
    KubernetesOptions o = nightshift::Options();
    o.api = url();
    o.token_file = "";
    o.ca_file = "";
    return o;
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int port_ = 0;
};

// A cluster talking to a fake API server of its own over plain http; Call() reaches the
// server directly (its /_test/ routes set the scene and show what the cluster did).
class KubernetesApiTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_GT(server.port(), 0); }
  HttpResponse Call(const std::string& method, const std::string& path, const std::string& body = "") {
    StatusOr<HttpResponse> r = api->Call(method, path, body, 10);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : HttpResponse{};
  }
  json CallJson(const std::string& method, const std::string& path) {
    return json::parse(Call(method, path).body, nullptr, false);
  }
  int Patches() {  // the PATCH requests the server has had
    int n = 0;
    for (const json& r : CallJson("GET", "/_test/requests")) n += r[0] == "PATCH" ? 1 : 0;
    return n;
  }

  FakeApiServer server;
  const KubernetesOptions o = server.Options();
  std::unique_ptr<HttpApi> api = MakeKubernetesApi(o);
  KubernetesCluster cluster{o, api.get()};
};

TEST_F(KubernetesApiTest, TheClusterCreatesWatchesRelistsAndDeletesThroughTheApi) {

  StatusOr<std::vector<Allocation>> listed = cluster.List();  // the first list
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_TRUE(listed->empty());
  StatusOr<std::string> id = cluster.Submit(Request());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, "nightshift-j-000007-a3");
  StatusOr<std::string> again = cluster.Submit(Request());  // 409: made already, adopted
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, *id);
  const std::string secret = "/_test/objects/secrets/ml/" + *id;
  EXPECT_EQ(json::parse(Call("GET", secret, "").body)["stringData"]["token"], Request().token);
  // The Secret and the Service are the Job's: deleted with it by Kubernetes.
  const json job_object = json::parse(Call("GET", "/_test/objects/jobs/ml/" + *id, "").body);
  const std::string uid = job_object["metadata"].value("uid", "");
  ASSERT_FALSE(uid.empty());
  for (const std::string kind : {"secrets", "services"}) {
    const json owned = json::parse(Call("GET", "/_test/objects/" + kind + "/ml/" + *id, "").body);
    EXPECT_EQ(owned["metadata"]["ownerReferences"],
              json::array({{{"apiVersion", "batch/v1"}, {"kind", "Job"}, {"name", *id}, {"uid", uid}}}))
        << kind << " " << owned.dump();
  }

  // The watch from the first list's version sees the Job added, then running.
  listed = cluster.List();
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].phase, Allocation::Phase::kPending);
  EXPECT_EQ(Call("POST", "/_test/jobs/ml/" + *id + "/status", R"({"active": 2, "ready": 2})").status, 200);
  listed = cluster.List();
  ASSERT_TRUE(listed.ok() && listed->size() == 1u);
  EXPECT_EQ((*listed)[0].phase, Allocation::Phase::kRunning);

  // A gap: the history is compacted and the Job completes; the watch answers 410 and the
  // cluster lists again, seeing the end.
  EXPECT_EQ(Call("POST", "/_test/compact", "").status, 200);
  EXPECT_EQ(Call("POST", "/_test/jobs/ml/" + *id + "/status", R"({"conditions": [{"type": "Complete", "status": "True"}]})")
                .status,
            200);
  listed = cluster.List();
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].phase, Allocation::Phase::kEnded);

  // Deleted, its Secret too: gone from the watch; deleting again is no error (404).
  EXPECT_TRUE(cluster.Cancel(*id).ok());
  EXPECT_EQ(Call("GET", secret, "").status, 404);
  EXPECT_EQ(Call("GET", "/_test/objects/services/ml/" + *id, "").status, 404);
  EXPECT_TRUE(cluster.Cancel(*id).ok());
  listed = cluster.List();
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_TRUE(listed->empty());

  // A role that may not make Secrets or Jobs (RBAC's 403: a role from before they were
  // made): the coordinator's trouble, retried (UNAVAILABLE naming rbac.yaml), never the
  // job's error. So is a namespace's quota (403 "exceeded quota": it clears as other Jobs
  // end). What was made is kept for the retry, which adopts it (no writes each pass).
  for (const std::string control : {"forbid/secrets", "forbid/jobs", "quota/jobs"}) {
    EXPECT_EQ(Call("POST", "/_test/" + control, "").status, 200);
    const Status passing = cluster.Submit(Request()).status();
    EXPECT_EQ(passing.code(), Status::kUnavailable) << control << ": " << passing.ToString();
    const std::string says = control == "quota/jobs" ? "exceeded quota" : "deploy/kubernetes/rbac.yaml";
    EXPECT_NE(passing.message().find(says), std::string::npos) << passing.ToString();
    EXPECT_EQ(Call("POST", "/_test/" + control, "").status, 200);
  }
  ASSERT_TRUE(cluster.List().ok());
  EXPECT_EQ(Call("GET", secret, "").status, 200);  // kept (the retry comes within a minute)
  EXPECT_EQ(Call("GET", "/_test/objects/jobs/ml/" + *id, "").status, 404);
  // A Job denied for good (an admission webhook's 403, whatever its words say) fails the
  // job, and what the attempt made is deleted.
  EXPECT_EQ(Call("POST", "/_test/deny/jobs", "").status, 200);
  const Status refused = cluster.Submit(Request()).status();
  EXPECT_EQ(refused.code(), Status::kInvalidArgument) << refused.ToString();
  EXPECT_NE(refused.message().find("denied the request"), std::string::npos) << refused.ToString();
  EXPECT_EQ(Call("GET", secret, "").status, 404);
  EXPECT_EQ(Call("GET", "/_test/objects/services/ml/" + *id, "").status, 404);
  EXPECT_EQ(Call("POST", "/_test/deny/jobs", "").status, 200);
  EXPECT_TRUE(cluster.Submit(Request()).ok());
  // Submitted again while it exists (its record lost) in a namespace at its quota: the
  // quota's admission refuses before the store finds it exists; the Job is adopted, never
  // taken for refused (and its objects deleted under its running pods).
  EXPECT_EQ(Call("POST", "/_test/quota/jobs", "").status, 200);
  StatusOr<std::string> adopted = cluster.Submit(Request());
  EXPECT_TRUE(adopted.ok()) << adopted.status().ToString();
  EXPECT_EQ(Call("GET", "/_test/objects/jobs/ml/" + *id, "").status, 200);
  EXPECT_EQ(Call("GET", secret, "").status, 200);
  EXPECT_EQ(Call("POST", "/_test/quota/jobs", "").status, 200);

  // Objects the API refuses (422) are the job's error, not a retry.
  AllocationRequest bad = Request();
  bad.attempt = 4;
  KubernetesOptions no_image = o;
  no_image.image = "";
  EXPECT_EQ(KubernetesCluster(no_image, api.get()).Submit(bad).status().code(), Status::kInvalidArgument);

  const json requests = json::parse(Call("GET", "/_test/requests", "").body);
  bool watched_from_a_version = false, listed_again = false;
  int lists = 0;
  for (const json& r : requests) {
    const std::string path = r[1];
    if (r[0] == "GET" && path.find("/jobs?labelSelector=app.kubernetes.io/managed-by%3Dnightshift") != std::string::npos) {
      if (path.find("watch=1") != std::string::npos) watched_from_a_version |= path.find("resourceVersion=1") != std::string::npos;
      else ++lists;
    }
  }
  listed_again = lists == 2;
  EXPECT_TRUE(watched_from_a_version);
  EXPECT_TRUE(listed_again) << requests.dump(1);
}

// A Job deleted by someone else (kubectl delete job; a coordinator that never comes back
// is someone else too) takes its Secret and Service with it: the fake API server does
// the garbage collector's work by ownerReferences' uid, so this holds only if ours name
// the Job that was made, also when it was adopted (made before: 409, read back).
// RFC 3339 in whole seconds, as the API writes status.startTime.
std::string ApiTime(std::chrono::system_clock::time_point t) {
  const std::time_t s = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char out[32];
  std::strftime(out, sizeof(out), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return out;
}

// Without Kueue a Job starts when it is made, and its pods may wait for nodes: the time
// limit (2 h) becomes its deadline only once every pod is ready, counted from then (the
// deadline counts from the Job's start: 100 s before, here), set once.
// A Job someone else made with our labels (the job's and attempt's) is not the attempt's:
// the one listed is the one named as we name it; nor is a Secret named as that Job made
// its own when a restarted coordinator makes its Jobs own their objects (deleting the Job
// would have the Secret collected).
TEST_F(KubernetesApiTest, AJobLabelledAsOursButNamedOtherwiseIsNotOurs) {
  ASSERT_TRUE(cluster.List().ok());
  json impostor = KubernetesObjects(Request(), o).back();
  ASSERT_EQ(impostor.value("kind", ""), "Job");
  impostor["metadata"]["name"] = "aaa-impostor";
  EXPECT_EQ(Call("POST", "/apis/batch/v1/namespaces/ml/jobs", impostor.dump()).status, 201);
  StatusOr<std::vector<Allocation>> listed = cluster.List();
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_TRUE(listed->empty());
  ASSERT_TRUE(cluster.Submit(Request()).ok());
  listed = cluster.List();
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].id, "nightshift-j-000007-a3");
  EXPECT_EQ(Call("POST", "/api/v1/namespaces/ml/secrets",
                 R"({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "aaa-impostor"}})")
                .status,
            201);
  KubernetesCluster restarted{o, api.get()};
  ASSERT_TRUE(restarted.List().ok());
  const json secret = CallJson("GET", "/_test/objects/secrets/ml/aaa-impostor");
  EXPECT_FALSE(secret["metadata"].contains("ownerReferences")) << secret.dump();
  const json ours = CallJson("GET", "/_test/objects/secrets/ml/nightshift-j-000007-a3");
  EXPECT_TRUE(ours["metadata"].contains("ownerReferences")) << ours.dump();
}

TEST_F(KubernetesApiTest, AJobWithoutAQueueStartsItsTimeLimitOnceItsPodsRun) {
  KubernetesOptions plain = o;
  plain.priorities.clear();
  KubernetesCluster unqueued{plain, api.get()};
  ASSERT_TRUE(unqueued.List().ok());
  StatusOr<std::string> id = unqueued.Submit(Request());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  const std::string object = "/_test/objects/jobs/ml/" + *id, status = "/_test/jobs/ml/" + *id + "/status";
  const std::string started = ApiTime(std::chrono::system_clock::now() - std::chrono::seconds(100));
  ASSERT_TRUE(unqueued.List().ok());
  EXPECT_EQ(Call("POST", status, R"({"active": 2, "ready": 1, "startTime": ")" + started + "\"}").status, 200);
  ASSERT_TRUE(unqueued.List().ok());
  EXPECT_FALSE(CallJson("GET", object)["spec"].contains("activeDeadlineSeconds")) << "one pod waits for a node";
  // A role without patch on jobs (from before it was needed): not set, tried again.
  EXPECT_EQ(Call("POST", "/_test/forbid-patch/jobs").status, 200);
  EXPECT_EQ(Call("POST", status, R"({"active": 2, "ready": 2, "startTime": ")" + started + "\"}").status, 200);
  ASSERT_TRUE(unqueued.List().ok());
  ASSERT_TRUE(unqueued.List().ok());
  EXPECT_FALSE(CallJson("GET", object)["spec"].contains("activeDeadlineSeconds"));
  EXPECT_EQ(Call("POST", "/_test/forbid-patch/jobs").status, 200);
  const int patches = Patches();
  ASSERT_TRUE(unqueued.List().ok());
  const int64_t deadline = CallJson("GET", object)["spec"].value("activeDeadlineSeconds", int64_t{0});
  EXPECT_GE(deadline, 7200 + 100);
  EXPECT_LE(deadline, 7200 + 100 + 5);
  EXPECT_EQ(Patches(), patches + 1);
  ASSERT_TRUE(unqueued.List().ok());
  ASSERT_TRUE(unqueued.List().ok());
  EXPECT_EQ(Patches(), patches + 1) << "set once";
}

// A Job the list does not show is looked up: as its deletion's event last showed it (one
// deleted from outside after its deadline: a time limit, not an unseen end), else as the
// API has it now (a watch behind: running, so waited for), else NOT_FOUND.
TEST_F(KubernetesApiTest, AJobTheListDoesNotShowIsLookedUp) {
  ASSERT_TRUE(cluster.List().ok());
  StatusOr<std::string> id = cluster.Submit(Request());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  ASSERT_TRUE(cluster.List().ok());
  EXPECT_EQ(Call("POST", "/_test/jobs/ml/" + *id + "/status",
                 R"({"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]})")
                .status,
            200);
  EXPECT_EQ(Call("DELETE", "/apis/batch/v1/namespaces/ml/jobs/" + *id).status, 200);  // a person's kubectl
  StatusOr<std::vector<Allocation>> listed = cluster.List();  // MODIFIED then DELETED, in one watch
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_TRUE(listed->empty());
  StatusOr<Allocation> record = cluster.Lookup(*id);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->phase, Allocation::Phase::kEnded);
  EXPECT_EQ(record->end, Allocation::End::kTimeLimit);
  EXPECT_EQ(record->attempt, 3);
  EXPECT_EQ(cluster.Lookup(*id).status().code(), Status::kNotFound);  // followed to its end once
  // Deleted while it ran: over (its last state said running; nothing will change it).
  AllocationRequest running = Request();
  running.attempt = 5;
  StatusOr<std::string> ran = cluster.Submit(running);
  ASSERT_TRUE(ran.ok()) << ran.status().ToString();
  ASSERT_TRUE(cluster.List().ok());
  EXPECT_EQ(Call("POST", "/_test/jobs/ml/" + *ran + "/status", R"({"active": 2, "ready": 2})").status, 200);
  EXPECT_EQ(Call("DELETE", "/apis/batch/v1/namespaces/ml/jobs/" + *ran).status, 200);
  ASSERT_TRUE(cluster.List().ok());
  record = cluster.Lookup(*ran);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->phase, Allocation::Phase::kEnded);
  EXPECT_EQ(record->state, "Deleted");
  EXPECT_EQ(record->end, Allocation::End::kDone);  // an attempt ended, counted
  // Deleted past its deadline while its pods were still stopping: a time slice still.
  running.attempt = 6;
  ran = cluster.Submit(running);
  ASSERT_TRUE(ran.ok()) << ran.status().ToString();
  ASSERT_TRUE(cluster.List().ok());
  EXPECT_EQ(Call("POST", "/_test/jobs/ml/" + *ran + "/status",
                 R"({"terminating": 2, "conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]})")
                .status,
            200);
  EXPECT_EQ(Call("DELETE", "/apis/batch/v1/namespaces/ml/jobs/" + *ran).status, 200);
  ASSERT_TRUE(cluster.List().ok());
  record = cluster.Lookup(*ran);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->phase, Allocation::Phase::kEnded);
  EXPECT_EQ(record->end, Allocation::End::kTimeLimit);
  // Made, but not yet seen by this cluster's watch: read from the API.
  AllocationRequest next = Request();
  next.attempt = 4;
  StatusOr<std::string> made = cluster.Submit(next);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  KubernetesCluster fresh{o, api.get()};
  record = fresh.Lookup(*made);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->phase, Allocation::Phase::kPending);
  EXPECT_EQ(record->attempt, 4);
  EXPECT_EQ(fresh.Lookup("nightshift-j-000007-a9").status().code(), Status::kNotFound);
}

// What a passing refusal left (a quota's) is deleted once no retry came for
// refused_kept_seconds (0 here: at the next list; the job held or cancelled meanwhile),
// a Service that cannot be deleted again at each list; but once the same attempt is
// submitted again, what it adopts is its own, never deleted as left over.
TEST_F(KubernetesApiTest, WhatAPassingRefusalLeftGoesUnlessItsRetryComes) {
  KubernetesOptions quick = o;
  quick.refused_kept_seconds = 0;
  KubernetesCluster refusing{quick, api.get()};
  ASSERT_TRUE(refusing.List().ok());
  const std::string name = KubernetesName(Request().job_id, Request().attempt);
  const std::string secret = "/_test/objects/secrets/ml/" + name, service = "/_test/objects/services/ml/" + name;
  EXPECT_EQ(Call("POST", "/_test/quota/jobs").status, 200);
  EXPECT_EQ(refusing.Submit(Request()).status().code(), Status::kUnavailable);
  EXPECT_EQ(Call("GET", secret).status, 200);
  EXPECT_EQ(Call("POST", "/_test/forbid-delete/services").status, 200);
  ASSERT_TRUE(refusing.List().ok());
  EXPECT_EQ(Call("GET", secret).status, 404);
  EXPECT_EQ(Call("GET", service).status, 200);  // its delete refused: again at each list
  EXPECT_EQ(Call("POST", "/_test/quota/jobs").status, 200);
  StatusOr<std::string> id = refusing.Submit(Request());  // the Service adopted (409): its own
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(Call("POST", "/_test/forbid-delete/services").status, 200);
  ASSERT_TRUE(refusing.List().ok());
  ASSERT_TRUE(refusing.List().ok());
  EXPECT_EQ(Call("GET", service).status, 200);
  EXPECT_EQ(Call("GET", secret).status, 200);
  EXPECT_EQ(Call("GET", "/_test/objects/jobs/ml/" + name).status, 200);
  // A Job made though its POST was answered 500: what it needs is kept, not swept, and
  // made its own once it is listed (the coordinator follows it, never submitting again).
  AllocationRequest lost = Request();
  lost.attempt = 9;
  const std::string made = KubernetesName(lost.job_id, lost.attempt);
  EXPECT_EQ(Call("POST", "/_test/fail/jobs").status, 200);
  EXPECT_EQ(refusing.Submit(lost).status().code(), Status::kUnavailable);
  EXPECT_EQ(Call("POST", "/_test/fail/jobs").status, 200);
  ASSERT_TRUE(refusing.List().ok());
  ASSERT_TRUE(refusing.List().ok());
  const json job = CallJson("GET", "/_test/objects/jobs/ml/" + made);
  for (const std::string kind : {"secrets", "services"}) {
    const json owned = CallJson("GET", "/_test/objects/" + kind + "/ml/" + made);
    ASSERT_TRUE(owned.is_object() && owned.contains("metadata")) << kind << " swept";
    EXPECT_EQ(owned["metadata"]["ownerReferences"][0]["uid"], job["metadata"]["uid"]) << kind;
  }
}

TEST_F(KubernetesApiTest, TheSecretAndServiceGoWithTheirJob) {
  ASSERT_TRUE(cluster.Submit(Request()).ok());
  StatusOr<std::string> id = cluster.Submit(Request());  // all three adopted, patched again
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  const auto status = [&](const std::string& method, const std::string& path) { return Call(method, path).status; };
  EXPECT_EQ(status("GET", "/_test/objects/secrets/ml/" + *id), 200);
  EXPECT_EQ(status("DELETE", "/apis/batch/v1/namespaces/ml/jobs/" + *id), 200);
  EXPECT_EQ(status("GET", "/_test/objects/secrets/ml/" + *id), 404);
  EXPECT_EQ(status("GET", "/_test/objects/services/ml/" + *id), 404);

  // Without tokens (insecure mode) there is no Secret: the Service alone is patched.
  AllocationRequest insecure = Request();
  insecure.attempt = 5;
  insecure.token = "";
  id = cluster.Submit(insecure);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(status("GET", "/_test/objects/secrets/ml/" + *id), 404);
  EXPECT_EQ(status("DELETE", "/apis/batch/v1/namespaces/ml/jobs/" + *id), 200);
  EXPECT_EQ(status("GET", "/_test/objects/services/ml/" + *id), 404);

  // A cancel whose Service cannot be deleted (not owned yet, so the garbage collector
  // would not take it) still deletes the Job (its pods stop), and deletes the Service at a
  // later List once it can (nothing else would: the Job is gone).
  insecure.attempt = 6;
  EXPECT_EQ(status("POST", "/_test/forbid-patch/services"), 200);  // left unowned
  id = cluster.Submit(insecure);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(status("POST", "/_test/forbid-patch/services"), 200);
  EXPECT_EQ(status("POST", "/_test/forbid-delete/services"), 200);
  EXPECT_TRUE(cluster.Cancel(*id).ok());
  EXPECT_EQ(status("GET", "/_test/objects/jobs/ml/" + *id), 404);
  EXPECT_EQ(status("GET", "/_test/objects/services/ml/" + *id), 200);
  ASSERT_TRUE(cluster.List().ok());
  EXPECT_EQ(status("GET", "/_test/objects/services/ml/" + *id), 200);  // still forbidden
  EXPECT_EQ(status("POST", "/_test/forbid-delete/services"), 200);
  ASSERT_TRUE(cluster.List().ok());
  EXPECT_EQ(status("GET", "/_test/objects/services/ml/" + *id), 404);
}

// A failed ownerReferences patch (a role without patch, a moment's error) does not fail
// the submission; it is tried again at each List while the Job is listed, and not once
// it has succeeded.
TEST_F(KubernetesApiTest, AFailedOwnershipPatchIsTriedAgainWhileTheJobIsListed) {
  Call("POST", "/_test/forbid-patch/services");
  StatusOr<std::string> id = cluster.Submit(Request());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  const auto owners = [&](const std::string& kind) {
    return CallJson("GET", "/_test/objects/" + kind + "/ml/" + *id)["metadata"].value("ownerReferences", json::array());
  };
  EXPECT_TRUE(owners("services").empty());
  EXPECT_EQ(owners("secrets").size(), 1u);
  ASSERT_TRUE(cluster.List().ok());  // still forbidden: tried, not owned
  EXPECT_TRUE(owners("services").empty());
  const int tried = Patches();
  Call("POST", "/_test/forbid-patch/services");  // allowed again
  ASSERT_TRUE(cluster.List().ok());
  const json now = owners("services");
  ASSERT_EQ(now.size(), 1u);
  EXPECT_EQ(now[0]["uid"], CallJson("GET", "/_test/objects/jobs/ml/" + *id)["metadata"]["uid"]);
  EXPECT_EQ(Patches(), tried + 1);
  ASSERT_TRUE(cluster.List().ok());
  EXPECT_EQ(Patches(), tried + 1);  // owned: not patched again
}

// A coordinator that restarts forgets which patches failed: its first List patches every
// listed Job's Secret and Service once (the test's cluster object stands for the process
// that ended; a new one for the restarted coordinator), and later Lists do not again.
TEST_F(KubernetesApiTest, AfterARestartTheFirstListMakesEveryListedJobOwnItsObjects) {
  Call("POST", "/_test/forbid-patch/services");
  StatusOr<std::string> id = cluster.Submit(Request());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  const auto owners = [&](const std::string& kind) {
    return CallJson("GET", "/_test/objects/" + kind + "/ml/" + *id)["metadata"].value("ownerReferences", json::array());
  };
  ASSERT_TRUE(owners("services").empty());
  Call("POST", "/_test/forbid-patch/services");  // allowed again, but nobody remembers
  KubernetesCluster restarted(o, api.get());
  const int before = Patches();
  ASSERT_TRUE(restarted.List().ok());
  ASSERT_EQ(owners("services").size(), 1u);
  EXPECT_EQ(owners("services")[0]["uid"], CallJson("GET", "/_test/objects/jobs/ml/" + *id)["metadata"]["uid"]);
  EXPECT_EQ(owners("secrets").size(), 1u);
  EXPECT_EQ(Patches(), before + 2);  // its Secret and its Service
  ASSERT_TRUE(restarted.List().ok());
  EXPECT_EQ(Patches(), before + 2);
}

// A restart forgets what it had still to delete (refused_, leftovers_): its first List
// deletes the Secrets and Services labelled as ours that no Job owns and whose attempt has
// no Job (attempt 3's: its Submit cut short before the Job). Kept: those of an attempt whose
// Job exists though it does not own them yet, listed (4) or not (6, relabelled: the API is
// asked), one a Job owns (5: the garbage collector's), and a Secret not labelled as ours
// though named as an attempt's. Later Lists delete nothing more.
TEST_F(KubernetesApiTest, AfterARestartTheFirstListDeletesTheSecretAndServiceOfAJobNeverMade) {
  const auto post = [&](const json& object) {
    const std::string kind = object["kind"];
    const std::string path = kind == "Job"       ? "/apis/batch/v1/namespaces/ml/jobs"
                             : kind == "Service" ? "/api/v1/namespaces/ml/services"
                                                 : "/api/v1/namespaces/ml/secrets";
    EXPECT_EQ(Call("POST", path, object.dump()).status, 201) << object.dump();
  };
  const auto attempt = [&](int n) {  // [Secret, Service, Job], as Submit makes them, none owned
    AllocationRequest r = Request();
    r.attempt = n;
    return KubernetesObjects(r, o);
  };
  std::vector<json> orphan = attempt(3), made = attempt(4), collected = attempt(5), relabelled = attempt(6);
  post(orphan[0]);
  post(orphan[1]);
  for (const json& object : made) post(object);
  collected[1]["metadata"]["ownerReferences"] = json::array(
      {{{"apiVersion", "batch/v1"}, {"kind", "Job"}, {"name", collected[1]["metadata"]["name"]}, {"uid", "a-deleted-job"}}});
  post(collected[1]);
  relabelled[2]["metadata"]["labels"] = {{"team", "vision"}};  // a person's relabel: not listed as ours
  for (const json& object : relabelled) post(object);
  const json stranger = {{"apiVersion", "v1"},
                         {"kind", "Secret"},
                         {"metadata", {{"name", KubernetesName(Request().job_id, 7)}, {"namespace", "ml"}}},
                         {"stringData", {{"token", "someone else's"}}}};
  post(stranger);

  KubernetesCluster restarted(o, api.get());
  ASSERT_TRUE(restarted.List().ok());
  const auto there = [&](const std::string& kind, const json& object) {
    return Call("GET", "/_test/objects/" + kind + "/ml/" + object["metadata"].value("name", "")).status == 200;
  };
  EXPECT_FALSE(there("secrets", orphan[0])) << "a leaked worker token";
  EXPECT_FALSE(there("services", orphan[1]));
  for (const std::vector<json>* kept : {&made, &relabelled}) {
    EXPECT_TRUE(there("secrets", (*kept)[0])) << (*kept)[2]["metadata"]["name"];
    EXPECT_TRUE(there("services", (*kept)[1])) << (*kept)[2]["metadata"]["name"];
    EXPECT_TRUE(there("jobs", (*kept)[2])) << (*kept)[2]["metadata"]["name"];
  }
  EXPECT_TRUE(there("services", collected[1]));
  EXPECT_TRUE(there("secrets", stranger));
  // Listed by our label (the fake answers every object of the kind: the names and labels
  // are checked too), and deleted once.
  std::set<std::string> selected;
  const auto deletes = [&] {
    int n = 0;
    for (const json& r : CallJson("GET", "/_test/requests")) {
      const std::string path = r[1];
      n += r[0] == "DELETE" ? 1 : 0;
      if (r[0] == "GET" && path.find("?labelSelector=app.kubernetes.io/managed-by%3Dnightshift") != std::string::npos)
        selected.insert(path.substr(0, path.find('?')));
    }
    return n;
  };
  EXPECT_EQ(deletes(), 2);
  EXPECT_EQ(selected.count("/api/v1/namespaces/ml/secrets"), 1u);
  EXPECT_EQ(selected.count("/api/v1/namespaces/ml/services"), 1u);
  ASSERT_TRUE(restarted.List().ok());
  EXPECT_EQ(deletes(), 2);
}

// In a cluster the API server speaks https with a certificate of the cluster's CA and wants
// the service account's token, which the kubelet rotates in place: the options' ca_file
// and token_file reach libcurl (a review once found the CA file passed as another field),
// the token is read at every call, and a server the CA did not sign is refused.
TEST(KubernetesTest, InClusterCallsVerifyTheServerWithTheCaFileAndCarryTheCurrentToken) {
  const fs::path dir = fs::temp_directory_path() / ("nightshift-k8s-tls-" + std::to_string(::getpid()));
  SubprocessRunner runner;
  for (const char* ca : {"cluster", "other"}) {
    StatusOr<CommandResult> made =
        runner.Run({std::string(NIGHTSHIFT_SOURCE_DIR) + "/scripts/make-test-ca.sh", (dir / ca).string()}, "", {}, 120);
    ASSERT_TRUE(made.ok() && made->exit_code == 0) << (made.ok() ? made->err : made.status().ToString());
  }
  const auto token = [&](const std::string& value) { std::ofstream(dir / "token") << value << "\n"; };
  token("sa-token-1");
  FakeApiServer server({"--tls", (dir / "cluster").string(), "--token", "sa-token-1", "--token", "sa-token-2"});
  ASSERT_GT(server.port(), 0);
  KubernetesOptions o = Options();
  o.api = "https://127.0.0.1:" + std::to_string(server.port());
  o.ca_file = (dir / "cluster" / "ca.crt").string();
  o.token_file = (dir / "token").string();
  {
    std::unique_ptr<HttpApi> api = MakeKubernetesApi(o);
    KubernetesCluster cluster(o, api.get());
    StatusOr<std::string> id = cluster.Submit(Request());
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    token("sa-token-2");  // rotated: the next call carries the new one
    StatusOr<std::vector<Allocation>> listed = cluster.List();
    ASSERT_TRUE(listed.ok()) << listed.status().ToString();
    ASSERT_EQ(listed->size(), 1u);
    EXPECT_EQ(listed->front().id, *id);
    token("revoked");
    listed = cluster.List();
    EXPECT_EQ(listed.status().code(), Status::kUnavailable);
    EXPECT_NE(listed.status().message().find("HTTP 401"), std::string::npos) << listed.status().ToString();
  }
  token("sa-token-2");
  for (const std::string& ca : {(dir / "other" / "ca.crt").string(), std::string()}) {  // "": the system's CAs
    o.ca_file = ca;
    std::unique_ptr<HttpApi> api = MakeKubernetesApi(o);
    KubernetesCluster cluster(o, api.get());
    StatusOr<std::vector<Allocation>> listed = cluster.List();
    EXPECT_EQ(listed.status().code(), Status::kUnavailable) << ca;
    EXPECT_NE(listed.status().message().find("certificate"), std::string::npos) << listed.status().ToString();
  }
  fs::remove_all(dir);
}

// The server is not there: UNAVAILABLE (the provisioner submits nothing blind).
TEST(KubernetesTest, NoApiServerIsUnavailable) {
  KubernetesOptions o = Options();
  o.api = "http://127.0.0.1:1";
  o.token_file = "";
  o.ca_file = "";
  std::unique_ptr<HttpApi> api = MakeKubernetesApi(o);
  KubernetesCluster cluster(o, api.get());
  EXPECT_EQ(cluster.List().status().code(), Status::kUnavailable);
  EXPECT_EQ(cluster.Submit(Request()).status().code(), Status::kUnavailable);
}

}  // namespace
}  // namespace nightshift
