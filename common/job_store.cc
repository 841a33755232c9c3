#include "common/job_store.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>

namespace nightshift {
namespace {

constexpr char kJobPrefix[] = "job/";
constexpr char kMetricsPrefix[] = "metrics/";

class RocksJobStore : public JobStore {
 public:
  explicit RocksJobStore(rocksdb::DB* db) : db_(db) {}
  Status Put(const v1::Job& job, bool sync) override;
  Status LoadAll(std::vector<v1::Job>* jobs) const override;
  Status PutMetrics(const v1::JobMetrics& metrics, bool sync) override;
  Status GetMetrics(const std::string& id, v1::JobMetrics* metrics) const override;

 private:
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace

StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& dir) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.max_open_files = 256;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &db);
  if (!s.ok()) return Status::IOError("cannot open job store in " + dir + ": " + s.ToString());
  return std::unique_ptr<JobStore>(new RocksJobStore(db));
}

Status RocksJobStore::Put(const v1::Job& job, bool sync) {
  std::string value;
  if (!job.SerializeToString(&value)) return Status::Internal("cannot serialize job " + job.id());
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  rocksdb::Status s = db_->Put(wo, kJobPrefix + job.id(), value);
  if (!s.ok()) return Status::IOError("cannot write job " + job.id() + ": " + s.ToString());
  return Status::OK();
}

Status RocksJobStore::LoadAll(std::vector<v1::Job>* jobs) const {
  jobs->clear();
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  const std::string prefix = kJobPrefix;
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    v1::Job job;
    if (!job.ParseFromArray(it->value().data(), static_cast<int>(it->value().size())))
      return Status::Corruption("job record " + it->key().ToString() + " does not parse");
    jobs->push_back(std::move(job));
  }
  if (!it->status().ok()) return Status::IOError("cannot read job store: " + it->status().ToString());
  return Status::OK();
}

Status RocksJobStore::PutMetrics(const v1::JobMetrics& metrics, bool sync) {
  std::string value;
  if (!metrics.SerializeToString(&value))
    return Status::Internal("cannot serialize the metrics of job " + metrics.job_id());
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  rocksdb::Status s = db_->Put(wo, kMetricsPrefix + metrics.job_id(), value);
  if (!s.ok()) return Status::IOError("cannot write the metrics of job " + metrics.job_id() + ": " + s.ToString());
  return Status::OK();
}

Status RocksJobStore::GetMetrics(const std::string& id, v1::JobMetrics* metrics) const {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kMetricsPrefix + id, &value);
  if (s.IsNotFound()) return Status::NotFound("no metrics of job " + id);
  if (!s.ok()) return Status::IOError("cannot read the metrics of job " + id + ": " + s.ToString());
  if (!metrics->ParseFromString(value)) return Status::Corruption("the metrics of job " + id + " do not parse");
  return Status::OK();
}

}  // namespace nightshift
