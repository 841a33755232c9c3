// Authentication, roles and TLS against the real coordinator binary on loopback: every
// role against every RPC, users confined to their own jobs, refused calls changing
// nothing, token-file reloads, the CLI's --token, and TLS / mutual TLS.
#include <gtest/gtest.h>

#include <fstream>

#include "common/client.h"
#include "coordinator/auth.h"
#include "nightshift/v1/cluster.grpc.pb.h"
#include "tests/e2e/cluster.h"

namespace nightshift::testing_e2e {
namespace {

const char* kSpec = "name: tiny\nmodel: {arch: transformer_classifier}\ndata: {path: /nonexistent}\n";

// One client identity: stubs for the three services over one channel.
struct Caller {
  explicit Caller(const ClientOptions& o) {
    auto channel = MakeChannel(o);
    EXPECT_TRUE(channel.ok()) << channel.status().ToString();
    jobs = v1::JobService::NewStub(channel.value());
    workers = v1::WorkerService::NewStub(channel.value());
    admin = v1::AdminService::NewStub(channel.value());
  }
  static std::unique_ptr<grpc::ClientContext> Ctx() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return ctx;
  }
  grpc::Status Submit(v1::Job* job = nullptr) {
    v1::SubmitJobRequest req;
    req.set_spec_yaml(kSpec);
    v1::Job out;
    return jobs->SubmitJob(Ctx().get(), req, job ? job : &out);
  }
  grpc::Status Get(const std::string& id, v1::Job* job = nullptr) {
    v1::GetJobRequest req;
    req.set_id(id);
    v1::Job out;
    return jobs->GetJob(Ctx().get(), req, job ? job : &out);
  }
  grpc::Status List(v1::ListJobsResponse* out) { return jobs->ListJobs(Ctx().get(), v1::ListJobsRequest(), out); }
  grpc::Status Cancel(const std::string& id) {
    v1::CancelJobRequest req;
    req.set_id(id);
    v1::Job out;
    return jobs->CancelJob(Ctx().get(), req, &out);
  }
  grpc::Status Watch(const std::string& id) {
    v1::WatchJobRequest req;
    req.set_id(id);
    auto ctx = Ctx();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    auto reader = jobs->WatchJob(ctx.get(), req);
    v1::Job job;
    bool got = reader->Read(&job);
    if (got) ctx->TryCancel();
    grpc::Status s = reader->Finish();
    return got ? grpc::Status::OK : s;
  }
  grpc::Status SubmitSweep(const std::string& base, v1::Sweep* sweep = nullptr) {
    v1::SubmitSweepRequest req;
    req.set_sweep_yaml("base: {" + base + "}\nsearch: {train.lr: {choices: [0.001, 0.01]}}\nmethod: grid\nmetric: val_loss\n"
                       "parallelism: 2\n");
    v1::Sweep out;
    return jobs->SubmitSweep(Ctx().get(), req, sweep ? sweep : &out);
  }
  grpc::Status GetSweep(const std::string& id) {
    v1::GetSweepRequest req;
    req.set_id(id);
    v1::Sweep out;
    return jobs->GetSweep(Ctx().get(), req, &out);
  }
  grpc::Status CancelSweep(const std::string& id) {
    v1::CancelSweepRequest req;
    req.set_id(id);
    v1::Sweep out;
    return jobs->CancelSweep(Ctx().get(), req, &out);
  }
  std::vector<std::string> SweepIds() {
    v1::ListSweepsResponse out;
    EXPECT_TRUE(jobs->ListSweeps(Ctx().get(), v1::ListSweepsRequest(), &out).ok());
    std::vector<std::string> ids;
    for (const auto& w : out.sweeps()) ids.push_back(w.id());
    return ids;
  }
  grpc::Status Register(const std::string& name) {
    v1::RegisterRequest req;
    req.set_name(name);
    req.set_slots(0);  // offers nothing: no job is placed on it
    v1::RegisterResponse out;
    return workers->Register(Ctx().get(), req, &out);
  }
  grpc::Status Heartbeat(const std::string& name) {
    v1::HeartbeatRequest req;
    req.set_name(name);
    v1::HeartbeatResponse out;
    return workers->Heartbeat(Ctx().get(), req, &out);
  }
  grpc::Status ReportTask(const std::string& name) {
    v1::ReportTaskRequest req;
    req.set_name(name);
    req.mutable_status()->mutable_task()->set_job_id("j-999999");
    v1::ReportTaskResponse out;
    return workers->ReportTask(Ctx().get(), req, &out);
  }
  grpc::Status ListWorkers(v1::ListWorkersResponse* out) {
    return admin->ListWorkers(Ctx().get(), v1::ListWorkersRequest(), out);
  }
  grpc::Status ListCache() {
    v1::ListCacheResponse out;
    return admin->ListCache(Ctx().get(), v1::ListCacheRequest(), &out);
  }
  grpc::Status EvictCache() {
    v1::EvictCacheRequest req;
    req.set_all(true);
    v1::EvictCacheResponse out;
    return admin->EvictCache(Ctx().get(), req, &out);
  }
  grpc::Status Cordon(const std::string& name) {
    v1::CordonWorkerRequest req;
    req.set_name(name);
    v1::WorkerResponse out;
    return admin->CordonWorker(Ctx().get(), req, &out);
  }
  grpc::Status Drain(const std::string& name) {
    v1::DrainWorkerRequest req;
    req.set_name(name);
    v1::WorkerResponse out;
    return admin->DrainWorker(Ctx().get(), req, &out);
  }
  std::unique_ptr<v1::JobService::Stub> jobs;
  std::unique_ptr<v1::WorkerService::Stub> workers;
  std::unique_ptr<v1::AdminService::Stub> admin;
};

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    token_file_ = cluster_.dir() + "/tokens";
    WriteTokens({{"admin-secret", "admin root"}, {"alice-secret", "user alice"}, {"bob-secret", "user bob"},
                 {"worker-secret", "worker node1"}});
  }
  void WriteTokens(const std::vector<std::pair<std::string, std::string>>& tokens) {
    const std::string tmp = token_file_ + ".tmp";
    {
      std::ofstream out(tmp);
      out << "# sha256(token) role user\n";
      for (const auto& [token, who] : tokens) out << Sha256Hex(token) << " " << who << "\n";
    }
    fs::rename(tmp, token_file_);  // a new inode: the change is seen even within one mtime tick
  }
  ClientOptions As(const std::string& token) { return {cluster_.address(), token, "", "", "", ""}; }
  std::vector<std::string> JobIds(Caller& c) {
    v1::ListJobsResponse list;
    EXPECT_TRUE(c.List(&list).ok());
    std::vector<std::string> ids;
    for (const auto& j : list.jobs()) ids.push_back(j.id());
    return ids;
  }

  Cluster cluster_{"auth"};
  std::string token_file_;
};

