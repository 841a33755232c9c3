#include "common/job_store.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/log.h"

namespace nightshift {
namespace {

constexpr char kJobPrefix[] = "job/";
constexpr char kMetricsPrefix[] = "metrics/";
constexpr char kSweepPrefix[] = "sweep/";
constexpr char kCorruptPrefix[] = "corrupt/";         // + the key of a record that did not parse
constexpr char kDeletedSeqKey[] = "meta/deleted_seq";  // decimal: the highest submit_seq deleted
constexpr char kDeletedSweepSeqKey[] = "meta/deleted_sweep_seq";  // likewise, of sweeps

class RocksJobStore : public JobStore {
 public:
  explicit RocksJobStore(rocksdb::DB* db) : db_(db) {}
  Status Put(const v1::Job& job, bool sync) override;
  Status LoadAll(StoredJobs* out) override;
  Status Delete(const v1::Job& job, bool sync) override;
  Status PutMetrics(const v1::JobMetrics& metrics, bool sync) override;
  Status GetMetrics(const std::string& id, v1::JobMetrics* metrics) override;
  Status PutSweep(const v1::Sweep& sweep, bool sync) override;
  Status LoadSweeps(std::vector<v1::Sweep>* sweeps, std::vector<std::string>* moved_aside,
                    uint64_t* deleted_seq) override;
  Status DeleteSweep(const v1::Sweep& sweep, bool sync) override;

