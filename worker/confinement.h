// Confinement: what a process the worker starts can reach of the worker's secrets and files.
//
// Every child sees /dev/null in place of the worker's token file. A job's process (a rank,
// a model export: they run the user's code) is also confined to its own files: it sees an
// empty folder in place of the worker's work dir and checkpoint root, except for the
// folders of its JobView, bound back at their own paths. Under a root worker it runs as an
// unprivileged user (--run-as), with no capabilities, an empty bounding set and
// no_new_privs, so it can neither undo those mounts nor reach the worker (root, and not
// dumpable) through /proc. A worker that is not root makes the same mounts inside a user
// namespace of its own (with no id map: its uid shows as 65534 there): the job starts
// without capabilities in it and cannot make another, so it cannot undo them.
//
// Everything a child needs is prepared before fork (ChildSetup::Prepare); the child then
// only makes system calls (ChildSetup::Enter), as a child of a threaded process must.
#ifndef NIGHTSHIFT_WORKER_CONFINEMENT_H_
#define NIGHTSHIFT_WORKER_CONFINEMENT_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace nightshift {

// What one job's process reaches of the hidden folders: its own. Paths outside them (the
// user's data and model folders) are not affected; paths that do not exist are skipped.
struct JobView {
  std::vector<std::string> read_only;  // bound back read-only: its attempt's folder, its cache entry
  std::vector<std::string> writable;   // bound back writable and given to the job's user: its checkpoints
  // A folder of the job's own (kept while it runs: its mount points are in use) where the
  // empty folders that cover the hidden ones are made: <attempt folder>/.view.
  std::string mounts;
};

struct ConfinementOptions {
  std::vector<std::string> hidden_files;    // /dev/null over each, for every child (the token file)
  std::vector<std::string> hidden_folders;  // empty for a job's processes, but for its JobView
  // The user a root worker runs jobs as: "" for nightshift-job if that user exists, else
  // nobody; "root" keeps jobs as root (the mounts still apply). A worker that is not root
  // runs jobs as itself: only "" or its own user name is accepted.
  std::string run_as;
};

// How every child started after this call is confined. It is tried in a throwaway child
// first. InvalidArgument: run_as is unknown, or names another user while not root.
// Unavailable: the namespaces cannot be made here (a container without CAP_SYS_ADMIN, or
// unprivileged user namespaces switched off); children are then started as before this
// call (the environment filter alone). Not thread-safe with SpawnProcess.
Status ConfineChildren(const ConfinementOptions& options);

// Back to no confinement (tests).
void UnconfineChildren();

// One line for the worker's log: who jobs run as and how they are confined.
std::string DescribeConfinement();

// Makes a job's own folder beneath a checkpoint root, `path` (<root>/<job id>; the root is
// made if missing, with the umask's mode), mode 0700, or takes the one there as the job's
// only if no other user can have put anything in it: a real folder (a link is not
// followed), owned by this worker's effective user or by the user a root worker runs jobs
// as (ChildSetup::Prepare gave it to them on an earlier attempt), and writable by its
// owner alone (a Kubernetes pod asks the kubelet to change its volume's modes only while
// the volume's root is not its group's: fsGroupChangePolicy OnRootMismatch, else each
// mount would add group write). A folder taken is made 0700 (one made under an older
// worker's umask was readable by every user), or 0750 under a setgid root whose group
// this process is not in (the operator's, for the coordinator's user, which serves `job
// artifacts`; a group the owners share would let them read each other's; under a umask
// that takes the group's read, 077, the folder's steps lose that group). A shared root
// is writable by every owner and job ids are predictable, so another user may have made <root>/<job id> first, to plant a checkpoint
// the job would resume from or to read what it writes: PermissionDenied, naming the
// folder, its owner and its mode. IOError when it cannot be made or opened.
Status MakeJobFolder(const std::string& path);
// The same for a folder of this worker's alone, always 0700, `what` naming it in a
// refusal: an allocation's own work dir (nightshift-worker --allocation-job:
// <work-dir>/<job>-a<attempt>-<node>, a name foreseeable in a folder every owner may
// write; a feature cache planted there would feed the job).
Status MakeOwnFolder(const std::string& path, const std::string& what);

// What one child needs between fork and exec, made before the fork.
class ChildSetup {
 public:
  // `view`: the job's own folders; null for a process of the worker's own (data
  // preparation), which keeps the worker's user and files and loses only the hidden files.
  // Each writable folder (the job's checkpoint folder) is made or checked by
  // MakeJobFolder; for a job run as another user, its whole tree (links are not followed)
  // is then given to that user.
  static StatusOr<ChildSetup> Prepare(const JobView* view);

  // Variables over the worker's environment: the job user's HOME, USER and LOGNAME.
  const std::map<std::string, std::string>& env() const { return env_; }

  // In the child, after fork: enters the namespaces, makes the mounts, becomes the job's
  // user. nullptr, or what failed (a static string). Allocates nothing.
  const char* Enter();

 private:
  struct Bind {
    std::string path;  // source and target: the same path, seen before and after the cover
    bool writable;
    int fd = -1;       // the source, opened in the child before the cover
  };
  struct Cover {
    std::string folder;    // a hidden folder
    std::string skeleton;  // the empty folders bound over it (read-only), mount points of the binds
    int fd = -1;
  };
  bool user_namespace_ = false;  // a worker that is not root
  bool enter_ = false;           // false: nothing to do (not confined)
  bool switch_user_ = false;     // a root worker running a job as another user
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  std::vector<gid_t> groups_;
  std::string cwd_;                         // the worker's, entered again below the covers
  std::vector<std::string> hidden_files_;
  std::vector<Cover> covers_;               // empty unless this is a job's process
  std::vector<Bind> binds_;                 // parents first
  std::map<std::string, std::string> env_;

  Status PlanView(const JobView& view);
  const char* EnterNamespaces() const;
  const char* MountView();
  const char* BecomeJobUser() const;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_CONFINEMENT_H_
