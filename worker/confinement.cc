#include "worker/confinement.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>
#include <vector>

namespace fs = std::filesystem;

namespace nightshift {
namespace {

// The process-wide settings ConfineChildren decided; read by ChildSetup::Prepare.
struct Settings {
  enum Mode { kNone, kMountNamespace, kUserNamespace } mode = kNone;
  std::vector<std::string> hidden_files, hidden_folders;  // canonical; no folder inside another
  bool switch_user = false;  // a root worker running jobs as another user
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  std::string user, home;
};

Settings& Current() {
  static Settings settings;  // set before any child starts
  return settings;
}

std::string Canonical(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? path : p.string();
}

// Whether `path` is `folder` or lies beneath it (both canonical).
bool Beneath(const std::string& path, const std::string& folder) {
  return path == folder || (path.size() > folder.size() && path.compare(0, folder.size(), folder) == 0 &&
                            (folder.back() == '/' || path[folder.size()] == '/'));
}

// Canonical folders, without those inside another of them.
std::vector<std::string> OutermostFolders(const std::vector<std::string>& folders) {
  std::set<std::string> all;
  for (const std::string& f : folders)
    if (!f.empty()) all.insert(Canonical(f));
  std::vector<std::string> out;
  for (const std::string& f : all) {  // sorted: a folder comes before what lies beneath it
    bool covered = false;
    for (const std::string& o : out) covered = covered || Beneath(f, o);
    if (!covered) out.push_back(f);
  }
  return out;
}

// Resolves the user jobs run as (a root worker) into *s; an error names the flag.
Status ResolveJobUser(const std::string& run_as, Settings* s) {
  std::string name = run_as;
  if (name.empty()) name = ::getpwnam("nightshift-job") != nullptr ? "nightshift-job" : "nobody";
  const passwd* pw = ::getpwnam(name.c_str());
  if (pw == nullptr)
    return Status::InvalidArgument("--run-as " + name +
                                   ": no such user (scripts/install-deps.sh makes nightshift-job)");
  s->user = pw->pw_name;
  s->home = pw->pw_dir;
  s->uid = pw->pw_uid;
  s->gid = pw->pw_gid;
  s->switch_user = pw->pw_uid != 0;
  int n = 64;
  s->groups.assign(n, 0);
  if (::getgrouplist(pw->pw_name, pw->pw_gid, s->groups.data(), &n) < 0) {
    s->groups.assign(n, 0);
    ::getgrouplist(pw->pw_name, pw->pw_gid, s->groups.data(), &n);
  }
  s->groups.resize(n);
  return Status::OK();
}

// A worker that is not root runs jobs as itself; --run-as may only name that user.
Status CheckOwnUser(const std::string& run_as, Settings* s) {
  const passwd* pw = ::getpwuid(::geteuid());
  s->user = pw != nullptr ? pw->pw_name : std::to_string(::geteuid());
  s->uid = ::geteuid();
  s->gid = ::getegid();
  if (!run_as.empty() && run_as != s->user)
    return Status::InvalidArgument("--run-as " + run_as + ": a worker that is not root runs jobs as its own user (" +
                                   s->user + "); run the worker as root to run them as another user");
  return Status::OK();
}

Status Errno(const std::string& what) { return Status::IOError(what + ": " + std::strerror(errno)); }

// Gives the open folder `dir` and the tree beneath it to uid:gid. Links are neither
// followed nor changed, and a file with more than one name is left as it is (its other
// name may be anywhere on this file system).
Status GiveTree(int dir, const std::string& path, uid_t uid, gid_t gid, int depth) {
  if (depth > 64) return Status::IOError(path + ": folders nested more than 64 deep");
  if (::fchown(dir, uid, gid) != 0) return Errno("cannot give " + path + " to the job's user");
  const int copy = ::dup(dir);
  DIR* d = copy < 0 ? nullptr : ::fdopendir(copy);
  if (d == nullptr) {
    if (copy >= 0) ::close(copy);
    return Errno("cannot list " + path);
  }
  Status s;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
    if (S_ISDIR(st.st_mode)) {
      const int sub = ::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) continue;  // swapped for a link meanwhile: not followed
      s = GiveTree(sub, path + "/" + name, uid, gid, depth + 1);
      ::close(sub);
    } else if (S_ISREG(st.st_mode) && (st.st_uid != uid || st.st_gid != gid)) {
      const int fd = ::openat(dir, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
      struct stat now;
      if (fd >= 0 && ::fstat(fd, &now) == 0 && S_ISREG(now.st_mode) && now.st_nlink == 1 &&
          ::fchownat(fd, "", uid, gid, AT_EMPTY_PATH) != 0)
        s = Errno("cannot give " + path + "/" + name + " to the job's user");
      if (fd >= 0) ::close(fd);
    }
    if (!s.ok()) break;
  }
  ::closedir(d);
  return s;
}

// Whether a job's folder owned by `uid` is the job's: made by this worker's user, or given
// to the user a root worker runs jobs as (GiveFolder, on an earlier attempt). No other
// user's: on a shared checkpoint root that would be another owner's planting.
bool MayOwnJobFolder(uid_t uid) {
  const Settings& s = Current();
  return uid == ::geteuid() || (s.switch_user && uid == s.uid);
}

// " (owner uid U, mode 0MMM)": what a refusal says of the entry with status `st`.
std::string OwnerAndMode(const struct stat& st) {
  char mode[16];
  std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
  return " (owner uid " + std::to_string(st.st_uid) + ", mode " + mode + ")";
}

// Whether this process is in group `gid` (its own, or a supplementary one). Unknown (the
// groups unreadable) counts as in it: the folder is then the owner's alone.
bool InOurGroups(gid_t gid) {
  if (gid == ::getegid()) return true;
  std::vector<gid_t> groups(static_cast<size_t>(std::max(::getgroups(0, nullptr), 0)) + 1);
  const int n = ::getgroups(static_cast<int>(groups.size()), groups.data());
  return n < 0 || std::find(groups.begin(), groups.begin() + n, gid) != groups.begin() + n;
}

// Why the entry at `path` with (lstat's) status `st` is not a job's own folder; "" when it
// is. Group or others' write would let them put files in it, and rename a step in.
std::string NotAJobFolder(const std::string& path, const struct stat& st) {
  const std::string what = path + OwnerAndMode(st);
  if (S_ISLNK(st.st_mode)) return what + " is a symbolic link, not a folder";
  if (!S_ISDIR(st.st_mode)) return what + " is not a folder";
  if (!MayOwnJobFolder(st.st_uid))
    return what + " belongs to another user, not to this worker's (uid " + std::to_string(::geteuid()) + ")";
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return what + " is writable by other users";
  return "";
}

Status RefuseJobFolder(const std::string& what, const std::string& why) {
  return Status::PermissionDenied("refusing " + what + " " + why +
                                  ": another user may have made it or put files in it (a worker makes it "
                                  "mode 0700); its owner or an admin removes it to run the job");
}

// `path` (a job's folder) made mode 0700 or checked, open: the descriptor, the caller's to
// close. What it checked is what the descriptor refers to (fstat after an O_NOFOLLOW
// open), so a folder swapped in after the check is not the one returned.
// `roots_group_reads`: under a setgid root whose group this process is not in (the
// operator's, holding the coordinator's user, which serves `job artifacts` from it), that
// group may read (0750); else, and for every other folder, the owner alone.
StatusOr<int> OpenJobFolder(const std::string& path, const std::string& what, bool roots_group_reads) {
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);  // the root: its mode is the operator's
  if (ec) return Status::IOError("cannot create " + parent.string() + ": " + ec.message());
  struct stat root;
  const bool shared = roots_group_reads && ::stat(parent.empty() ? "." : parent.c_str(), &root) == 0 &&
                      (root.st_mode & S_ISGID) && !InOurGroups(root.st_gid);
  const mode_t want = shared ? 0750 : 0700;
  // Made so, not changed after: a chmod by a user outside the folder's group clears its
  // setgid bit, and its steps would not take the group.
  if (::mkdir(path.c_str(), want) != 0 && errno != EEXIST) return Errno("cannot create " + path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (fd < 0) {
    const int error = errno;  // a link (ELOOP) or not a folder (ENOTDIR): say what is there
    const std::string why = ::lstat(path.c_str(), &st) == 0 ? NotAJobFolder(path, st) : "";
    if (!why.empty()) return RefuseJobFolder(what, why);
    errno = error;
    return Errno("cannot open " + path);
  }
  Status s;
  if (::fstat(fd, &st) != 0) {
    s = Errno("cannot read the status of " + path);
  } else if (std::string why = NotAJobFolder(path, st); !why.empty()) {
    s = RefuseJobFolder(what, why);
  } else if ((st.st_mode & 0777) != want && ::fchmod(fd, want | (st.st_mode & S_ISGID)) != 0) {
    s = Errno("cannot make " + path + " private (mode " + (shared ? "0750" : "0700") + ")");
  }
  if (s.ok()) return fd;
  ::close(fd);
  return s;
}

// What OpenJobFolder said, its descriptor closed.
Status Closed(StatusOr<int> fd) {
  if (!fd.ok()) return fd.status();
  ::close(fd.value());
  return Status::OK();
}

// Makes or checks `path` (OpenJobFolder) and gives its tree to uid:gid.
Status GiveFolder(const std::string& path, uid_t uid, gid_t gid) {
  // Its group becomes the job user's (GiveTree): the owner alone may read (this worker
  // relays `job artifacts`).
  StatusOr<int> fd = OpenJobFolder(path, "the job's checkpoint folder", /*roots_group_reads=*/false);
  if (!fd.ok()) return fd.status();
  Status s = GiveTree(fd.value(), path, uid, gid, 0);
  ::close(fd.value());
  return s;
}

// Whether the user of `s` may search (pass through) a folder with status `st`, by its
// mode bits.
bool Searchable(const struct stat& st, const Settings& s) {
  if (st.st_uid == s.uid) return st.st_mode & S_IXUSR;
  bool member = st.st_gid == s.gid;
  for (gid_t g : s.groups) member = member || st.st_gid == g;
  return st.st_mode & (member ? S_IXGRP : S_IXOTH);
}

// The folders a job's process sees covered: the hidden folders that exist and, for a job
// run as another user, the highest folder above each that this user cannot search (it
// reached nothing there before, and now reaches its own folders through it).
std::set<std::string> Covers(const Settings& s) {
  std::set<std::string> covers, ancestors;
  for (const std::string& folder : s.hidden_folders) {
    struct stat st;
    if (::stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;  // nothing there to hide
    covers.insert(folder);
    std::string highest;
    for (fs::path p = fs::path(folder).parent_path(); s.switch_user; p = p.parent_path()) {
      if (::stat(p.c_str(), &st) == 0 && !Searchable(st, s)) highest = p.string();
      if (p == p.root_path()) break;
    }
    if (!highest.empty()) ancestors.insert(highest);
  }
  for (const std::string& a : ancestors) {  // of nested ones, the outer
    bool inside_another = false;
    for (const std::string& b : ancestors) inside_another = inside_another || (a != b && Beneath(a, b));
    if (!inside_another) covers.insert(a);
  }
  return covers;
}

// Makes `skeleton` and each of `inside` (paths from "/...") beneath it, every folder of
// them 0755 whatever the umask: the job's user passes through them.
Status MakeMountPoints(const std::string& skeleton, const std::vector<std::string>& inside) {
  for (const std::string& rel : inside) {
    std::error_code ec;
    fs::create_directories(skeleton + rel, ec);
    if (ec) return Status::IOError("cannot make the mount points of a job in " + skeleton + ": " + ec.message());
    for (fs::path p = skeleton + rel; p.string().size() >= skeleton.size(); p = p.parent_path()) {
      fs::permissions(p, fs::perms(0755), ec);
      if (p.string().size() == skeleton.size()) break;
    }
  }
  return Status::OK();
}

// In the child: "/proc/self/fd/<fd>" into out[32], without allocating.
void FdPath(int fd, char* out) {
  static const char kPrefix[] = "/proc/self/fd/";
  std::memcpy(out, kPrefix, sizeof(kPrefix) - 1);
  char digits[16];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + fd % 10);
    fd /= 10;
  } while (fd > 0 && n < 15);
  size_t at = sizeof(kPrefix) - 1;
  while (n > 0) out[at++] = digits[--n];
  out[at] = '\0';
}

