// Checkpoint copies between workers (worker/checkpoint_copy.h): a real WorkerFileService
// on 127.0.0.1 serves one worker's checkpoint folder; a CheckpointCopier copies into
// another's. What arrives must be byte for byte what was written, checked against the
// manifest; a damaged file is refused with nothing left behind; a job running on the
// copying worker is not touched.
#include "worker/checkpoint_copy.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <atomic>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "common/file_access.h"
#include "common/format/checkpoint_layout.h"
#include "common/format/checkpoint_manifest.h"
#include "nightshift/v1/cluster.grpc.pb.h"
#include "tests/common/fake_clock.h"
#include "tests/worker/test_dirs.h"
#include "worker/file_service.h"

namespace fs = std::filesystem;

namespace nightshift {
namespace {

std::string Read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A checkpoint as the trainer writes one: files, manifest.json with their sums, COMPLETE.
// model.pt spans several 1 MiB chunks. `best`: the step export.best would export, named
// with its manifest's digest as the trainer names it (CheckpointManager::Keep).
void WriteCheckpoint(const fs::path& job_dir, int64_t step, int64_t best = 0) {
  const fs::path dir = job_dir / format::StepDirName(step);
  fs::create_directories(dir);
  std::string model(2'500'000, '\0');
  for (size_t i = 0; i < model.size(); ++i) model[i] = static_cast<char>((i * 131 + step) % 251);
  const std::map<std::string, std::string> files = {{"model.pt", model}, {"optimizer.pt", "adam-" + std::to_string(step)}};
  format::CheckpointManifest manifest;
  for (const auto& [name, bytes] : files) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    manifest.files[name] = format::FileEntry(bytes);
  }
  if (best > 0) {
    manifest.best_step = best;
    manifest.best_manifest_sha256 = ManifestDigest(job_dir.string(), best);
  }
  std::ofstream(dir / format::kCheckpointManifest) << format::ManifestText(manifest);
  std::ofstream(dir / format::kCheckpointComplete) << step << "\n";
}

class CheckpointCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testdirs::FreshTestDir("ckpt_copy");
    holder_auth_.SetKey(kHolderKey);  // as at the holder's registration
    logs_ = std::make_unique<FileServiceImpl>(&holder_auth_, dir_ + "/holder", [](const std::string&) { return true; },
                                             dir_ + "/holder/checkpoints");
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(logs_.get());
    server_ = b.BuildAndStart();
    ASSERT_TRUE(server_ != nullptr && port_ != 0);
  }
  void TearDown() override { server_->Shutdown(); }

  // The order the coordinator gives: the holder's capability for the job, and the
  // manifest's SHA-256 as the holder reported it (NewestCheckpoints).
  v1::CheckpointCopy Order(int64_t step) const {
    v1::CheckpointCopy c;
    c.set_job_id("j-000007");
    c.set_step(step);
    c.set_source_worker("holder");
    c.set_source_address("127.0.0.1:" + std::to_string(port_));
    c.set_capability(ReadCheckpointCapability(kHolderKey, c.job_id()));
    const fs::path manifest = fs::path(holder_job()) / format::StepDirName(step) / format::kCheckpointManifest;
    if (fs::exists(manifest)) c.set_manifest_sha256(crypto::Sha256Hex(Read(manifest)));
    return c;
  }
  std::string holder_job() const { return dir_ + "/holder/checkpoints/j-000007"; }
  std::string copier_job() const { return dir_ + "/copier/checkpoints/j-000007"; }

  static constexpr char kHolderKey[] = "holder-key";
  std::string dir_;
  int port_ = 0;
  FileServiceAuth holder_auth_;
  std::unique_ptr<FileServiceImpl> logs_;
  std::unique_ptr<grpc::Server> server_;
  bool runs_here_ = false;
  CheckpointCopier::Options Options() {
    return {dir_ + "/copier/checkpoints", [this](const std::string&) { return runs_here_; }, /*keep=*/2};
  }
};

