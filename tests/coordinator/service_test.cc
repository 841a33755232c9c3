// The coordinator's gRPC services in process, on 127.0.0.1 with a port the server picks:
// callers are told apart by their bearer tokens (coordinator/auth.h), and the services
// translate between the protos and the Coordinator's calls. Time is a fake clock; the
// job store is in memory.
#include "coordinator/service.h"

#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/client.h"
#include "tests/common/fake_clock.h"
#include "tests/common/fake_job_store.h"

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
             << Sha256Hex("worker-secret") << " worker node1\n";
    }
    auto auth = Authenticator::Open(dir_ + "/tokens");
    ASSERT_TRUE(auth.ok()) << auth.status().ToString();
    auth_ = std::move(auth.value());
    CoordinatorOptions options;
    options.clock = &clock_;
    auto c = Coordinator::Open(options, std::make_unique<FakeJobStore>(std::make_shared<FakeJobStore::Disk>()));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    c_ = std::move(c.value());
    jobs_ = std::make_unique<JobServiceImpl>(c_.get(), nullptr, auth_.get());
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
  std::shared_ptr<grpc::Channel> As(const std::string& token) {
    ClientOptions o;
    o.address = "127.0.0.1:" + std::to_string(port_);
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

}  // namespace
}  // namespace nightshift