// In the child: makes the bind mount at `path` read-only, keeping the flags its source
// has (a user namespace may not clear nosuid, nodev, noexec or the atime flags).
bool MakeReadOnly(const char* path) {
  struct statfs st;
  if (::statfs(path, &st) != 0) return false;
  const unsigned long kept = MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME | MS_NODIRATIME | MS_RELATIME;
  const unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY | (static_cast<unsigned long>(st.f_flags) & kept);
  return ::mount(nullptr, path, nullptr, flags, nullptr) == 0;
}

// Tries `setup` in a throwaway child.
Status TryInAChild(ChildSetup* setup) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return Errno("pipe");
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return Errno("fork");
  }
  if (pid == 0) {
    const char* failed = setup->Enter();
    if (failed == nullptr) ::_exit(0);
    const int error = errno;
    (void)!::write(pipefd[1], failed, std::strlen(failed));
    ::_exit(error > 0 && error < 256 ? error : 255);
  }
  ::close(pipefd[1]);
  char message[256];
  const ssize_t got = ::read(pipefd[0], message, sizeof(message) - 1);
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::OK();
  const std::string what = got > 0 ? std::string(message, static_cast<size_t>(got)) : "the test child died";
  return Status::Unavailable(what + ": " + std::strerror(WIFEXITED(status) ? WEXITSTATUS(status) : EINTR));
}