TEST_F(CheckpointCopyTest, ACopyIsByteForByteTheHoldersAndIsReportedHeld) {
  WriteCheckpoint(holder_job(), 40);
  CheckpointCopier copier(Options());
  const Status s = copier.Copy(Order(40));
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (const char* file : {"model.pt", "optimizer.pt", "manifest.json", "COMPLETE"})
    EXPECT_EQ(Read(copier_job() + "/step-00000040/" + file), Read(holder_job() + "/step-00000040/" + file)) << file;
  EXPECT_EQ(copier.copies(), 1);
  EXPECT_GT(copier.bytes(), 2'500'000);
  const std::vector<v1::HeldCheckpoint> held = NewestCheckpoints(dir_ + "/copier/checkpoints");
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].job_id(), "j-000007");
  EXPECT_EQ(held[0].step(), 40);
  for (const auto& e : fs::directory_iterator(copier_job()))
    EXPECT_EQ(e.path().filename().string().rfind(".incoming", 0), std::string::npos) << e.path();

  // Later saves replace older copies beyond `keep`, newest first; an older order is a no-op.
  for (int64_t step : {50, 60}) {
    WriteCheckpoint(holder_job(), step);
    ASSERT_TRUE(copier.Copy(Order(step)).ok());
  }
  EXPECT_EQ(format::CompleteSteps(copier_job()), (std::vector<int64_t>{50, 60}));
  EXPECT_TRUE(copier.Copy(Order(40)).ok());
  EXPECT_EQ(format::CompleteSteps(copier_job()), (std::vector<int64_t>{50, 60}));
  EXPECT_EQ(copier.copies(), 3);
}