TEST_F(AuthTest, EveryRoleAgainstEveryRpc) {
  cluster_.StartCoordinator({"--token-file", token_file_});
  Caller admin(As("admin-secret")), alice(As("alice-secret")), worker(As("worker-secret"));
  Caller nobody(As("")), stranger(As("wrong-secret"));
  v1::Job job;
  ASSERT_TRUE(alice.Submit(&job).ok());
  EXPECT_EQ(job.owner(), "alice");
  const std::string id = job.id();

  using C = grpc::StatusCode;
  for (Caller* c : {&nobody, &stranger}) {
    v1::ListJobsResponse list;
    v1::ListWorkersResponse workers;
    EXPECT_EQ(c->Submit().error_code(), C::UNAUTHENTICATED);
    EXPECT_EQ(c->Get(id).error_code(), C::UNAUTHENTICATED);
    EXPECT_EQ(c->List(&list).error_code(), C::UNAUTHENTICATED);
    EXPECT_EQ(c->Cancel(id).error_code(), C::UNAUTHENTICATED);
    EXPECT_EQ(c->Watch(id).error_code(), C::UNAUTHENTICATED);
    EXPECT_EQ(c->Register("w").error_code(), C::UNAUTHENTICATED);
    EXPECT_EQ(c->Heartbeat("w").error_code(), C::UNAUTHENTICATED);
    EXPECT_EQ(c->ReportTask("w").error_code(), C::UNAUTHENTICATED);
    EXPECT_EQ(c->ListWorkers(&workers).error_code(), C::UNAUTHENTICATED);
    EXPECT_EQ(c->ListCache().error_code(), C::UNAUTHENTICATED);
    EXPECT_EQ(c->EvictCache().error_code(), C::UNAUTHENTICATED);
    EXPECT_EQ(c->Cordon("node1").error_code(), C::UNAUTHENTICATED);
    EXPECT_EQ(c->Drain("node1").error_code(), C::UNAUTHENTICATED);
  }
  // user: JobService on its own jobs; nothing else.
  {
    v1::ListJobsResponse list;
    v1::ListWorkersResponse workers;
    EXPECT_TRUE(alice.Get(id).ok());
    EXPECT_TRUE(alice.List(&list).ok());
    EXPECT_TRUE(alice.Watch(id).ok());
    EXPECT_EQ(alice.Register("w").error_code(), C::PERMISSION_DENIED);
    EXPECT_EQ(alice.Heartbeat("w").error_code(), C::PERMISSION_DENIED);
    EXPECT_EQ(alice.ReportTask("w").error_code(), C::PERMISSION_DENIED);
    EXPECT_EQ(alice.ListWorkers(&workers).error_code(), C::PERMISSION_DENIED);
    EXPECT_EQ(alice.ListCache().error_code(), C::PERMISSION_DENIED);
    EXPECT_EQ(alice.EvictCache().error_code(), C::PERMISSION_DENIED);
    EXPECT_EQ(alice.Cordon("node1").error_code(), C::PERMISSION_DENIED);
    EXPECT_EQ(alice.Drain("node1").error_code(), C::PERMISSION_DENIED);
  }
  // worker: WorkerService only.
  {
    v1::ListJobsResponse list;
    v1::ListWorkersResponse workers;
    EXPECT_EQ(worker.Submit().error_code(), C::PERMISSION_DENIED);
    EXPECT_EQ(worker.Get(id).error_code(), C::PERMISSION_DENIED);
    EXPECT_EQ(worker.List(&list).error_code(), C::PERMISSION_DENIED);
    EXPECT_EQ(worker.Cancel(id).error_code(), C::PERMISSION_DENIED);
    EXPECT_EQ(worker.Watch(id).error_code(), C::PERMISSION_DENIED);
    EXPECT_TRUE(worker.Register("node1").ok());
    EXPECT_TRUE(worker.Heartbeat("node1").ok());
    EXPECT_TRUE(worker.ReportTask("node1").ok());
    EXPECT_EQ(worker.ListWorkers(&workers).error_code(), C::PERMISSION_DENIED);
    EXPECT_EQ(worker.ListCache().error_code(), C::PERMISSION_DENIED);
    EXPECT_EQ(worker.EvictCache().error_code(), C::PERMISSION_DENIED);
    EXPECT_EQ(worker.Cordon("node1").error_code(), C::PERMISSION_DENIED);
    EXPECT_EQ(worker.Drain("node1").error_code(), C::PERMISSION_DENIED);
  }
  // admin: everything.
  {
    v1::ListWorkersResponse workers;
    EXPECT_TRUE(admin.Get(id).ok());
    EXPECT_TRUE(admin.Watch(id).ok());
    EXPECT_TRUE(admin.Register("node2").ok());
    EXPECT_TRUE(admin.Heartbeat("node2").ok());
    EXPECT_TRUE(admin.ReportTask("node2").ok());
    EXPECT_TRUE(admin.ListWorkers(&workers).ok());
    EXPECT_EQ(workers.workers_size(), 2);
    EXPECT_TRUE(admin.ListCache().ok());
    EXPECT_TRUE(admin.EvictCache().ok());
    EXPECT_TRUE(admin.Cordon("node2").ok());
    EXPECT_TRUE(admin.Drain("node2").ok());
    v1::Job other;
    EXPECT_TRUE(admin.Submit(&other).ok());
    EXPECT_EQ(other.owner(), "root");
    EXPECT_TRUE(admin.Cancel(id).ok());  // anyone's job
  }
  // The user cancels its own job.
  v1::Job mine;
  ASSERT_TRUE(alice.Submit(&mine).ok());
  EXPECT_TRUE(alice.Cancel(mine.id()).ok());
}

