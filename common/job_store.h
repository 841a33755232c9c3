// JobStore: the coordinator's durable job records. The RocksDB store (Open) keeps one
// key per job ("job/<id>"), the value the serialized v1::Job, and apart from it, so that
// loading and listing jobs stays cheap, each job's metric history ("metrics/<id>", a
// serialized v1::JobMetrics), and one key per sweep ("sweep/<id>"); thread-safe (RocksDB is).
// A record that does not parse stops nothing: it is moved aside, to "corrupt/<its key>"
// (kept for a person to look at, never read again), with an error in the log naming it.
// Deleting a job leaves "meta/deleted_seq", the highest submit_seq deleted, so that job
// ids are not handed out again after a restart; deleting a sweep, "meta/deleted_sweep_seq".
// An interface, so tests can inject a store that fails.
#ifndef NIGHTSHIFT_COMMON_JOB_STORE_H_
#define NIGHTSHIFT_COMMON_JOB_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "nightshift/v1/jobs.pb.h"

namespace nightshift {

// What LoadAll finds.
struct StoredJobs {
  std::vector<v1::Job> jobs;             // every job record that parses, in key order
  std::vector<std::string> moved_aside;  // ids of job records that did not parse, now under corrupt/job/<id>
  uint64_t deleted_seq = 0;              // the highest submit_seq of a deleted job; 0: none
};

class JobStore {
 public:
  // Opens (creating if needed) the RocksDB store under `dir`.
  static StatusOr<std::unique_ptr<JobStore>> Open(const std::string& dir);
  virtual ~JobStore() = default;

  // Writes the whole record. sync=true returns only once the write is on disk (WAL
  // fsync): use it for anything a client was or will be told.
  virtual Status Put(const v1::Job& job, bool sync) = 0;

  // Every stored job that parses, in key order; those that do not are moved aside first
  // (a synced write), and listed. Errors are the store's own (IOError), never a record's.
  virtual Status LoadAll(StoredJobs* out) = 0;

  // Removes the job's record and its metric history, and raises meta/deleted_seq to its
  // submit_seq, in one write.
  virtual Status Delete(const v1::Job& job, bool sync) = 0;

  // Writes a job's whole metric history (unsynced writes are fine: it is rebuilt from
  // the reports that follow).
  virtual Status PutMetrics(const v1::JobMetrics& metrics, bool sync) = 0;
  // The history of job `id`; NotFound when none was written; Corruption (naming the key)
  // when it does not parse, after moving it aside to corrupt/metrics/<id>.
  virtual Status GetMetrics(const std::string& id, v1::JobMetrics* metrics) = 0;

  // Sweeps ("sweep/<id>", a serialized v1::Sweep): the whole record, and every one that
  // parses (one that does not is moved aside, as a job's is, and listed in `moved_aside`).
  // *deleted_seq: the highest submit_seq of a deleted sweep (0: none).
  virtual Status PutSweep(const v1::Sweep& sweep, bool sync) = 0;
  virtual Status LoadSweeps(std::vector<v1::Sweep>* sweeps, std::vector<std::string>* moved_aside,
                            uint64_t* deleted_seq) = 0;
  // Removes the sweep's record and raises meta/deleted_sweep_seq to its submit_seq, in one write.
  virtual Status DeleteSweep(const v1::Sweep& sweep, bool sync) = 0;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COMMON_JOB_STORE_H_