// Tries the settings in a throwaway child (a job's process with nothing of its own).
Status TryInAChild() {
  std::string mounts = (fs::temp_directory_path() / "nightshift-confinement-XXXXXX").string();
  if (::mkdtemp(mounts.data()) == nullptr) return Errno("mkdtemp " + mounts);
  JobView nothing;
  nothing.mounts = mounts;
  auto setup = ChildSetup::Prepare(&nothing);
  Status s = setup.ok() ? TryInAChild(&setup.value()) : setup.status();
  std::error_code ec;
  fs::remove_all(mounts, ec);
  return s;
}

}  // namespace

Status ConfineChildren(const ConfinementOptions& options) {
  Settings s;
  const bool root = ::geteuid() == 0;
  NS_RETURN_IF_ERROR(root ? ResolveJobUser(options.run_as, &s) : CheckOwnUser(options.run_as, &s));
  for (const std::string& f : options.hidden_files)
    if (!f.empty()) s.hidden_files.push_back(Canonical(f));
  s.hidden_folders = OutermostFolders(options.hidden_folders);
  s.mode = root ? Settings::kMountNamespace : Settings::kUserNamespace;
  Current() = s;
  Status tried = TryInAChild();
  if (tried.ok()) return tried;
  Current() = Settings{};
  return Status::Unavailable(std::string("cannot confine jobs (") +
                             (root ? "a mount namespace per job" : "a user and a mount namespace per job") +
                             "): " + tried.message());
}