// Sweeps are their owner's (and an admin's): another user neither sees, reads nor cancels
// them; a worker token and no token submit none; a base above the user's priority
// ceiling is refused, and the search may not raise it; the trials are the owner's jobs.
TEST_F(AuthTest, SweepsAreTheirOwnersAndTheirTrialsTheOwnersJobs) {
  cluster_.StartCoordinator({"--token-file", token_file_, "--sweep-poll-seconds", "0.2"});
  Caller admin(As("admin-secret")), alice(As("alice-secret")), bob(As("bob-secret")), worker(As("worker-secret"));
  Caller nobody(As(""));
  using C = grpc::StatusCode;
  const std::string base = "model: {arch: transformer_classifier}, data: {path: /nonexistent}";
  v1::Sweep sweep;
  ASSERT_TRUE(alice.SubmitSweep(base, &sweep).ok());
  EXPECT_EQ(sweep.owner(), "alice");
  EXPECT_EQ(nobody.SubmitSweep(base).error_code(), C::UNAUTHENTICATED);
  EXPECT_EQ(worker.SubmitSweep(base).error_code(), C::PERMISSION_DENIED);
  EXPECT_EQ(bob.GetSweep(sweep.id()).error_code(), C::PERMISSION_DENIED);
  EXPECT_EQ(bob.CancelSweep(sweep.id()).error_code(), C::PERMISSION_DENIED);
  EXPECT_EQ(worker.GetSweep(sweep.id()).error_code(), C::PERMISSION_DENIED);
  EXPECT_TRUE(bob.SweepIds().empty());
  EXPECT_EQ(alice.SweepIds(), std::vector<std::string>{sweep.id()});
  EXPECT_EQ(admin.SweepIds(), std::vector<std::string>{sweep.id()});
  EXPECT_EQ(alice.SubmitSweep(base + ", priority: 101").error_code(), C::PERMISSION_DENIED);
  v1::SubmitSweepRequest raise;
  raise.set_sweep_yaml("base: {" + base + "}\nsearch: {priority: {choices: [1000]}}\nmethod: grid\nmetric: val_loss\n");
  v1::Sweep out;
  EXPECT_EQ(alice.jobs->SubmitSweep(Caller::Ctx().get(), raise, &out).error_code(), C::INVALID_ARGUMENT);
  // Its two trials become alice's jobs (queued: no worker), and go with the sweep.
  std::vector<std::string> ids;
  for (int i = 0; i < 100 && ids.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ids = JobIds(alice);
  }
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_TRUE(JobIds(bob).empty());
  ASSERT_TRUE(alice.CancelSweep(sweep.id()).ok());
  for (const std::string& id : ids) {
    v1::Job job;
    ASSERT_TRUE(alice.Get(id, &job).ok());
    EXPECT_EQ(job.state(), v1::CANCELLED) << id;
    EXPECT_EQ(job.owner(), "alice");
    EXPECT_EQ(job.sweep_id(), sweep.id());
  }
}