TEST_F(CheckpointCopyTest, ADamagedFileIsRefusedNamingItAndLeavesNothing) {
  WriteCheckpoint(holder_job(), 40);
  {
    std::fstream f(holder_job() + "/step-00000040/model.pt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1'700'000);
    f.put('X');  // same size, other bytes: only the checksum can tell
  }
  CheckpointCopier copier(Options());
  const Status s = copier.Copy(Order(40));
  EXPECT_EQ(s.code(), Status::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("model.pt does not match its checksum"), std::string::npos) << s.ToString();
  EXPECT_TRUE(format::CompleteSteps(copier_job()).empty());
  EXPECT_TRUE(!fs::exists(copier_job()) || fs::is_empty(copier_job()));
  EXPECT_EQ(copier.copies(), 0);
  // A copy cut short earlier (a crash) leaves .incoming-*: the next copy removes it.
  fs::create_directories(copier_job() + "/.incoming-step-00000030");

  // A step the holder does not have: its NOT_FOUND, and nothing here either.
  const Status missing = copier.Copy(Order(99));
  EXPECT_EQ(missing.code(), Status::kNotFound) << missing.ToString();
  EXPECT_NE(missing.message().find("no complete checkpoint"), std::string::npos) << missing.ToString();
  EXPECT_FALSE(fs::exists(copier_job() + "/.incoming-step-00000030"));
  EXPECT_TRUE(!fs::exists(copier_job()) || fs::is_empty(copier_job()));
}

// The attacker controls what the holder's service sends (or sits between): other weights
// with a manifest made to match them. The manifest's SHA-256 the holder reported through
// its own authenticated heartbeat does not match: refused, nothing left.
TEST_F(CheckpointCopyTest, AForgedCheckpointWithAManifestMadeToMatchIsRefused) {
  WriteCheckpoint(holder_job(), 40);
  const v1::CheckpointCopy order = Order(40);  // the reported manifest
  const fs::path step_dir = fs::path(holder_job()) / format::StepDirName(40);
  format::CheckpointManifest forged;
  ASSERT_EQ(format::ReadManifest(step_dir.string(), &forged), "");
  std::ofstream(step_dir / "model.pt", std::ios::binary | std::ios::trunc) << "backdoored weights";
  forged.files["model.pt"] = format::FileEntry("backdoored weights");
  std::ofstream(step_dir / format::kCheckpointManifest, std::ios::trunc) << format::ManifestText(forged);
  CheckpointCopier copier(Options());
  const Status s = copier.Copy(order);
  EXPECT_EQ(s.code(), Status::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("not the one the holder reported"), std::string::npos) << s.ToString();
  EXPECT_TRUE(format::CompleteSteps(copier_job()).empty());
  // A manifest with FNV-1a sums only (easy to collide) is refused for a copy even when
  // its own SHA-256 is the one reported.
  format::CheckpointManifest old;
  old.files["model.pt"] = {18, "", format::StableHash64(std::string("backdoored weights"))};
  const std::string old_text = format::ManifestText(old);
  std::ofstream(step_dir / format::kCheckpointManifest, std::ios::trunc) << old_text;
  v1::CheckpointCopy fnv_order = order;
  fnv_order.set_manifest_sha256(crypto::Sha256Hex(old_text));
  const Status fnv = copier.Copy(fnv_order);
  EXPECT_EQ(fnv.code(), Status::kDataLoss) << fnv.ToString();
  EXPECT_NE(fnv.message().find("no SHA-256 for model.pt"), std::string::npos) << fnv.ToString();
  EXPECT_EQ(copier.copies(), 0);
}

// The holder's files open to the coordinator's key, or to a capability for the one job
// being copied; nothing else (no credentials, a guess, another job's capability).
TEST_F(CheckpointCopyTest, TheHoldersCheckpointsOpenOnlyToACapabilityForThatJob) {
  WriteCheckpoint(holder_job(), 40);
  CheckpointCopier copier(Options());
  v1::CheckpointCopy order = Order(40);
  for (const std::string& capability : {std::string(), std::string("guess"),
                                        ReadCheckpointCapability(kHolderKey, "j-000008"),
                                        ReadCheckpointCapability("an-old-key", "j-000007")}) {
    order.set_capability(capability);
    const Status s = copier.Copy(order);
    EXPECT_TRUE(s.code() == Status::kUnauthenticated || s.code() == Status::kPermissionDenied)
        << capability << ": " << s.ToString();
    EXPECT_TRUE(format::CompleteSteps(copier_job()).empty());
  }
  // A capability opens ReadCheckpoint only: not the job's logs or models.
  auto stub = v1::WorkerFileService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer cap:" + ReadCheckpointCapability(kHolderKey, "j-000007"));
  v1::ReadLogRequest read;
  read.set_job_id("j-000007");
  auto reader = stub->ReadLog(&ctx, read);
  v1::LogChunk chunk;
  while (reader->Read(&chunk)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(copier.Copy(Order(40)).ok());
}

TEST_F(CheckpointCopyTest, NothingIsCopiedIntoTheFolderOfAJobRunningHere) {
  WriteCheckpoint(holder_job(), 40);
  runs_here_ = true;
  CheckpointCopier copier(Options());
  EXPECT_EQ(copier.Copy(Order(40)).code(), Status::kFailedPrecondition);
  EXPECT_FALSE(fs::exists(copier_job() + "/step-00000040"));
}

// The job's own task fetches before its ranks start (Assignment.fetch_checkpoint): the
// job counts as running here then, and the copy goes in all the same.
TEST_F(CheckpointCopyTest, TheJobsOwnTaskFetchesIntoItsFolderBeforeItsRanksStart) {
  WriteCheckpoint(holder_job(), 40);
  runs_here_ = true;
  CheckpointCopier copier(Options());
  const Status s = copier.Fetch(Order(40));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(format::CompleteSteps(copier_job()), std::vector<int64_t>{40});
  EXPECT_EQ(ManifestDigest(copier_job(), 40), Order(40).manifest_sha256());
}

// Issue 40: before its ranks start, a worker sets aside every local checkpoint of the job
// the coordinator does not vouch for: one tampered with (still a checkpoint the trainer
// would load: its manifest lists the files as they are now, so only its digest tells), and
// one no record names at all. The trainer and the held report see only the vouched one;
// the others are kept aside, not deleted.
TEST_F(CheckpointCopyTest, LocalCheckpointsWhoseManifestNoRecordVouchesForAreSetAside) {
  const std::string job = copier_job();
  for (int64_t step : {40, 50, 60}) WriteCheckpoint(job, step);
  std::vector<v1::HeldCheckpoint> verified(2);
  for (int i = 0; i < 2; ++i) {
    verified[i].set_job_id("j-000007");
    verified[i].set_step(40 + 10 * i);
    verified[i].set_manifest_sha256(ManifestDigest(job, 40 + 10 * i));
  }
  // Step 50 rewritten after it was recorded: other weights, a manifest made to match.
  const fs::path tampered = fs::path(job) / format::StepDirName(50);
  std::ofstream(tampered / "optimizer.pt", std::ios::binary) << "forged";
  format::CheckpointManifest m;
  m.files["model.pt"] = format::FileEntry(Read(tampered / "model.pt"));
  m.files["optimizer.pt"] = format::FileEntry(std::string("forged"));
  std::ofstream(tampered / format::kCheckpointManifest, std::ios::trunc) << format::ManifestText(m);
  ASSERT_NE(ManifestDigest(job, 50), verified[1].manifest_sha256());

  EXPECT_EQ(SetAsideUnverified(job, verified), (std::vector<int64_t>{50, 60}));
  EXPECT_EQ(format::CompleteSteps(job), std::vector<int64_t>{40});
  EXPECT_EQ(Read(fs::path(job) / "unverified" / format::StepDirName(50) / "optimizer.pt"), "forged");
  EXPECT_TRUE(fs::exists(fs::path(job) / "unverified" / format::StepDirName(60) / format::kCheckpointComplete));
  const std::vector<v1::HeldCheckpoint> held = NewestCheckpoints(dir_ + "/copier/checkpoints");
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].step(), 40);
  EXPECT_TRUE(SetAsideUnverified(job, verified).empty());  // nothing more to move
  EXPECT_EQ(SetAsideUnverified(job, {}), std::vector<int64_t>{40});  // nothing recorded: nothing kept
  EXPECT_TRUE(format::CompleteSteps(job).empty());
}

