#include "coordinator/checkpoint_records.h"

#include <algorithm>
#include <set>

namespace nightshift {

bool RecordHolder(v1::Job* job, const std::string& worker, int64_t step, const std::string& sha256, bool copied) {
  if (step <= 0 || sha256.empty()) return false;
  auto* records = job->mutable_committed_checkpoints();
  auto at = std::find_if(records->begin(), records->end(), [&](const v1::CommittedCheckpoint& c) { return c.step() >= step; });
  if (at == records->end() || at->step() != step) {
    if (at == records->begin() && records->size() >= kCommittedCheckpointsKept) return false;  // older than all kept
    const int index = static_cast<int>(at - records->begin());
    records->Add()->set_step(step);  // appended, then moved into order
    for (int i = records->size() - 1; i > index; --i) records->SwapElements(i, i - 1);
    at = records->begin() + index;
  }
  for (auto& h : *at->mutable_holders()) {
    if (h.worker() != worker) continue;
    if (h.manifest_sha256() == sha256) return false;
    h.set_manifest_sha256(sha256);  // the same worker wrote the step again (a rerun of it)
    return true;
  }
  v1::CheckpointHolder* h = at->add_holders();
  h->set_worker(worker);
  h->set_manifest_sha256(sha256);
  h->set_copied(copied);
  while (records->size() > kCommittedCheckpointsKept) records->DeleteSubrange(0, 1);
  return true;
}

bool Vouched(const v1::Job& job, const std::string& worker, int64_t step, const std::string& sha256) {
  for (const auto& c : job.committed_checkpoints()) {
    if (c.step() != step) continue;
    for (const auto& h : c.holders())
      if (h.worker() == worker && h.manifest_sha256() == sha256) return !sha256.empty();
  }
  return false;
}

bool Wrote(const v1::Job& job, const std::string& worker) {
  for (const auto& c : job.committed_checkpoints())
    for (const auto& h : c.holders())
      if (h.worker() == worker && !h.copied()) return true;
  return false;
}

int64_t NewestRecordedStep(const v1::Job& job) {
  const int n = job.committed_checkpoints_size();
  return n == 0 ? 0 : job.committed_checkpoints(n - 1).step();
}

std::vector<v1::HeldCheckpoint> VerifiedCheckpoints(const v1::Job& job) {
  std::vector<v1::HeldCheckpoint> verified;
  std::set<std::pair<int64_t, std::string>> seen;
  for (const auto& c : job.committed_checkpoints())
    for (const auto& h : c.holders()) {
      if (!seen.insert({c.step(), h.manifest_sha256()}).second) continue;
      v1::HeldCheckpoint& v = verified.emplace_back();
      v.set_job_id(job.id());
      v.set_step(c.step());
      v.set_manifest_sha256(h.manifest_sha256());
    }
  return verified;
}

}  // namespace nightshift
