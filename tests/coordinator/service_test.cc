// The coordinator's gRPC services in process, on 127.0.0.1 with a port the server picks:
// callers are told apart by their bearer tokens (coordinator/auth.h), and the services
// translate between the protos and the Coordinator's calls. Time is a fake clock; the
// job store is in memory.
#include "coordinator/allocation_tokens.h"
#include "coordinator/service.h"

#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "common/client.h"
#include "common/file_access.h"
#include "coordinator/sweep_spec.h"
#include "tests/common/fake_clock.h"
#include "tests/common/fake_job_store.h"
#include "tests/common/test_model_folder.h"
#include "worker/file_service.h"

namespace nightshift {
namespace {

const char* kSpec = "model: {arch: transformer_classifier}\ndata: {path: /data}\n";

class CoordinatorServiceTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "/coord-service." + std::to_string(::getpid()) + "." +
           testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(dir_);
    {
      std::ofstream tokens(dir_ + "/tokens");
      tokens << Sha256Hex("alice-secret") << " user alice\n"
             << Sha256Hex("bob-secret") << " user bob\n"
             << Sha256Hex("worker-secret") << " worker node1\n"
             << Sha256Hex("worker2-secret") << " worker node2\n"
             << Sha256Hex("admin-secret") << " admin root\n";
    }
    auto auth = Authenticator::Open(dir_ + "/tokens");
    ASSERT_TRUE(auth.ok()) << auth.status().ToString();
    auth_ = std::move(auth.value());
    CoordinatorOptions options;
    options.clock = &clock_;
    auto c = Coordinator::Open(options, std::make_unique<FakeJobStore>(std::make_shared<FakeJobStore::Disk>()));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    c_ = std::move(c.value());
    jobs_ = std::make_unique<JobServiceImpl>(c_.get(), nullptr, auth_.get(), JobServiceOptions{dir_ + "/shared"});
    workers_ = std::make_unique<WorkerServiceImpl>(c_.get(), nullptr, auth_.get());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(jobs_.get());
    builder.RegisterService(workers_.get());
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_ != nullptr && port_ != 0);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    std::filesystem::remove_all(dir_);
  }
  // A channel to our server (or to the one on `port`) that sends `token`.
  std::shared_ptr<grpc::Channel> As(const std::string& token, int port = 0) {
    ClientOptions o;
    o.address = "127.0.0.1:" + std::to_string(port != 0 ? port : port_);
    o.token = token;
    auto channel = MakeChannel(o);
    EXPECT_TRUE(channel.ok()) << channel.status().ToString();
    return channel.value();
  }
  static std::unique_ptr<grpc::ClientContext> Ctx() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return ctx;
  }
  v1::Job Submit(const std::string& token) {
    v1::SubmitJobRequest req;
    req.set_spec_yaml(kSpec);
    v1::Job job;
    grpc::Status s = v1::JobService::NewStub(As(token))->SubmitJob(Ctx().get(), req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }
  v1::Job Get(const std::string& token, const std::string& id) {
    v1::GetJobRequest req;
    req.set_id(id);
    v1::Job job;
    grpc::Status s = v1::JobService::NewStub(As(token))->GetJob(Ctx().get(), req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }

  std::string dir_;
  FakeClock clock_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<Coordinator> c_;
  std::unique_ptr<JobServiceImpl> jobs_;
  std::unique_ptr<WorkerServiceImpl> workers_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// A SubmitJob whose reply is lost after the job was stored (the injected fault answers
// UNAVAILABLE) and is then retried with the same request_id gets that job, not a second.
TEST_F(CoordinatorServiceTest, ALostSubmitReplyRetriedWithItsRequestIdGivesTheSameJob) {
  JobServiceOptions dropping_options;
  dropping_options.faults.drop_submit_reply = 1.0;
  JobServiceImpl dropping(c_.get(), nullptr, auth_.get(), dropping_options);
  int drop_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &drop_port);
  builder.RegisterService(&dropping);
  auto drop_server = builder.BuildAndStart();
  ASSERT_TRUE(drop_server != nullptr && drop_port != 0);

  v1::SubmitJobRequest req;
  req.set_spec_yaml(kSpec);
  req.set_request_id("r-1");
  v1::Job job;
  grpc::Status lost = v1::JobService::NewStub(As("alice-secret", drop_port))->SubmitJob(Ctx().get(), req, &job);
  EXPECT_EQ(lost.error_code(), grpc::StatusCode::UNAVAILABLE) << lost.error_message();
  drop_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));

  auto alice = v1::JobService::NewStub(As("alice-secret"));
  ASSERT_TRUE(alice->SubmitJob(Ctx().get(), req, &job).ok());
  v1::Job again;
  ASSERT_TRUE(alice->SubmitJob(Ctx().get(), req, &again).ok());
  EXPECT_EQ(again.id(), job.id());
  EXPECT_EQ(job.request_id(), "r-1");
  v1::ListJobsResponse list;
  ASSERT_TRUE(alice->ListJobs(Ctx().get(), v1::ListJobsRequest(), &list).ok());
  ASSERT_EQ(list.jobs_size(), 1);
  EXPECT_EQ(list.jobs(0).id(), job.id());

  req.set_spec_yaml(std::string(kSpec) + "priority: 3\n");
  grpc::Status other = alice->SubmitJob(Ctx().get(), req, &again);
  EXPECT_EQ(other.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(other.error_message().rfind("request_id: ", 0), 0u) << other.error_message();
  // Request ids are per owner: bob's "r-1" is a job of his own.
  req.set_spec_yaml(kSpec);
  v1::Job bobs;
  ASSERT_TRUE(v1::JobService::NewStub(As("bob-secret"))->SubmitJob(Ctx().get(), req, &bobs).ok());
  EXPECT_NE(bobs.id(), job.id());
}