// export.best's checkpoint is older than every step the coordinator keeps a record of
// (the 8 newest) once the run went on long enough: a vouched checkpoint that names it with
// its manifest's digest keeps it from being set aside, and a task that fetches the newest
// fetches it too (a later step held is no reason to skip it, and nothing is pruned). A
// best whose manifest changed since is set aside as any unvouched one.
TEST_F(CheckpointCopyTest, ExportBestsCheckpointNamedByAVouchedOneIsKeptAndFetchedWithIt) {
  const std::string job = copier_job();
  WriteCheckpoint(job, 20);
  WriteCheckpoint(job, 30);
  WriteCheckpoint(job, 90, /*best=*/20);
  std::vector<v1::HeldCheckpoint> newest(1);
  newest[0].set_step(90);
  newest[0].set_manifest_sha256(ManifestDigest(job, 90));
  EXPECT_EQ(BestNamedBy(job, 90).step(), 20);
  EXPECT_EQ(BestNamedBy(job, 90).manifest_sha256(), ManifestDigest(job, 20));
  EXPECT_EQ(SetAsideUnverified(job, newest), std::vector<int64_t>{30});
  EXPECT_EQ(format::CompleteSteps(job), (std::vector<int64_t>{20, 90}));
  std::ofstream(fs::path(job) / format::StepDirName(20) / format::kCheckpointManifest, std::ios::app) << " ";
  EXPECT_EQ(SetAsideUnverified(job, newest), std::vector<int64_t>{20});

  // Another worker's task: it holds step 10 and fetches 90, which brings the best 90 names.
  fs::remove_all(job);
  WriteCheckpoint(job, 10);
  WriteCheckpoint(holder_job(), 20);
  WriteCheckpoint(holder_job(), 90, /*best=*/20);
  runs_here_ = true;
  CheckpointCopier copier(Options());  // keep 2: for copies made while the job runs elsewhere
  const Status s = copier.Fetch(Order(90));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(format::CompleteSteps(job), (std::vector<int64_t>{10, 20, 90}));
  EXPECT_EQ(ManifestDigest(job, 20), ManifestDigest(holder_job(), 20));
  EXPECT_EQ(copier.copies(), 2);
  // A holder without it: the newest comes all the same.
  fs::remove_all(job);
  fs::remove_all(holder_job() + "/" + format::StepDirName(20));
  EXPECT_TRUE(copier.Fetch(Order(90)).ok());
  EXPECT_EQ(format::CompleteSteps(job), std::vector<int64_t>{90});

  // The background copies (the job runs elsewhere) bring it too, and keep it beyond `keep`
  // while the newest names it: the worker a failover lands on holds it.
  fs::remove_all(job);
  WriteCheckpoint(holder_job(), 20);
  runs_here_ = false;
  for (int64_t step : {100, 110, 120}) {
    WriteCheckpoint(holder_job(), step, /*best=*/20);
    ASSERT_TRUE(copier.Copy(Order(step)).ok()) << step;
  }
  EXPECT_EQ(format::CompleteSteps(job), (std::vector<int64_t>{20, 110, 120}));
  EXPECT_EQ(ManifestDigest(job, 20), ManifestDigest(holder_job(), 20));
  // Step 20 written again (after a roll-back): the copy held is another manifest's, replaced.
  std::ofstream(holder_job() + "/" + format::StepDirName(20) + "/" + format::kCheckpointManifest, std::ios::app) << " ";
  WriteCheckpoint(holder_job(), 130, /*best=*/20);
  ASSERT_TRUE(copier.Copy(Order(130)).ok());
  EXPECT_EQ(ManifestDigest(job, 20), ManifestDigest(holder_job(), 20));
  // So is the newest step itself, held under its number with another manifest.
  std::ofstream(holder_job() + "/" + format::StepDirName(130) + "/" + format::kCheckpointManifest, std::ios::app) << " ";
  ASSERT_TRUE(copier.Copy(Order(130)).ok());
  EXPECT_EQ(ManifestDigest(job, 130), ManifestDigest(holder_job(), 130));
}