void UnconfineChildren() { Current() = Settings{}; }

std::string DescribeConfinement() {
  const Settings& s = Current();
  if (s.mode == Settings::kNone) return "jobs are not confined (they get a filtered environment only)";
  std::string hidden;
  for (const std::string& f : s.hidden_folders) hidden += (hidden.empty() ? "" : ", ") + f;
  for (const std::string& f : s.hidden_files) hidden += (hidden.empty() ? "" : ", ") + f;
  if (hidden.empty()) hidden = "nothing";
  if (s.mode == Settings::kUserNamespace)
    return "jobs run as this worker's user (" + s.user + ", unmapped: they see uid 65534) in a user and mount "
           "namespace of their own, hiding " + hidden + " but for their own folders";
  return "jobs run as " + s.user + " (uid " + std::to_string(s.uid) + ")" +
         (s.switch_user ? " without capabilities" : ", as root: --run-as root keeps every privilege") +
         ", in a mount namespace of their own, hiding " + hidden + " but for their own folders";
}

Status MakeJobFolder(const std::string& path) {
  return Closed(OpenJobFolder(path, "the job's checkpoint folder", /*roots_group_reads=*/true));
}

Status MakeOwnFolder(const std::string& path, const std::string& what) {
  return Closed(OpenJobFolder(path, what, /*roots_group_reads=*/false));
}

StatusOr<ChildSetup> ChildSetup::Prepare(const JobView* view) {
  const Settings& s = Current();
  ChildSetup c;
  if (s.mode == Settings::kNone) return c;
  c.enter_ = true;
  c.user_namespace_ = s.mode == Settings::kUserNamespace;
  c.hidden_files_ = s.hidden_files;
  std::error_code ec;
  c.cwd_ = fs::current_path(ec).string();
  if (view == nullptr) return c;
  c.switch_user_ = s.switch_user;
  c.uid_ = s.uid;
  c.gid_ = s.gid;
  c.groups_ = s.groups;
  if (s.switch_user) c.env_ = {{"HOME", s.home}, {"USER", s.user}, {"LOGNAME", s.user}};
  NS_RETURN_IF_ERROR(c.PlanView(*view));
  return c;
}