 private:
  // Every record under `prefix` that parses, into `records`; the keys of those that do not,
  // moved aside (MoveAside), into `moved_aside`.
  template <typename Record>
  Status LoadRecords(const std::string& prefix, std::vector<Record>* records, std::vector<std::string>* moved_aside);
  // Writes `record` serialized under `key`; `what` names it in errors ("job j-000001").
  Status PutRecord(const std::string& key, const google::protobuf::Message& record, bool sync, const std::string& what);
  // Moves `key`'s `value` to corrupt/<key>, in one synced write, and says so in the log.
  Status MoveAside(const std::string& key, const std::string& value);
  StatusOr<uint64_t> DeletedSeq(const char* key) const;
  // Removes `keys` and raises `seq_key` (a deleted_seq) to `seq`, in one write.
  Status DeleteRecords(const std::vector<std::string>& keys, const char* seq_key, uint64_t seq, bool sync,
                       const std::string& what);

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

Status RocksJobStore::PutRecord(const std::string& key, const google::protobuf::Message& record, bool sync,
                                const std::string& what) {
  std::string value;
  if (!record.SerializeToString(&value)) return Status::Internal("cannot serialize " + what);
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  rocksdb::Status s = db_->Put(wo, key, value);
  if (!s.ok()) return Status::IOError("cannot write " + what + ": " + s.ToString());
  return Status::OK();
}

Status RocksJobStore::Put(const v1::Job& job, bool sync) {
  return PutRecord(kJobPrefix + job.id(), job, sync, "job " + job.id());
}

template <typename Record>
Status RocksJobStore::LoadRecords(const std::string& prefix, std::vector<Record>* records,
                                  std::vector<std::string>* moved_aside) {
  std::vector<std::pair<std::string, std::string>> corrupt;  // (key, value)
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    Record record;
    if (record.ParseFromArray(it->value().data(), static_cast<int>(it->value().size())))
      records->push_back(std::move(record));
    else
      corrupt.emplace_back(it->key().ToString(), it->value().ToString());
  }
  if (!it->status().ok()) return Status::IOError("cannot read job store: " + it->status().ToString());
  it.reset();
  for (const auto& [key, value] : corrupt) {
    NS_RETURN_IF_ERROR(MoveAside(key, value));
    moved_aside->push_back(key);
  }
  return Status::OK();
}

Status RocksJobStore::LoadAll(StoredJobs* out) {
  *out = StoredJobs();
  std::vector<std::string> moved;  // keys
  NS_RETURN_IF_ERROR(LoadRecords(kJobPrefix, &out->jobs, &moved));
  for (const std::string& key : moved) out->moved_aside.push_back(key.substr(std::strlen(kJobPrefix)));
  auto deleted = DeletedSeq(kDeletedSeqKey);
  if (!deleted.ok()) return deleted.status();
  out->deleted_seq = deleted.value();
  return Status::OK();
}

Status RocksJobStore::PutSweep(const v1::Sweep& sweep, bool sync) {
  return PutRecord(kSweepPrefix + sweep.id(), sweep, sync, "sweep " + sweep.id());
}

Status RocksJobStore::LoadSweeps(std::vector<v1::Sweep>* sweeps, std::vector<std::string>* moved_aside,
                                 uint64_t* deleted_seq) {
  auto deleted = DeletedSeq(kDeletedSweepSeqKey);
  if (!deleted.ok()) return deleted.status();
  *deleted_seq = deleted.value();
  return LoadRecords(kSweepPrefix, sweeps, moved_aside);
}

Status RocksJobStore::DeleteSweep(const v1::Sweep& sweep, bool sync) {
  return DeleteRecords({kSweepPrefix + sweep.id()}, kDeletedSweepSeqKey, sweep.submit_seq(), sync, "sweep " + sweep.id());
}

Status RocksJobStore::MoveAside(const std::string& key, const std::string& value) {
  rocksdb::WriteBatch batch;
  batch.Put(kCorruptPrefix + key, value);
  batch.Delete(key);
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::Status s = db_->Write(wo, &batch);
  if (!s.ok()) return Status::IOError("cannot move the record " + key + " that does not parse aside: " + s.ToString());
  NS_ERROR("job store: the record " << key << " (" << value.size() << " bytes) does not parse; moved aside to "
                                    << kCorruptPrefix << key << ", and the coordinator goes on without it");
  return Status::OK();
}

StatusOr<uint64_t> RocksJobStore::DeletedSeq(const char* key) const {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &value);
  if (s.IsNotFound()) return uint64_t{0};
  if (!s.ok()) return Status::IOError(std::string("cannot read ") + key + ": " + s.ToString());
  return static_cast<uint64_t>(std::strtoull(value.c_str(), nullptr, 10));  // unparsable: 0, ids of loaded jobs still count
}

Status RocksJobStore::Delete(const v1::Job& job, bool sync) {
  return DeleteRecords({kJobPrefix + job.id(), kMetricsPrefix + job.id()}, kDeletedSeqKey, job.submit_seq(), sync,
                       "job " + job.id());
}

Status RocksJobStore::DeleteRecords(const std::vector<std::string>& keys, const char* seq_key, uint64_t seq, bool sync,
                                    const std::string& what) {
  auto deleted = DeletedSeq(seq_key);
  if (!deleted.ok()) return deleted.status();
  rocksdb::WriteBatch batch;
  for (const std::string& key : keys) batch.Delete(key);
  batch.Put(seq_key, std::to_string(std::max(deleted.value(), seq)));
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  rocksdb::Status s = db_->Write(wo, &batch);
  if (!s.ok()) return Status::IOError("cannot delete " + what + ": " + s.ToString());
  return Status::OK();
}

Status RocksJobStore::PutMetrics(const v1::JobMetrics& metrics, bool sync) {
  return PutRecord(kMetricsPrefix + metrics.job_id(), metrics, sync, "the metrics of job " + metrics.job_id());
}

Status RocksJobStore::GetMetrics(const std::string& id, v1::JobMetrics* metrics) {
  std::string value;
  const std::string key = kMetricsPrefix + id;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &value);
  if (s.IsNotFound()) return Status::NotFound("no metrics of job " + id);
  if (!s.ok()) return Status::IOError("cannot read the metrics of job " + id + ": " + s.ToString());
  if (metrics->ParseFromString(value)) return Status::OK();
  NS_RETURN_IF_ERROR(MoveAside(key, value));
  return Status::Corruption("the record " + key + " does not parse; moved aside to " + kCorruptPrefix + key);
}

}  // namespace nightshift
