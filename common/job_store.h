// JobStore: the coordinator's durable job records. The RocksDB store (Open) keeps one
// key per job ("job/<id>"), the value the serialized v1::Job, and apart from it, so that
// loading and listing jobs stays cheap, each job's metric history ("metrics/<id>", a
// serialized v1::JobMetrics); thread-safe (RocksDB is).
// An interface, so tests can inject a store that fails.
#ifndef NIGHTSHIFT_COMMON_JOB_STORE_H_
#define NIGHTSHIFT_COMMON_JOB_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "nightshift/v1/jobs.pb.h"

namespace nightshift {

class JobStore {
 public:
  // Opens (creating if needed) the RocksDB store under `dir`.
  static StatusOr<std::unique_ptr<JobStore>> Open(const std::string& dir);
  virtual ~JobStore() = default;

  // Writes the whole record. sync=true returns only once the write is on disk (WAL
  // fsync): use it for anything a client was or will be told.
  virtual Status Put(const v1::Job& job, bool sync) = 0;

  // Every stored job, in key order.
  virtual Status LoadAll(std::vector<v1::Job>* jobs) const = 0;

  // Writes a job's whole metric history (unsynced writes are fine: it is rebuilt from
  // the reports that follow).
  virtual Status PutMetrics(const v1::JobMetrics& metrics, bool sync) = 0;
  // The history of job `id`; NotFound when none was written.
  virtual Status GetMetrics(const std::string& id, v1::JobMetrics* metrics) const = 0;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COMMON_JOB_STORE_H_
