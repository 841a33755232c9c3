// An in-memory JobStore for tests: its records live in a shared Disk that outlives the
// store (so a test can "restart" a coordinator over the same records), and writes fail
// while disk->fail_writes is set, as a full or broken disk would.
#ifndef NIGHTSHIFT_TESTS_COMMON_FAKE_JOB_STORE_H_
#define NIGHTSHIFT_TESTS_COMMON_FAKE_JOB_STORE_H_

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/job_store.h"

namespace nightshift {

class FakeJobStore : public JobStore {
 public:
  struct Disk {
    std::mutex mu;
    std::map<std::string, v1::Job> jobs;  // GUARDED_BY(mu), by id
    std::map<std::string, v1::JobMetrics> metrics;  // GUARDED_BY(mu), by job id
    std::map<std::string, v1::Sweep> sweeps;        // GUARDED_BY(mu), by id
    uint64_t deleted_seq = 0;             // GUARDED_BY(mu), as meta/deleted_seq
    uint64_t deleted_sweep_seq = 0;       // GUARDED_BY(mu), as meta/deleted_sweep_seq
    bool fail_writes = false;             // GUARDED_BY(mu)
    int failed_writes = 0;                // GUARDED_BY(mu)
  };
  explicit FakeJobStore(std::shared_ptr<Disk> disk) : disk_(std::move(disk)) {}

  Status Put(const v1::Job& job, bool /*sync*/) override {
    std::lock_guard<std::mutex> lock(disk_->mu);
    if (disk_->fail_writes) {
      ++disk_->failed_writes;
      return Status::IOError("cannot write job " + job.id() + ": No space left on device");
    }
    disk_->jobs[job.id()] = job;
    return Status::OK();
  }
  Status LoadAll(StoredJobs* out) override {
    std::lock_guard<std::mutex> lock(disk_->mu);
    *out = StoredJobs();
    for (const auto& [id, job] : disk_->jobs) out->jobs.push_back(job);
    out->deleted_seq = disk_->deleted_seq;
    return Status::OK();
  }
  Status Delete(const v1::Job& job, bool /*sync*/) override {
    std::lock_guard<std::mutex> lock(disk_->mu);
    if (disk_->fail_writes) {
      ++disk_->failed_writes;
      return Status::IOError("cannot delete job " + job.id() + ": No space left on device");
    }
    disk_->jobs.erase(job.id());
    disk_->metrics.erase(job.id());
    disk_->deleted_seq = std::max(disk_->deleted_seq, job.submit_seq());
    return Status::OK();
  }

  Status PutSweep(const v1::Sweep& sweep, bool /*sync*/) override {
    std::lock_guard<std::mutex> lock(disk_->mu);
    if (disk_->fail_writes) {
      ++disk_->failed_writes;
      return Status::IOError("cannot write sweep " + sweep.id() + ": No space left on device");
    }
    disk_->sweeps[sweep.id()] = sweep;
    return Status::OK();
  }
  Status LoadSweeps(std::vector<v1::Sweep>* sweeps, std::vector<std::string>* /*moved_aside*/,
                    uint64_t* deleted_seq) override {
    std::lock_guard<std::mutex> lock(disk_->mu);
    for (const auto& [id, sweep] : disk_->sweeps) sweeps->push_back(sweep);
    *deleted_seq = disk_->deleted_sweep_seq;
    return Status::OK();
  }
  Status DeleteSweep(const v1::Sweep& sweep, bool /*sync*/) override {
    std::lock_guard<std::mutex> lock(disk_->mu);
    if (disk_->fail_writes) {
      ++disk_->failed_writes;
      return Status::IOError("cannot delete sweep " + sweep.id() + ": No space left on device");
    }
    disk_->sweeps.erase(sweep.id());
    disk_->deleted_sweep_seq = std::max(disk_->deleted_sweep_seq, sweep.submit_seq());
    return Status::OK();
  }

  Status PutMetrics(const v1::JobMetrics& metrics, bool /*sync*/) override {
    std::lock_guard<std::mutex> lock(disk_->mu);
    if (disk_->fail_writes) {
      ++disk_->failed_writes;
      return Status::IOError("cannot write the metrics of job " + metrics.job_id() + ": No space left on device");
    }
    disk_->metrics[metrics.job_id()] = metrics;
    return Status::OK();
  }
  Status GetMetrics(const std::string& id, v1::JobMetrics* metrics) override {
    std::lock_guard<std::mutex> lock(disk_->mu);
    auto it = disk_->metrics.find(id);
    if (it == disk_->metrics.end()) return Status::NotFound("no metrics of job " + id);
    *metrics = it->second;
    return Status::OK();
  }

 private:
  const std::shared_ptr<Disk> disk_;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_TESTS_COMMON_FAKE_JOB_STORE_H_