Status ChildSetup::PlanView(const JobView& view) {
  const Settings& s = Current();
  std::map<std::string, bool> binds;  // path -> writable; sorted: parents are bound first
  for (const auto& [paths, writable] : {std::make_pair(&view.read_only, false), std::make_pair(&view.writable, true)}) {
    for (const std::string& p : *paths) {
      if (p.empty()) continue;
      // The job's folder as named, not Canonical's (which follows a link put in its place).
      if (writable) NS_RETURN_IF_ERROR(s.switch_user ? GiveFolder(p, s.uid, s.gid) : MakeJobFolder(p));
      const std::string path = Canonical(p);
      std::error_code ec;
      if (fs::is_directory(path, ec)) binds[path] = binds[path] || writable;
    }
  }
  const std::set<std::string> covers = Covers(s);
  if (!covers.empty() && view.mounts.empty())
    return Status::Internal("a job's view needs a folder for its mount points");
  // Each cover is a skeleton (a folder of the job's own: mount points cannot be made in a
  // file system of a user namespace with no id map) with an empty folder at each place
  // where a cover beneath it or one of the job's folders goes.
  for (const std::string& folder : covers) {  // sorted: parents first
    const std::string skeleton = Canonical(view.mounts) + "/" + std::to_string(covers_.size());
    std::vector<std::string> inside = {""};
    for (const std::string& other : covers)
      if (other != folder && Beneath(other, folder)) inside.push_back(other.substr(folder.size()));
    for (const auto& [path, writable] : binds)
      if (path != folder && Beneath(path, folder)) inside.push_back(path.substr(folder.size()));
    NS_RETURN_IF_ERROR(MakeMountPoints(skeleton, inside));
    covers_.push_back({folder, skeleton});
  }
  for (const auto& [path, writable] : binds) {
    bool covered = false;
    for (const Cover& cover : covers_) covered = covered || Beneath(path, cover.folder);
    if (covered) binds_.push_back({path, writable});
  }
  return Status::OK();
}

const char* ChildSetup::EnterNamespaces() const {
  // A user namespace without an id map: we are non-dumpable (the worker is), so the map
  // files are not ours to write, and none is needed: we hold every capability in it until
  // exec, which, our uid being unmapped there (it shows as 65534), drops them all. Files
  // are still created as our real uid; another namespace cannot be made from it.
  const int flags = user_namespace_ ? CLONE_NEWUSER | CLONE_NEWNS : CLONE_NEWNS;
  if (::unshare(flags) != 0) return user_namespace_ ? "unshare(CLONE_NEWUSER | CLONE_NEWNS)" : "unshare(CLONE_NEWNS)";
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return "making the mounts private";
  return nullptr;
}

// In the child: binds the folder open as `fd` over `target`.
bool BindOpenFolder(int fd, const char* target, unsigned long flags) {
  char source[32];
  FdPath(fd, source);
  return ::mount(source, target, nullptr, MS_BIND | flags, nullptr) == 0;
}

const char* ChildSetup::MountView() {
  for (Cover& c : covers_) {  // opened before anything covers them
    c.fd = ::open(c.skeleton.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (c.fd < 0) return "opening the mount points of the job";
  }
  for (Bind& b : binds_) {
    b.fd = ::open(b.path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (b.fd < 0) return "opening a folder of the job";
  }
  for (const std::string& f : hidden_files_)
    if (::mount("/dev/null", f.c_str(), nullptr, MS_BIND, nullptr) != 0 && errno != ENOENT)
      return "covering the worker's token file";
  for (Cover& c : covers_) {
    if (!BindOpenFolder(c.fd, c.folder.c_str(), 0)) return "covering the worker's folders";
    if (!MakeReadOnly(c.folder.c_str())) return "making the cover of the worker's folders read-only";
    ::close(c.fd);
    c.fd = -1;
  }
  for (Bind& b : binds_) {
    if (!BindOpenFolder(b.fd, b.path.c_str(), MS_REC)) return "binding a folder of the job";
    if (!b.writable && !MakeReadOnly(b.path.c_str())) return "making a folder of the job read-only";
    ::close(b.fd);
    b.fd = -1;
  }
  return nullptr;
}

const char* ChildSetup::BecomeJobUser() const {
  // With CAP_SETPCAP still ours: no capability can come back, not even through a file's.
  for (int cap = 0; cap < 64; ++cap) ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);  // EINVAL past the last: fine
  // Raw system calls: glibc's wrappers would signal the threads of the process we forked from.
  if (::syscall(SYS_setgroups, groups_.size(), groups_.data()) != 0) return "setgroups";
  if (::syscall(SYS_setresgid, gid_, gid_, gid_) != 0) return "setresgid";
  if (::syscall(SYS_setresuid, uid_, uid_, uid_) != 0) return "setresuid";  // clears every capability
  return nullptr;
}

const char* ChildSetup::Enter() {
  if (!enter_) return nullptr;
  if (const char* failed = EnterNamespaces()) return failed;
  if (const char* failed = MountView()) return failed;
  if (switch_user_)
    if (const char* failed = BecomeJobUser()) return failed;
  // The working folder we inherited is the one below the covers: look it up again, as
  // the job's user ("/" if it cannot reach it).
  if (::chdir(cwd_.c_str()) != 0 && ::chdir("/") != 0) return "changing to the working folder";
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return "prctl(PR_SET_NO_NEW_PRIVS)";
  return nullptr;
}

}  // namespace nightshift