// The job's ranks can write their checkpoint folder, which the worker reads as root to
// report what it holds: a manifest that is a link (to a secret), a FIFO (to hang the
// heartbeat) or a step folder that is a link has no digest, and is neither followed nor
// waited on; such a step counts as no checkpoint the coordinator vouches for.
TEST_F(CheckpointCopyTest, AManifestThatIsALinkOrAFifoHasNoDigestAndIsNotFollowed) {
  const fs::path job = copier_job();
  WriteCheckpoint(job, 40);
  WriteCheckpoint(job, 50);
  WriteCheckpoint(dir_ + "/elsewhere", 60);
  const fs::path linked = job / format::StepDirName(40) / format::kCheckpointManifest;
  fs::remove(linked);
  fs::create_symlink(dir_ + "/elsewhere/" + format::StepDirName(60) + "/" + format::kCheckpointManifest, linked);
  const fs::path fifo = job / format::StepDirName(50) / format::kCheckpointManifest;
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  fs::create_directory_symlink(dir_ + "/elsewhere/" + format::StepDirName(60), job / format::StepDirName(60));
  EXPECT_EQ(ManifestDigest(job.string(), 40), "");
  EXPECT_EQ(ManifestDigest(job.string(), 50), "");  // returns at once: no writer needed
  EXPECT_EQ(ManifestDigest(job.string(), 60), "");
  EXPECT_TRUE(NewestCheckpoints(dir_ + "/copier/checkpoints").empty());

  // An `unverified` that is a link: setting aside (as root) neither empties nor fills
  // where it points; removing a step folder that is a link removes the link only.
  fs::create_directories(dir_ + "/outside/" + format::StepDirName(40));
  std::ofstream(dir_ + "/outside/" + format::StepDirName(40) + "/keep") << "theirs";
  fs::create_directory_symlink(dir_ + "/outside", job / "unverified");
  EXPECT_EQ(SetAsideUnverified(job.string(), {}), (std::vector<int64_t>{40, 50, 60}));
  EXPECT_FALSE(fs::is_symlink(job / "unverified"));
  EXPECT_EQ(Read(dir_ + "/outside/" + format::StepDirName(40) + "/keep"), "theirs");
  EXPECT_FALSE(fs::exists(dir_ + "/outside/" + format::StepDirName(50)));
  fs::create_directory_symlink(dir_ + "/elsewhere/" + format::StepDirName(60), job / format::StepDirName(70));
  format::RemoveCheckpoint((job / format::StepDirName(70)).string());
  EXPECT_FALSE(fs::exists(job / format::StepDirName(70)));
  EXPECT_TRUE(fs::exists(dir_ + "/elsewhere/" + format::StepDirName(60) + "/" + format::kCheckpointComplete));
}