TEST_F(AuthTest, UsersSeeAndTouchOnlyTheirOwnJobsAndRefusedCallsChangeNothing) {
  cluster_.StartCoordinator({"--token-file", token_file_});
  Caller admin(As("admin-secret")), alice(As("alice-secret")), bob(As("bob-secret"));
  Caller worker(As("worker-secret")), nobody(As(""));
  v1::Job a, b;
  ASSERT_TRUE(alice.Submit(&a).ok());
  ASSERT_TRUE(bob.Submit(&b).ok());

  EXPECT_EQ(JobIds(alice), std::vector<std::string>{a.id()});
  EXPECT_EQ(JobIds(bob), std::vector<std::string>{b.id()});
  EXPECT_EQ(JobIds(admin), (std::vector<std::string>{a.id(), b.id()}));

  EXPECT_EQ(bob.Get(a.id()).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(bob.Watch(a.id()).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(bob.Cancel(a.id()).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(nobody.Cancel(a.id()).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(worker.Cancel(a.id()).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(nobody.Submit().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(worker.Submit().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(alice.Register("sneaky").error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // Nothing changed: alice's job is as it was, no job was added, no worker registered.
  v1::Job after;
  ASSERT_TRUE(admin.Get(a.id(), &after).ok());
  EXPECT_EQ(after.state(), a.state());
  EXPECT_EQ(after.events_size(), a.events_size());
  EXPECT_EQ(JobIds(admin).size(), 2u);
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(admin.ListWorkers(&workers).ok());
  EXPECT_EQ(workers.workers_size(), 0);
}

TEST_F(AuthTest, TokenFileIsReloadedWithoutRestart) {
  cluster_.StartCoordinator({"--token-file", token_file_});
  Caller alice(As("alice-secret")), carol(As("carol-secret"));
  EXPECT_TRUE(alice.Submit().ok());
  EXPECT_EQ(carol.Submit().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  WriteTokens({{"admin-secret", "admin root"}, {"carol-secret", "user carol"}});  // alice revoked
  EXPECT_TRUE(carol.Submit().ok());
  EXPECT_EQ(alice.Submit().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // A broken file keeps the tokens that were loaded.
  { std::ofstream(token_file_) << "not a token line\n"; }
  EXPECT_TRUE(carol.Submit().ok());
}

TEST_F(AuthTest, PerUserLimitOfUnfinishedJobs) {
  cluster_.StartCoordinator({"--token-file", token_file_, "--max-jobs-per-user", "2"});
  Caller alice(As("alice-secret")), bob(As("bob-secret"));
  v1::Job first;
  ASSERT_TRUE(alice.Submit(&first).ok());
  ASSERT_TRUE(alice.Submit().ok());
  grpc::Status third = alice.Submit();
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << third.error_message();
  EXPECT_TRUE(bob.Submit().ok());  // the limit is per user
  ASSERT_TRUE(alice.Cancel(first.id()).ok());
  EXPECT_TRUE(alice.Submit().ok());  // a finished job no longer counts
}

TEST_F(AuthTest, CliSendsTokenFromFlagFileOrEnvironment) {
  cluster_.StartCoordinator({"--token-file", token_file_});
  const std::string cli = cluster_.Bin("nightshift") + " --coordinator " + cluster_.address();
  std::string out;
  EXPECT_EQ(Cluster::Shell(cli + " job list", &out), 3) << out;
  EXPECT_NE(out.find("UNAUTHENTICATED"), std::string::npos) << out;
  EXPECT_EQ(Cluster::Shell(cli + " --token alice-secret job list", &out), 0) << out;
  EXPECT_EQ(Cluster::Shell("NIGHTSHIFT_TOKEN=alice-secret " + cli + " job list", &out), 0) << out;
  { std::ofstream(cluster_.dir() + "/alice.token") << "alice-secret\n"; }
  EXPECT_EQ(Cluster::Shell(cli + " --token-file " + cluster_.dir() + "/alice.token job list", &out), 0) << out;
  EXPECT_EQ(Cluster::Shell(cli + " --token alice-secret worker list", &out), 3) << out;
  EXPECT_NE(out.find("PERMISSION_DENIED"), std::string::npos) << out;
}

// ~/.config/nightshift/config.yaml: the coordinator and the token file come from it;
// the environment beats it, and flags beat the environment.
TEST_F(AuthTest, CliReadsItsConfigFileBelowEnvironmentAndFlags) {
  cluster_.StartCoordinator({"--token-file", token_file_});
  const std::string home = cluster_.dir() + "/home";
  fs::create_directories(home + "/.config/nightshift");
  { std::ofstream(home + "/.config/nightshift/alice.token") << "alice-secret\n"; }
  {
    std::ofstream(home + "/.config/nightshift/config.yaml")
        << "coordinator: " << cluster_.address() << "\ntoken_file: alice.token\noutput: json\n";
  }
  // The CLI with this HOME and none of the user's settings, plus `env` (VAR=value ...).
  const auto cli = [&](const std::string& env) {
    return "env -u NIGHTSHIFT_COORDINATOR -u NIGHTSHIFT_TOKEN -u NIGHTSHIFT_CONFIG -u XDG_CONFIG_HOME HOME=" +
           home + " " + env + " " + cluster_.Bin("nightshift");
  };
  std::string out;
  EXPECT_EQ(Cluster::Shell(cli("") + " job list", &out), 0) << out;
  EXPECT_EQ(out.find("{"), 0u) << "output: json from the file: " << out;
  EXPECT_EQ(Cluster::Shell(cli("NIGHTSHIFT_TOKEN=wrong") + " job list", &out), 3) << out;
  EXPECT_NE(out.find("UNAUTHENTICATED"), std::string::npos) << "the environment's token: " << out;
  EXPECT_EQ(Cluster::Shell(cli("NIGHTSHIFT_COORDINATOR=127.0.0.1:1") + " job list", &out), 4) << out;
  EXPECT_EQ(Cluster::Shell(cli("NIGHTSHIFT_COORDINATOR=127.0.0.1:1") + " --coordinator " + cluster_.address() +
                               " -o table job list",
                           &out),
            0)
      << out;
  EXPECT_EQ(out.find("{"), std::string::npos) << "-o table beats the file: " << out;
  { std::ofstream(home + "/.config/nightshift/config.yaml") << "coordinater: x\n"; }
  EXPECT_EQ(Cluster::Shell(cli("") + " job list", &out), 2) << out;
  EXPECT_NE(out.find("config.yaml line 1: unknown key \"coordinater\""), std::string::npos) << out;
  EXPECT_EQ(Cluster::Shell(cli("") + " --config " + home + "/absent.yaml job list", &out), 2) << out;
  EXPECT_NE(out.find("absent.yaml does not exist"), std::string::npos) << out;
}

TEST_F(AuthTest, WorkerRegistersWithItsToken) {
  cluster_.StartCoordinator({"--token-file", token_file_});
  cluster_.StartWorker("node1", 1, {{"NIGHTSHIFT_TOKEN", "worker-secret"}});
  { std::ofstream(cluster_.dir() + "/alice.token") << "alice-secret\n"; }
  cluster_.StartWorker("node2", 1, {}, {"--token-file", cluster_.dir() + "/alice.token"});  // a user's token: refused
  Caller admin(As("admin-secret"));
  v1::ListWorkersResponse workers;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(admin.ListWorkers(&workers).ok());
    if (workers.workers_size() > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  ASSERT_TRUE(admin.ListWorkers(&workers).ok());
  ASSERT_EQ(workers.workers_size(), 1);
  EXPECT_EQ(workers.workers(0).name(), "node1");
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    certs_ = cluster_.dir() + "/certs";
    std::string out;
    ASSERT_EQ(Cluster::Shell(std::string(NIGHTSHIFT_SOURCE_DIR) + "/scripts/make-test-ca.sh " + certs_, &out), 0)
        << out;
  }
  Cluster cluster_{"tls"};
  std::string certs_;
};

TEST_F(TlsTest, ServesTlsAndRefusesPlaintext) {
  cluster_.StartCoordinator({"--tls-cert", certs_ + "/server.crt", "--tls-key", certs_ + "/server.key"});
  Caller tls({cluster_.address(), "", "", certs_ + "/ca.crt", "", ""});
  v1::Job job;
  ASSERT_TRUE(tls.Submit(&job).ok());
  EXPECT_TRUE(tls.Get(job.id()).ok());
  Caller plain({cluster_.address(), "", "", "", "", ""});
  EXPECT_EQ(plain.Get(job.id()).error_code(), grpc::StatusCode::UNAVAILABLE);
  // A CA that did not sign the server's certificate is refused too.
  Caller wrong_ca({cluster_.address(), "", "", certs_ + "/client.crt", "", ""});
  EXPECT_FALSE(wrong_ca.Get(job.id()).ok());
  std::string out;
  EXPECT_EQ(Cluster::Shell(cluster_.Bin("nightshift") + " --coordinator " + cluster_.address() + " --tls-ca " +
                               certs_ + "/ca.crt job describe " + job.id(), &out), 0) << out;
}

TEST_F(TlsTest, MutualTlsWithTokensForWorkersAndUsers) {
  {
    std::ofstream out(cluster_.dir() + "/tokens");
    out << Sha256Hex("admin-secret") << " admin root\n" << Sha256Hex("worker-secret") << " worker node1\n";
  }
  cluster_.StartCoordinator({"--tls-cert", certs_ + "/server.crt", "--tls-key", certs_ + "/server.key",
                             "--tls-client-ca", certs_ + "/ca.crt", "--token-file", cluster_.dir() + "/tokens",
                             "--worker-tls-ca", certs_ + "/ca.crt"});
  Caller no_cert({cluster_.address(), "admin-secret", "", certs_ + "/ca.crt", "", ""});
  v1::ListWorkersResponse workers;
  EXPECT_FALSE(no_cert.ListWorkers(&workers).ok());
  Caller admin({cluster_.address(), "admin-secret", "", certs_ + "/ca.crt", certs_ + "/client.crt",
                certs_ + "/client.key"});
  EXPECT_TRUE(admin.ListWorkers(&workers).ok());
  // Without a certificate for its file service, a worker of a TLS cluster does not start.
  const std::map<std::string, std::string> token = {{"NIGHTSHIFT_TOKEN", "worker-secret"}};
  cluster_.StartWorker("node0", 1, token, {"--tls-ca", certs_ + "/ca.crt"});
  cluster_.StartWorker("node1", 1, token, {"--tls-ca", certs_ + "/ca.crt", "--tls-cert", certs_ + "/client.crt",
                                           "--tls-key", certs_ + "/client.key", "--file-service-tls-cert",
                                           certs_ + "/server.crt", "--file-service-tls-key", certs_ + "/server.key"});
  for (int i = 0; i < 100 && workers.workers_size() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(admin.ListWorkers(&workers).ok());
  }
  ASSERT_EQ(workers.workers_size(), 1);
  EXPECT_EQ(workers.workers(0).name(), "node1");
  EXPECT_EQ(workers.workers(0).state(), v1::WORKER_READY);
  std::string node0_log;
  for (int i = 0; i < 100 && node0_log.find("--file-service-tls-cert") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    node0_log = ReadAll(cluster_.dir() + "/node0.log");
  }
  EXPECT_NE(node0_log.find("--file-service-tls-cert"), std::string::npos) << node0_log;

  // The worker's files: TLS only, and the coordinator's key on top.
  const std::string files_at = workers.workers(0).log_address();
  v1::ReadLogRequest read;
  read.set_job_id("j-000001");
  for (const bool tls : {false, true}) {
    ClientOptions o;
    o.address = files_at;
    if (tls) o.tls_ca = certs_ + "/ca.crt";
    auto channel = MakeChannel(o);
    ASSERT_TRUE(channel.ok());
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto reader = v1::WorkerFileService::NewStub(channel.value())->ReadLog(&ctx, read);
    v1::LogChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    EXPECT_EQ(reader->Finish().error_code(), tls ? grpc::StatusCode::UNAUTHENTICATED : grpc::StatusCode::UNAVAILABLE);
  }
  // The coordinator relays a job's log over TLS (--worker-tls-ca).
  const std::string data = cluster_.MakeData(4);
  v1::Job job;
  v1::SubmitJobRequest submit;
  submit.set_spec_yaml("model: {arch: transformer_classifier, layers: 1, d_model: 16, heads: 2, ffn: 32, max_len: 32}\n"
                       "data: {path: " + data + ", tokenizer: {vocab_size: 64}}\ntrain: {epochs: 1, threads: 1}\n");
  ASSERT_TRUE(admin.jobs->SubmitJob(Caller::Ctx().get(), submit, &job).ok());
  for (int i = 0; i < 1200 && !IsTerminal(job.state()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    admin.Get(job.id(), &job);
  }
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  std::string out;
  EXPECT_EQ(Cluster::Shell(cluster_.Bin("nightshift") + " --coordinator " + cluster_.address() + " --token admin-secret" +
                               " --tls-ca " + certs_ + "/ca.crt --tls-cert " + certs_ + "/client.crt --tls-key " +
                               certs_ + "/client.key job logs " + job.id(), &out), 0) << out;
  EXPECT_NE(out.find("trainer"), std::string::npos) << out;
}

// --data-root on the worker: a job whose data lies outside the roots fails at once (a
// user error, no restarts) with a message naming the path and the roots.
TEST(PathConfinementTest, DataOutsideTheRootsFailsTheJobWithoutRetries) {
  Cluster cluster("confine");
  const std::string allowed = cluster.dir() + "/allowed";
  fs::create_directories(allowed);
  const std::string secret = cluster.MakeData(3, "secret");
  fs::create_directory_symlink(secret, allowed + "/link");
  cluster.StartCoordinator();
  cluster.StartWorker("node1", 1, {}, {"--data-root", allowed});
  for (const std::string& path : {secret, allowed + "/../secret", allowed + "/link"}) {
    v1::Job job;
    const std::string spec = "model: {arch: transformer_classifier}\ndata: {path: '" + path +
                             "'}\nrestart: {max_restarts: 3}\n";
    ASSERT_TRUE(cluster.Submit(spec, &job).ok());
    job = cluster.WaitForEnd(job.id(), 60);
    EXPECT_EQ(job.state(), v1::FAILED) << path;
    EXPECT_EQ(job.restarts(), 0) << path;
    EXPECT_NE(job.error().find("'" + path + "'"), std::string::npos) << job.error();
    EXPECT_NE(job.error().find("outside this worker's data roots (" + fs::canonical(allowed).string() + ")"),
              std::string::npos) << job.error();
  }
}

// Another job's checkpoints and export sit in the worker's checkpoint root: a job that
// names that export (or a folder of the worker's work dir) fails at once naming it, even on
// a worker that allows any path; a worker whose data root holds its checkpoint root
// refuses to start.
TEST(PathConfinementTest, AJobNamingAnotherJobsExportOrTheWorkDirIsRefused) {
  Cluster cluster("confine-own");
  const std::string data = cluster.MakeData(8);
  cluster.StartCoordinator();
  cluster.StartWorker("node1", 1);  // --allow-any-path
  const std::string tiny = "model: {arch: transformer_classifier, layers: 1, d_model: 16, heads: 2, ffn: 32, max_len: 32";
  v1::Job source;
  ASSERT_TRUE(cluster.Submit(tiny + "}\ndata: {path: " + data + ", tokenizer: {vocab_size: 64}}\n"
                             "train: {epochs: 1, threads: 1}\n", &source).ok());
  source = cluster.WaitForEnd(source.id(), 120);
  ASSERT_EQ(source.state(), v1::SUCCEEDED) << source.error();
  const std::string model = cluster.dir() + "/checkpoints/" + source.id() + "/model";
  ASSERT_TRUE(fs::exists(model + "/model.safetensors")) << model;
  for (const std::string& spec : {tiny + ", init_from: " + model + "}\ndata: {path: " + data + "}\n",
                                  tiny + "}\ndata: {path: " + cluster.dir() + "/node1}\n"}) {
    v1::Job job;
    ASSERT_TRUE(cluster.Submit(spec + "restart: {max_restarts: 3}\n", &job).ok());
    job = cluster.WaitForEnd(job.id(), 60);
    EXPECT_EQ(job.state(), v1::FAILED) << spec;
    EXPECT_EQ(job.restarts(), 0) << spec;
    EXPECT_NE(job.error().find("inside this worker's own"), std::string::npos) << job.error();
  }
  std::string out;
  EXPECT_NE(Cluster::Shell("timeout 20 " + cluster.Bin("nightshift-worker") + " --coordinator " + cluster.address() +
                               " --name node2 --work-dir " + cluster.dir() + "/node2 --checkpoint-root " +
                               cluster.dir() + "/checkpoints --data-root " + cluster.dir() + " 2>&1",
                           &out),
            0);
  EXPECT_NE(out.find("--data-root " + fs::canonical(cluster.dir()).string() + " and the worker's own"),
            std::string::npos)
      << out;
}

// A worker started with no --data-root (the default) reads no path a job names: a job
// pointing at the worker's own files (its work dir, where caches and configs live) fails
// at once naming --data-root, where before it would have read them and handed them back
// inside the model.
TEST(PathConfinementTest, ADefaultWorkerRefusesEveryPathAJobNames) {
  Cluster cluster("confine-default");
  const std::string data = cluster.MakeData(3, "mine");
  cluster.StartCoordinator();
  cluster.StartWorker("node1", 1, {}, {"--no-data-root"});
  for (const std::string& path : {data, cluster.dir() + "/node1"}) {
    v1::Job job;
    ASSERT_TRUE(cluster.Submit("model: {arch: transformer_classifier}\ndata: {path: '" + path +
                                   "'}\nrestart: {max_restarts: 3}\n", &job).ok());
    job = cluster.WaitForEnd(job.id(), 60);
    EXPECT_EQ(job.state(), v1::FAILED) << path;
    EXPECT_EQ(job.restarts(), 0) << path;
    EXPECT_NE(job.error().find("has no --data-root"), std::string::npos) << job.error();
  }
}

}  // namespace
}  // namespace nightshift::testing_e2e