// A user cannot jump every queue: priority 1000000 is refused naming the ceiling; an
// admin may go above it.
TEST_F(CoordinatorServiceTest, AUserAtPriorityOneMillionIsRefusedAnAdminIsNot) {
  v1::SubmitJobRequest req;
  req.set_spec_yaml(std::string(kSpec) + "priority: 1000000\n");
  v1::Job job;
  grpc::Status s = v1::JobService::NewStub(As("alice-secret"))->SubmitJob(Ctx().get(), req, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_EQ(s.error_message().rfind("priority: 1000000 is above 100", 0), 0u) << s.error_message();
  EXPECT_NE(s.error_message().find("--max-user-priority"), std::string::npos) << s.error_message();
  EXPECT_TRUE(c_->List(JobQuery())->jobs.empty());
  ASSERT_TRUE(v1::JobService::NewStub(As("admin-secret"))->SubmitJob(Ctx().get(), req, &job).ok());
  EXPECT_EQ(job.spec().priority(), 1000000);
  req.set_spec_yaml(std::string(kSpec) + "priority: 100\n");  // at the ceiling: allowed
  EXPECT_TRUE(v1::JobService::NewStub(As("alice-secret"))->SubmitJob(Ctx().get(), req, &job).ok());
}

// A 3 MiB cancel reason (under gRPC's 4 MiB) is refused naming the field.
TEST_F(CoordinatorServiceTest, AThreeMiBCancelReasonIsRefused) {
  const v1::Job job = Submit("alice-secret");
  v1::CancelJobRequest req;
  req.set_id(job.id());
  req.set_reason(std::string(3 << 20, 'x'));
  v1::Job out;
  grpc::Status s = v1::JobService::NewStub(As("alice-secret"))->CancelJob(Ctx().get(), req, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_EQ(s.error_message().rfind("reason: ", 0), 0u) << s.error_message();
  EXPECT_EQ(Get("alice-secret", job.id()).state(), v1::QUEUED);
}

// DeleteJob: owner or admin, finished jobs only.
TEST_F(CoordinatorServiceTest, DeleteJobIsTheOwnersAndOnlyForFinishedJobs) {
  const v1::Job job = Submit("alice-secret");
  v1::DeleteJobRequest req;
  req.set_id(job.id());
  v1::DeleteJobResponse out;
  auto alice = v1::JobService::NewStub(As("alice-secret"));
  grpc::Status s = alice->DeleteJob(Ctx().get(), req, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  ASSERT_TRUE(c_->Cancel(job.id(), "").ok());
  s = v1::JobService::NewStub(As("bob-secret"))->DeleteJob(Ctx().get(), req, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  ASSERT_TRUE(alice->DeleteJob(Ctx().get(), req, &out).ok());
  EXPECT_EQ(c_->Get(job.id()).status().code(), Status::kNotFound);
}

// Open WatchJob streams of one job: each one answered with the job (accepted), or ended
// at once with the refusal.
class Watches {
 public:
  explicit Watches(std::shared_ptr<grpc::Channel> channel) : stub_(v1::JobService::NewStub(std::move(channel))) {}
  ~Watches() {
    for (auto& ctx : contexts_) ctx->TryCancel();
    for (auto& r : readers_) r->Finish();
  }
  // Opens one more; OK while it stays open, else the call's status.
  grpc::Status Open(const std::string& id) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    v1::WatchJobRequest req;
    req.set_id(id);
    auto reader = stub_->WatchJob(ctx.get(), req);
    v1::Job job;
    if (!reader->Read(&job)) return reader->Finish();
    contexts_.push_back(std::move(ctx));
    readers_.push_back(std::move(reader));
    return grpc::Status::OK;
  }
  // Closes the oldest open one.
  void CloseOne() {
    contexts_.front()->TryCancel();
    readers_.front()->Finish();
    contexts_.erase(contexts_.begin());
    readers_.erase(readers_.begin());
  }
  // Opens one, retrying for up to 5 s while the server has not yet seen a closed one end.
  grpc::Status OpenWithin5s(const std::string& id) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    grpc::Status s;
    do {
      s = Open(id);
      if (s.ok()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } while (std::chrono::steady_clock::now() < deadline);
    return s;
  }

 private:
  std::unique_ptr<v1::JobService::Stub> stub_;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts_;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::Job>>> readers_;
};

// The attacker opens streams until refused: with the defaults (64 per user) the 65th of
// one user is RESOURCE_EXHAUSTED naming the limit, not all of them are served; closing
// one lets the next one in.
TEST_F(CoordinatorServiceTest, AUsersOpenStreamsAreCappedAtTheDefaultOf64) {
  const v1::Job job = Submit("alice-secret");
  Watches watches(As("alice-secret"));
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(watches.Open(job.id()).ok()) << "stream " << i;
  grpc::Status refused = watches.Open(job.id());
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("--max-streams-per-user 64"), std::string::npos) << refused.error_message();
  watches.CloseOne();
  EXPECT_TRUE(watches.OpenWithin5s(job.id()).ok());
}

// Per user and in all, for every kind of stream: with 2 per user and 3 in all, alice's
// third is refused, bob gets one, then the total is full for him too; a stream that ends
// gives its slot back.
TEST_F(CoordinatorServiceTest, StreamsAreCappedPerUserAndInAll) {
  JobServiceOptions capped_options;
  capped_options.streams = StreamLimitOptions{2, 3};
  JobServiceImpl capped(c_.get(), nullptr, auth_.get(), capped_options);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&capped);
  auto server = builder.BuildAndStart();
  ASSERT_TRUE(server != nullptr && port != 0);
  const v1::Job alices = Submit("alice-secret");
  const v1::Job bobs = Submit("bob-secret");
  {
    Watches alice(As("alice-secret", port)), bob(As("bob-secret", port));
    ASSERT_TRUE(alice.Open(alices.id()).ok());
    ASSERT_TRUE(alice.Open(alices.id()).ok());
    grpc::Status s = alice.Open(alices.id());
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(s.error_message().find("--max-streams-per-user 2"), std::string::npos) << s.error_message();
    ASSERT_TRUE(bob.Open(bobs.id()).ok());
    s = bob.Open(bobs.id());
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(s.error_message().find("--max-streams 3"), std::string::npos) << s.error_message();
    // Logs count too.
    v1::StreamLogsRequest logs;
    logs.set_id(bobs.id());
    grpc::ClientContext ctx;
    auto reader = v1::JobService::NewStub(As("bob-secret", port))->StreamLogs(&ctx, logs);
    v1::LogLines lines;
    EXPECT_FALSE(reader->Read(&lines));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    alice.CloseOne();
    EXPECT_TRUE(bob.OpenWithin5s(bobs.id()).ok());
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

// Per-user fair share end to end: each user's token makes them the owner of what they
// submit, and with two free slots and alice's three jobs queued before bob's one, the
// second slot goes to bob, who holds fewer.
TEST_F(CoordinatorServiceTest, FreeSlotsGoToTheUserHoldingFewest) {
  std::vector<std::string> alice;
  for (int i = 0; i < 3; ++i) alice.push_back(Submit("alice-secret").id());
  const v1::Job bob = Submit("bob-secret");
  EXPECT_EQ(bob.owner(), "bob");
  EXPECT_EQ(Get("alice-secret", alice[0]).owner(), "alice");

  auto worker = v1::WorkerService::NewStub(As("worker-secret"));
  v1::RegisterRequest reg;
  reg.set_name("node1");
  reg.set_slots(2);
  v1::RegisterResponse registered;
  ASSERT_TRUE(worker->Register(Ctx().get(), reg, &registered).ok());
  EXPECT_EQ(registered.heartbeat_interval_ms(), CoordinatorOptions().heartbeat_interval_ms);
  c_->Tick();
  EXPECT_EQ(Get("alice-secret", alice[0]).state(), v1::SCHEDULED);
  EXPECT_EQ(Get("bob-secret", bob.id()).state(), v1::SCHEDULED);
  EXPECT_EQ(Get("alice-secret", alice[1]).state(), v1::QUEUED);
  EXPECT_EQ(Get("alice-secret", alice[2]).state(), v1::QUEUED);

  // The worker is told to start exactly those two.
  v1::HeartbeatRequest hb;
  hb.set_name("node1");
  v1::HeartbeatResponse orders;
  ASSERT_TRUE(worker->Heartbeat(Ctx().get(), hb, &orders).ok());
  std::set<std::string> started;
  for (const auto& a : orders.start()) started.insert(a.task().job_id());
  EXPECT_EQ(started, (std::set<std::string>{alice[0], bob.id()}));
}

// ListJobs: page_size and page_token are the service's to translate; bad ones are
// refused naming the field.
TEST_F(CoordinatorServiceTest, ListJobsPagesWithTokens) {
  for (int i = 0; i < 5; ++i) Submit("alice-secret");
  Submit("bob-secret");
  auto jobs = v1::JobService::NewStub(As("alice-secret"));
  v1::ListJobsRequest req;
  req.set_page_size(2);
  std::vector<std::string> ids;
  do {
    v1::ListJobsResponse page;
    ASSERT_TRUE(jobs->ListJobs(Ctx().get(), req, &page).ok());
    EXPECT_LE(page.jobs_size(), 2);
    for (const auto& j : page.jobs()) ids.push_back(j.id());
    req.set_page_token(page.next_page_token());
  } while (!req.page_token().empty());
  EXPECT_EQ(ids.size(), 5u);  // alice's only
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));

  v1::ListJobsResponse out;
  req.set_page_token("not-a-token");
  grpc::Status s = jobs->ListJobs(Ctx().get(), req, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("page_token"), std::string::npos) << s.error_message();
  req.set_page_token("");
  req.set_page_size(1001);
  s = jobs->ListJobs(Ctx().get(), req, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("page_size"), std::string::npos) << s.error_message();
}

// ListSweeps pages as ListJobs does, and a page also stops before 2 MiB (a sweep holds up
// to 1,000 trials; a reply of every sweep would pass gRPC's 4 MiB); a user's own only, no
// events; bad page fields refused naming them.
TEST_F(CoordinatorServiceTest, ListSweepsPagesByCountAndBytes) {
  StatusOr<v1::SweepSpec> spec = LoadSweepSpec(std::string("base: {") + "model: {arch: transformer_classifier}, " +
                                               "data: {path: /data}}\nsearch: {train.lr: {uniform: [0.001, 0.01]}}\n" +
                                               "metric: val_loss\nmethod: random\nmax_trials: 1000\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  std::vector<std::string> made;
  for (int i = 0; i < 5; ++i) {
    StatusOr<v1::Sweep> sweep = c_->SubmitSweep(*spec, "alice");
    ASSERT_TRUE(sweep.ok()) << sweep.status().ToString();
    made.push_back(sweep->id());
    if (i >= 3) continue;
    for (int t = 0; t < 1000; ++t) {  // the first three: 1,000 trials of ~900 bytes each
      v1::Trial* trial = sweep->add_trials();
      trial->set_index(t);
      (*trial->mutable_params())["model.note"] = std::string(900, 'x');
    }
    sweep->add_events()->set_text("an event");
    ASSERT_TRUE(c_->UpdateSweep(*sweep).ok());
  }
  ASSERT_TRUE(c_->SubmitSweep(*spec, "bob").ok());

  auto jobs = v1::JobService::NewStub(As("alice-secret"));
  const auto list = [&](int page_size, std::vector<int>* sizes) {
    v1::ListSweepsRequest req;
    req.set_page_size(page_size);
    std::vector<std::string> ids;
    do {
      v1::ListSweepsResponse page;
      grpc::Status s = jobs->ListSweeps(Ctx().get(), req, &page);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (!s.ok()) break;
      EXPECT_LE(page.ByteSizeLong(), 2u << 20);
      sizes->push_back(page.sweeps_size());
      for (const v1::Sweep& w : page.sweeps()) {
        ids.push_back(w.id());
        EXPECT_EQ(w.events_size(), 0);
      }
      req.set_page_token(page.next_page_token());
    } while (!req.page_token().empty());
    return ids;
  };
  std::vector<int> sizes;
  EXPECT_EQ(list(0, &sizes), made);  // default size 10, cut by bytes: 2 large, 1 large + 2 small
  EXPECT_EQ(sizes, (std::vector<int>{2, 3}));
  sizes.clear();
  EXPECT_EQ(list(1, &sizes), made);
  EXPECT_EQ(sizes, (std::vector<int>{1, 1, 1, 1, 1}));

  v1::ListSweepsRequest req;
  v1::ListSweepsResponse out;
  req.set_page_token("not-a-token");
  grpc::Status s = jobs->ListSweeps(Ctx().get(), req, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("page_token"), std::string::npos) << s.error_message();
  req.set_page_token("");
  req.set_page_size(101);
  s = jobs->ListSweeps(Ctx().get(), req, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("page_size"), std::string::npos) << s.error_message();
}

// Every chunk of one GetArtifacts call, reassembled by file; the call's status.
grpc::Status Download(v1::JobService::Stub* stub, const std::string& id, std::map<std::string, std::string>* files,
                      v1::ArtifactChunk* first) {
  grpc::ClientContext ctx;
  v1::GetArtifactsRequest req;
  req.set_id(id);
  auto reader = stub->GetArtifacts(&ctx, req);
  v1::ArtifactChunk chunk;
  files->clear();
  bool is_first = true;
  while (reader->Read(&chunk)) {
    if (is_first) *first = chunk;
    else (*files)[chunk.file()] += chunk.data();
    is_first = false;
  }
  return reader->Finish();
}

// GetArtifacts end to end over real servers: the model relayed from the worker's log
// service (its real ReadModel over a folder in its checkpoint root), then, once that
// worker is gone, UNAVAILABLE naming it, then read from the shared checkpoint root; the
// owner only; FAILED_PRECONDITION naming the state before there is a model.
TEST_F(CoordinatorServiceTest, GetArtifactsFromTheWorkerOrTheSharedRoot) {
  const v1::Job job = Submit("alice-secret");
  auto alice = v1::JobService::NewStub(As("alice-secret"));
  auto bob = v1::JobService::NewStub(As("bob-secret"));
  std::map<std::string, std::string> got;
  v1::ArtifactChunk first;
  grpc::Status s = Download(alice.get(), job.id(), &got, &first);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("QUEUED"), std::string::npos) << s.error_message();

  // The worker's log service, serving its checkpoint root.
  FileServiceAuth file_auth;
  FileServiceImpl logs(&file_auth, dir_ + "/worker", [](const std::string&) { return false; }, dir_ + "/worker-ckpt");
  int log_port = 0;
  grpc::ServerBuilder b;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &log_port);
  b.RegisterService(&logs);
  auto log_server = b.BuildAndStart();
  ASSERT_TRUE(log_server != nullptr && log_port != 0);
  const auto files = testing_model::WriteModelFolder(dir_ + "/worker-ckpt/" + job.id() + "/model");
  ASSERT_EQ(files.size(), 3u);

  auto worker = v1::WorkerService::NewStub(As("worker-secret"));
  v1::RegisterRequest reg;
  reg.set_name("node1");
  reg.set_slots(1);
  reg.set_log_address("127.0.0.1:" + std::to_string(log_port));
  v1::RegisterResponse registered;
  ASSERT_TRUE(worker->Register(Ctx().get(), reg, &registered).ok());
  ASSERT_EQ(registered.file_service_key().size(), 64u);
  file_auth.SetKey(registered.file_service_key());  // what the worker's agent does
  c_->Tick();
  v1::HeartbeatRequest hb;
  hb.set_name("node1");
  v1::HeartbeatResponse orders;
  ASSERT_TRUE(worker->Heartbeat(Ctx().get(), hb, &orders).ok());
  v1::ReportTaskRequest report;
  report.set_name("node1");
  report.mutable_status()->mutable_task()->set_job_id(job.id());
  report.mutable_status()->set_state(v1::TASK_SUCCEEDED);
  report.mutable_status()->set_model_path(dir_ + "/worker-ckpt/" + job.id() + "/model");
  report.mutable_status()->set_model_step(40);
  v1::ReportTaskResponse ack;
  ASSERT_TRUE(worker->ReportTask(Ctx().get(), report, &ack).ok());
  ASSERT_EQ(Get("alice-secret", job.id()).state(), v1::SUCCEEDED);

  s = Download(bob.get(), job.id(), &got, &first);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  s = Download(alice.get(), job.id(), &got, &first);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(got, files);
  EXPECT_EQ(first.step(), 40);
  EXPECT_EQ(first.checksums_json(), testing_model::ReadFile(dir_ + "/worker-ckpt/" + job.id() + "/model/checksums.json"));
  // Straight to the worker's file service, as anyone on its network could: refused
  // without the key the coordinator holds, with a made-up one, and with a capability.
  auto direct = v1::WorkerFileService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(log_port), grpc::InsecureChannelCredentials()));
  for (const std::string& credentials : {std::string(), std::string("Bearer guess"),
                                         "Bearer cap:" + ReadCheckpointCapability(registered.file_service_key(), job.id())}) {
    grpc::ClientContext ctx;
    if (!credentials.empty()) ctx.AddMetadata("authorization", credentials);
    v1::ReadModelRequest read;
    read.set_job_id(job.id());
    auto reader = direct->ReadModel(&ctx, read);
    v1::ArtifactChunk chunk;
    int chunks = 0;
    while (reader->Read(&chunk)) ++chunks;
    const grpc::Status refused = reader->Finish();
    EXPECT_EQ(chunks, 0) << credentials;
    EXPECT_TRUE(refused.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
                refused.error_code() == grpc::StatusCode::PERMISSION_DENIED)
        << credentials << ": " << refused.error_message();
  }

  // The worker goes silent past its lease.
  log_server->Shutdown();
  clock_.Advance(std::chrono::seconds(60));
  c_->Tick();
  s = Download(alice.get(), job.id(), &got, &first);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("worker node1"), std::string::npos) << s.error_message();
  // A copy under the shared checkpoint root serves without the worker.
  std::filesystem::create_directories(dir_ + "/shared/" + job.id());
  std::filesystem::copy(dir_ + "/worker-ckpt/" + job.id() + "/model", dir_ + "/shared/" + job.id() + "/model");
  s = Download(alice.get(), job.id(), &got, &first);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(got, files);

  v1::GetJobMetricsRequest mreq;
  mreq.set_id(job.id());
  v1::JobMetrics metrics;
  EXPECT_TRUE(alice->GetJobMetrics(Ctx().get(), mreq, &metrics).ok());
  EXPECT_EQ(metrics.job_id(), job.id());
  EXPECT_EQ(bob->GetJobMetrics(Ctx().get(), mreq, &metrics).error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

// A worker token names its worker: with node1's token one cannot register, heartbeat
// (every attempt on node2 would fail) or report (a forged SUCCEEDED) as node2.
TEST_F(CoordinatorServiceTest, AWorkerTokenActsAsItsOwnWorkerOnly) {
  const v1::Job job = Submit("alice-secret");
  auto node2 = v1::WorkerService::NewStub(As("worker2-secret"));
  v1::RegisterRequest reg;
  reg.set_name("node2");
  reg.set_slots(1);
  reg.set_log_address("127.0.0.1:1");
  v1::RegisterResponse registered;
  ASSERT_TRUE(node2->Register(Ctx().get(), reg, &registered).ok());
  c_->Tick();
  ASSERT_EQ(Get("alice-secret", job.id()).state(), v1::SCHEDULED);

  auto node1 = v1::WorkerService::NewStub(As("worker-secret"));
  grpc::Status s = node1->Register(Ctx().get(), reg, &registered);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_NE(s.error_message().find("may not act as worker node2"), std::string::npos) << s.error_message();
  v1::HeartbeatRequest hb;
  hb.set_name("node2");
  v1::HeartbeatResponse orders;
  EXPECT_EQ(node1->Heartbeat(Ctx().get(), hb, &orders).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  v1::ReportTaskRequest report;
  report.set_name("node2");
  report.mutable_status()->mutable_task()->set_job_id(job.id());
  report.mutable_status()->set_state(v1::TASK_SUCCEEDED);
  v1::ReportTaskResponse ack;
  EXPECT_EQ(node1->ReportTask(Ctx().get(), report, &ack).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // As itself, node1 holds no part of the job: its report changes nothing.
  report.set_name("node1");
  reg.set_name("node1");
  ASSERT_TRUE(node1->Register(Ctx().get(), reg, &registered).ok());
  ASSERT_TRUE(node1->ReportTask(Ctx().get(), report, &ack).ok());
  EXPECT_EQ(Get("alice-secret", job.id()).state(), v1::SCHEDULED);
  // An admin may act as any worker (operators' tools, insecure mode).
  auto admin = v1::WorkerService::NewStub(As("admin-secret"));
  hb.set_name("node2");
  EXPECT_TRUE(admin->Heartbeat(Ctx().get(), hb, &orders).ok());
}

// An allocation's token (--cluster slurm|kubernetes) acts as its own attempt's workers
// only: it registers "<job>-a<attempt>-..." serving that allocation, never another job's
// or attempt's, nor a worker outside allocations; a worker token cannot register an
// allocation's worker (it would be served that job's ranks); a forged token is unknown.
TEST_F(CoordinatorServiceTest, AnAllocationTokenActsAsItsAttemptsWorkersOnly) {
  auto tokens = AllocationTokens::Open(dir_ + "/allocation-secret");
  ASSERT_TRUE(tokens.ok()) << tokens.status().message();
  auth_->TrustAllocations(&tokens.value());
  const std::string j1 = Submit("alice-secret").id(), j2 = Submit("alice-secret").id();
  const auto reg = [](const std::string& name, const std::string& job, int attempt) {
    v1::RegisterRequest r;
    r.set_name(name);
    r.set_slots(1);
    r.set_log_address("127.0.0.1:1");
    if (!job.empty()) {
      r.mutable_allocation()->set_job_id(job);
      r.mutable_allocation()->set_attempt(attempt);
      r.mutable_allocation()->set_cluster_id("1234");
    }
    return r;
  };
  v1::RegisterResponse registered;
  auto alloc = v1::WorkerService::NewStub(As(tokens->For(j1, 0)));
  grpc::Status s = alloc->Register(Ctx().get(), reg(j1 + "-a0-node1", j1, 0), &registered);
  EXPECT_TRUE(s.ok()) << s.error_message();
  s = alloc->Register(Ctx().get(), reg(j2 + "-a0-node1", j2, 0), &registered);  // another job
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_NE(s.error_message().find("may not act as worker " + j2 + "-a0-node1"), std::string::npos) << s.error_message();
  s = alloc->Register(Ctx().get(), reg(j1 + "-a0-node2", j1, 1), &registered);  // its name, another attempt
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  s = alloc->Register(Ctx().get(), reg(j1 + "-a0-node2", "", 0), &registered);  // outside any allocation
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  s = alloc->Register(Ctx().get(), reg("node1", "", 0), &registered);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  v1::HeartbeatRequest hb;
  hb.set_name(j1 + "-a0-node1");
  v1::HeartbeatResponse orders;
  EXPECT_TRUE(alloc->Heartbeat(Ctx().get(), hb, &orders).ok());
  hb.set_name("node1");
  EXPECT_EQ(alloc->Heartbeat(Ctx().get(), hb, &orders).error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // A worker token, whatever name it carries, registers no allocation's worker.
  auto node1 = v1::WorkerService::NewStub(As("worker-secret"));
  s = node1->Register(Ctx().get(), reg("node1", j1, 0), &registered);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_NE(s.error_message().find("NIGHTSHIFT_ALLOCATION_TOKEN"), std::string::npos) << s.error_message();
  EXPECT_TRUE(node1->Register(Ctx().get(), reg("node1", "", 0), &registered).ok());

  // Forged: another secret's token, the attempt changed, the MAC cut short.
  const AllocationTokens other("00" + std::string(62, 'f'));
  std::string changed = tokens->For(j1, 0);
  changed.replace(changed.find(":0:"), 3, ":1:");
  for (const std::string& forged : {other.For(j1, 0), changed, tokens->For(j1, 0).substr(0, 40)}) {
    s = v1::WorkerService::NewStub(As(forged))->Register(Ctx().get(), reg(j1 + "-a0-node3", j1, 0), &registered);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << forged << ": " << s.error_message();
  }
  // A token never expires, but once its attempt is over it registers nothing.
  ASSERT_TRUE(c_->Cancel(j1, "").ok());
  s = alloc->Register(Ctx().get(), reg(j1 + "-a0-node4", j1, 0), &registered);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_NE(s.error_message().find("attempt of the job is over"), std::string::npos) << s.error_message();
  // The secret outlives the coordinator: opened again, the same tokens.
  auto again = AllocationTokens::Open(dir_ + "/allocation-secret");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->For(j1, 0), tokens->For(j1, 0));
  EXPECT_NE(tokens->For(j1, 0), tokens->For(j1, 1));
  EXPECT_EQ(std::filesystem::status(dir_ + "/allocation-secret").permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

// A TorchScript module is the user's code, run on the workers as the worker's user: a
// user may submit one only where the admin enabled it, for everyone or for them.
TEST_F(CoordinatorServiceTest, TorchScriptNeedsTheAdminsConsent) {
  v1::SubmitJobRequest req;
  req.set_spec_yaml("model: {arch: torchscript, path: /data/module.pt}\ndata: {path: /data}\n");
  v1::Job job;
  grpc::Status s = v1::JobService::NewStub(As("alice-secret"))->SubmitJob(Ctx().get(), req, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_NE(s.error_message().find("--allow-torchscript"), std::string::npos) << s.error_message();
  EXPECT_TRUE(v1::JobService::NewStub(As("admin-secret"))->SubmitJob(Ctx().get(), req, &job).ok());

  SubmitPolicy policy;
  policy.torchscript_users = {"bob"};
  JobServiceOptions enabled_options;
  enabled_options.policy = policy;
  JobServiceImpl enabled(c_.get(), nullptr, auth_.get(), enabled_options);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&enabled);
  auto server = builder.BuildAndStart();
  ASSERT_TRUE(server != nullptr && port != 0);
  EXPECT_TRUE(v1::JobService::NewStub(As("bob-secret", port))->SubmitJob(Ctx().get(), req, &job).ok());
  EXPECT_EQ(v1::JobService::NewStub(As("alice-secret", port))->SubmitJob(Ctx().get(), req, &job).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

// The log address a worker token registers is where the coordinator fetches that
// worker's logs, models and checkpoints from: it must be on the caller's own host.
TEST_F(CoordinatorServiceTest, AWorkerTokensLogAddressMustBeOnTheHostItCallsFrom) {
  auto node1 = v1::WorkerService::NewStub(As("worker-secret"));
  v1::RegisterRequest reg;
  reg.set_name("node1");
  reg.set_slots(1);
  reg.set_log_address("198.18.0.66:7000");  // never contacted: refused before
  v1::RegisterResponse registered;
  grpc::Status s = node1->Register(Ctx().get(), reg, &registered);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_NE(s.error_message().find("log_address"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("127.0.0.1"), std::string::npos) << s.error_message();
  reg.set_log_address("127.0.0.1:7000");
  EXPECT_TRUE(node1->Register(Ctx().get(), reg, &registered).ok());
  reg.set_log_address("localhost:7000");  // a name that resolves to the caller
  EXPECT_TRUE(node1->Register(Ctx().get(), reg, &registered).ok());
  reg.set_log_address("198.18.0.66:7000");
  EXPECT_TRUE(v1::WorkerService::NewStub(As("admin-secret"))->Register(Ctx().get(), reg, &registered).ok());
}

// The worker serves only the job's own model folder: ids that climb out are refused.
TEST(LogServiceModelTest, ServesOnlyTheJobsModelFolder) {
  const std::string root = testing::TempDir() + "/logsvc-model." + std::to_string(::getpid());
  std::filesystem::remove_all(root);
  testing_model::WriteModelFolder(root + "/ckpt/j-000001/model");
  FileServiceAuth file_auth;
  file_auth.SetKey("the-key");
  FileServiceImpl logs(&file_auth, root, [](const std::string&) { return false; }, root + "/ckpt");
  int port = 0;
  grpc::ServerBuilder b;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(&logs);
  auto server = b.BuildAndStart();
  auto stub = v1::WorkerFileService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  auto read = [&](const std::string& id) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer the-key");
    v1::ReadModelRequest req;
    req.set_job_id(id);
    auto reader = stub->ReadModel(&ctx, req);
    v1::ArtifactChunk chunk;
    int n = 0;
    while (reader->Read(&chunk)) ++n;
    grpc::Status s = reader->Finish();
    return std::make_pair(s.error_code(), n);
  };
  EXPECT_EQ(read("j-000001").first, grpc::StatusCode::OK);
  EXPECT_GT(read("j-000001").second, 3);
  EXPECT_EQ(read("../ckpt/j-000001").first, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(read("j-000002").first, grpc::StatusCode::NOT_FOUND);
  server->Shutdown();
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace nightshift