// SendCheckpoint opens every file beneath the job's folder: a step folder the job's ranks
// swap, once its manifest was read and checked, for a link to another job's step with the
// same file names sends nothing of that job's. (Checking each file's own name for a link,
// then opening it by path, read through the swapped folder.)
TEST_F(CheckpointCopyTest, AStepFolderSwappedForALinkWhileItIsSentSendsNothingOfAnotherJob) {
  const fs::path job = holder_job(), other = dir_ + "/holder/checkpoints/j-000008";
  WriteCheckpoint(job, 40);
  WriteCheckpoint(other, 40);
  std::ofstream(other / format::StepDirName(40) / "optimizer.pt", std::ios::binary) << "another job's moments";
  std::string sent;
  const Status s = SendCheckpoint((job / format::StepDirName(40)).string(), 40, [&](const v1::ArtifactChunk& chunk) {
    if (sent.empty()) {  // after the manifest: the folder swapped
      fs::rename(job / format::StepDirName(40), job / "step-40-moved");
      fs::create_directory_symlink(other / format::StepDirName(40), job / format::StepDirName(40));
    }
    sent += chunk.file() + ":" + chunk.data();
    return true;
  });
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(sent.find("another job's moments"), std::string::npos);
  EXPECT_EQ(sent.find("model.pt:"), std::string::npos) << "nothing read through the link";
}

// The background path: Request returns at once, the copier's thread copies.
TEST_F(CheckpointCopyTest, ARequestIsCopiedInTheBackground) {
  WriteCheckpoint(holder_job(), 40);
  CheckpointCopier copier(Options());
  copier.Request(Order(40));
  for (int i = 0; i < 200 && copier.copies() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  EXPECT_EQ(copier.copies(), 1);
  EXPECT_EQ(format::CompleteSteps(copier_job()), (std::vector<int64_t>{40}));
}

// A holder that sends the manifest and then nothing (cut off, its disk hung): the copy is
// cancelled once `stall` has passed on the copier's clock, not before, and leaves nothing.
class SilentHolder final : public v1::WorkerFileService::Service {
 public:
  std::atomic<bool> sent_manifest{false};
  static std::string Manifest() {
    format::CheckpointManifest m;
    m.files["model.pt"] = format::FileEntry("weights");
    return format::ManifestText(m);
  }
  grpc::Status ReadCheckpoint(grpc::ServerContext* ctx, const v1::ReadCheckpointRequest* req,
                              grpc::ServerWriter<v1::ArtifactChunk>* writer) override {
    v1::ArtifactChunk chunk;
    chunk.set_file(format::kCheckpointManifest);
    chunk.set_data(Manifest());
    chunk.set_step(req->step());
    writer->Write(chunk);
    sent_manifest = true;
    for (int i = 0; i < 2000 && !ctx->IsCancelled(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the silent holder gave up");
  }
};

TEST_F(CheckpointCopyTest, AHolderThatStopsSendingIsCutOffAfterTheStallOnTheCopiersClock) {
  SilentHolder holder;
  int port = 0;
  grpc::ServerBuilder b;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(&holder);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  ASSERT_TRUE(server != nullptr && port != 0);
  FakeClock clock;
  CheckpointCopier::Options options = Options();
  options.clock = &clock;
  options.stall = std::chrono::seconds(60);
  CheckpointCopier copier(options);
  v1::CheckpointCopy order = Order(40);
  order.set_source_address("127.0.0.1:" + std::to_string(port));
  order.set_manifest_sha256(crypto::Sha256Hex(SilentHolder::Manifest()));

  std::atomic<bool> advanced{false};
  std::thread time_passes([&] {
    for (int i = 0; i < 500 && !holder.sent_manifest; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the watchdog looks more than once meanwhile
    advanced = true;
    clock.Advance(std::chrono::seconds(61));
  });
  const Status s = copier.Copy(order);
  const bool advanced_before_the_end = advanced;
  time_passes.join();
  server->Shutdown();
  EXPECT_TRUE(advanced_before_the_end) << "cancelled before the copier's clock passed the stall";
  EXPECT_EQ(s.code(), Status::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("worker holder sent nothing for 60 s"), std::string::npos) << s.ToString();
  EXPECT_TRUE(!fs::exists(copier_job()) || fs::is_empty(copier_job()));
  EXPECT_EQ(copier.copies(), 0);
}

}  // namespace
}  // namespace nightshift
