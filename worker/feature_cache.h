// FeatureCache: a worker's preprocessed data (tokenizer + token shards), built once per
// dataset and preprocessor and reused by every later job, rank and restart.
//
// Layout: <dir>/<key>/ holds one entry's files; <dir>/index is a RocksDB database
// mapping "entry/<key>" -> v1::CacheEntry (files with their XXH3-128 checksums, sizes,
// counts, times) and "file/<path>" -> the content hash of an input file with the size
// and mtime it had when hashed (the stat shortcut: re-hashed when either changes).
//
// Invariants:
// - An entry is in the index only after all its files were written, checksummed and
//   renamed into place; a build that dies leaves a <key>.building-* folder, removed at
//   the next Open. So nothing that looks complete is ever half-built.
// - Every hit re-verifies the files against their checksums; a missing or changed file
//   is a miss and the entry is rebuilt, never served.
// - Eviction (least recently used first, down to max_bytes) skips entries held by a
//   Lease; it deletes the index record before the files.
// Thread-safe.
#ifndef NIGHTSHIFT_WORKER_FEATURE_CACHE_H_
#define NIGHTSHIFT_WORKER_FEATURE_CACHE_H_

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "common/status.h"
#include "nightshift/v1/cluster.pb.h"
#include "worker/input_files.h"

namespace rocksdb {
class DB;
}

namespace nightshift {

struct FeatureCacheOptions {
  std::string dir;        // entries and the index; created if missing
  int64_t max_bytes = 0;  // budget for all entries, in bytes; 0: no budget
};

class FeatureCache;

// Keeps one entry in use (never evicted) while alive.
class CacheLease {
 public:
  CacheLease(FeatureCache* cache, std::string key, std::string dir)
      : cache_(cache), key_(std::move(key)), dir_(std::move(dir)) {}
  ~CacheLease();
  const std::string& key() const { return key_; }
  const std::string& dir() const { return dir_; }

 private:
  FeatureCache* const cache_;
  const std::string key_, dir_;
};

class FeatureCache {
 public:
  static StatusOr<std::unique_ptr<FeatureCache>> Open(const FeatureCacheOptions& options);
  ~FeatureCache();

  // The key of (input contents, options): XXH3-128 over each input file's id and content
  // hash, and OptionsFingerprint(). Never a path or a process-salted hash.
  StatusOr<std::string> KeyFor(const PrepOptions& options);

  // Builds an entry's files into `build_dir` (which it creates).
  using BuildFn = std::function<Status(const std::string& build_dir)>;

  // A verified entry for `key`: a hit when a complete entry's files match their
  // checksums, else built with `build` (once, however many callers ask at the same time;
  // the others wait for it). *hit tells which.
  StatusOr<std::shared_ptr<CacheLease>> Acquire(const std::string& key, const std::string& data_path,
                                                const BuildFn& build, bool* hit);

  // Removes an entry now unless a lease holds it (FAILED_PRECONDITION then).
  Status Evict(const std::string& key);
  // Removes every entry that no lease holds; returns how many.
  int EvictAll();

  v1::CacheReport Report() const;
  // Bumped on every change to the report (so it is sent only when it changed).
  uint64_t version() const;

 private:
  friend class CacheLease;
  FeatureCache(const FeatureCacheOptions& options, rocksdb::DB* db);
  void Release(const std::string& key);
  Status HashFile(const InputFile& file, std::string* hash);
  static bool Verify(const v1::CacheEntry& entry, std::string* why);
  // A lease on key's complete entry once its files match their checksums (a hit), or
  // null (a miss; a corrupt entry is removed first). Waits out a build of the key in
  // progress. Requires mu_ held through *lock, which it releases while verifying.
  StatusOr<std::shared_ptr<CacheLease>> FindVerifiedLocked(const std::string& key, std::unique_lock<std::mutex>* lock);
  // Runs `build` into build_dir, checksums the files, moves them into place and writes
  // the index record (synced). Without mu_.
  StatusOr<v1::CacheEntry> Build(const std::string& key, const std::string& data_path, const BuildFn& build,
                                 const std::string& build_dir);
  // The files of build_dir (names, sizes, checksums) and the counts of its meta.json.
  static Status DescribeFiles(const std::string& build_dir, v1::CacheEntry* entry);
  // Require mu_ held.
  Status RemoveLocked(const std::string& key);
  void EvictToBudgetLocked();

  const FeatureCacheOptions options_;
  std::unique_ptr<rocksdb::DB> db_;

  mutable std::mutex mu_;
  std::condition_variable built_;                 // a build finished
  std::map<std::string, v1::CacheEntry> entries_;  // GUARDED_BY(mu_)
  std::map<std::string, int> in_use_;             // GUARDED_BY(mu_): leases per key
  std::set<std::string> building_;                // GUARDED_BY(mu_)
  v1::CacheStats stats_;                          // GUARDED_BY(mu_): counters since start
  uint64_t version_ = 1;                          // GUARDED_BY(mu_)
  uint64_t build_counter_ = 0;                    // GUARDED_BY(mu_)
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_FEATURE_CACHE_H_
