// JobStore: the coordinator's durable job records, in RocksDB. One key per job
// ("job/<id>"), the value the serialized v1::Job. Thread-safe (RocksDB is).
#ifndef NIGHTSHIFT_COMMON_JOB_STORE_H_
#define NIGHTSHIFT_COMMON_JOB_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "nightshift/v1/jobs.pb.h"

namespace rocksdb {
class DB;
}

namespace nightshift {

class JobStore {
 public:
  // Opens (creating if needed) the store under `dir`.
  static StatusOr<std::unique_ptr<JobStore>> Open(const std::string& dir);
  ~JobStore();

  // Writes the whole record. sync=true returns only once the write is on disk (WAL
  // fsync): use it for anything a client was or will be told.
  Status Put(const v1::Job& job, bool sync);

  // Every stored job, in key order.
  Status LoadAll(std::vector<v1::Job>* jobs) const;

 private:
  explicit JobStore(rocksdb::DB* db);
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COMMON_JOB_STORE_H_
