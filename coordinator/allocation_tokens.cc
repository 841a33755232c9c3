#include "coordinator/allocation_tokens.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/crypto/sha256.h"

namespace nightshift {
namespace {

constexpr char kPrefix[] = "allocation:";

// Writes `bytes` to `path` readable by this user only: a new temporary file made 0600
// (never one left there, nor a link), synced, renamed over the target, the folder synced.
Status WritePrivate(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IOError("cannot create " + tmp + ": " + std::strerror(errno));
  const bool written = ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!written || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::IOError("cannot write " + path);
  }
  const std::string folder = std::filesystem::path(path).parent_path().string();
  const int dir = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const bool synced = dir >= 0 && ::fsync(dir) == 0;
  if (dir >= 0) ::close(dir);
  if (!synced) return Status::IOError("cannot sync the folder of " + path);
  return Status::OK();
}

}  // namespace

StatusOr<AllocationTokens> AllocationTokens::Open(const std::string& path) {
  // Made only where there is none: a secret that exists but cannot be read is an error
  // (a new one would void the tokens of the allocations running).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno != ENOENT) return Status::IOError("cannot read " + path + ": " + std::strerror(errno));
  if (fd >= 0) {
    std::string secret(128, '\0');
    const ssize_t n = ::read(fd, secret.data(), secret.size());
    ::close(fd);
    secret.resize(n > 0 ? static_cast<size_t>(n) : 0);
    while (!secret.empty() && (secret.back() == '\n' || secret.back() == ' ')) secret.pop_back();
    if (!crypto::IsLowerHex(secret, 64))
      return Status::InvalidArgument(path + ": not the 64 hex digits of an allocation secret (removing it voids the "
                                            "tokens of the allocations running)");
    return AllocationTokens(secret);
  }
  unsigned char bytes[32];
  if (::getrandom(bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes)))
    return Status::IOError(std::string("getrandom: ") + std::strerror(errno));
  const std::string secret = crypto::ToHex(bytes, sizeof(bytes));
  NS_RETURN_IF_ERROR(WritePrivate(path, secret + "\n"));
  return AllocationTokens(secret);
}

std::string AllocationTokens::Derive(const std::string& purpose) const {
  return crypto::HmacSha256Hex(secret_, "derive:" + purpose);
}

std::string AllocationTokens::For(const std::string& job_id, int attempt) const {
  const std::string what = job_id + ":" + std::to_string(attempt);
  return kPrefix + what + ":" + crypto::HmacSha256Hex(secret_, what);
}

std::optional<AllocationTokens::Opens> AllocationTokens::Verify(const std::string& token) const {
  if (token.rfind(kPrefix, 0) != 0) return std::nullopt;
  const size_t mac_at = token.rfind(':'), attempt_at = token.rfind(':', mac_at - 1);
  if (attempt_at <= sizeof(kPrefix) - 1 || attempt_at == std::string::npos) return std::nullopt;
  const std::string what = token.substr(sizeof(kPrefix) - 1, mac_at - (sizeof(kPrefix) - 1));
  if (!crypto::ConstantTimeEqual(token.substr(mac_at + 1), crypto::HmacSha256Hex(secret_, what))) return std::nullopt;
  Opens opens;
  opens.job_id = token.substr(sizeof(kPrefix) - 1, attempt_at - (sizeof(kPrefix) - 1));
  const std::string attempt = token.substr(attempt_at + 1, mac_at - attempt_at - 1);
  if (attempt.empty() || attempt.size() > 9 || attempt.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  opens.attempt = std::stoi(attempt);
  return opens;
}

}  // namespace nightshift
