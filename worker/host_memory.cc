#include "worker/host_memory.h"

#include <algorithm>
#include <fstream>
#include <vector>

namespace nightshift {
namespace {

// MemTotal of a meminfo file, in bytes; 0 when absent.
int64_t MemTotal(const std::string& meminfo) {
  std::ifstream in(meminfo);
  std::string key;
  int64_t kib = 0;
  while (in >> key) {
    if (key == "MemTotal:" && in >> kib) return kib * 1024;
    in.ignore(1 << 16, '\n');
  }
  return 0;
}

// A memory limit file of this process's cgroup: <folder><path>/<file>, and the same at
// each of path's ancestors.
struct CgroupLimit {
  std::string folder, path, file;
};

// Where this process's cgroups keep their memory limits: on cgroup v2 ("0::/path" in
// /proc/self/cgroup) <root>/path/memory.max, on v1's memory controller ("N:memory:/path")
// <root>/memory/path/memory.limit_in_bytes; a hybrid host lists both.
std::vector<CgroupLimit> CgroupLimits(const std::string& proc, const std::string& root) {
  std::ifstream in(proc + "/self/cgroup");
  std::string line;
  std::vector<CgroupLimit> limits;
  while (std::getline(in, line)) {
    // "ID:CONTROLLERS:PATH", the controllers comma-separated (v1 may join them: "cpu,memory")
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",", path = line.substr(b + 1);
    if (line.rfind("0::", 0) == 0) limits.push_back({root, path, "memory.max"});
    else if (controllers.find(",memory,") != std::string::npos)
      limits.push_back({root + "/memory", path, "memory.limit_in_bytes"});
  }
  return limits;
}

}  // namespace

int64_t HostMemoryBytes(const std::string& proc, const std::string& cgroup_root) {
  int64_t bytes = MemTotal(proc + "/meminfo");
  for (const CgroupLimit& limit : CgroupLimits(proc, cgroup_root)) {
    // Every level may limit (a job's cgroup inside a container's): the lowest counts. v1's
    // "no limit" is a number near 2^63, v2's the word "max" (which reads as nothing).
    for (std::string path = limit.path; !path.empty();) {
      std::ifstream in(limit.folder + (path == "/" ? "" : path) + "/" + limit.file);
      int64_t value = 0;
      if (in >> value && value > 0) bytes = bytes > 0 ? std::min(bytes, value) : value;
      if (path == "/") break;
      const size_t slash = path.find_last_of('/');
      path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
    }
  }
  return bytes;
}

}  // namespace nightshift
