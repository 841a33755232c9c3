#include "common/io/net.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

namespace nightshift {

std::string LocalAddressToward(const std::string& host, std::string* error) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || found == nullptr) {
    *error = "cannot resolve " + host;
    return "";
  }
  const int fd = ::socket(found->ai_family, SOCK_DGRAM, 0);
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  const bool ok = fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  char text[INET6_ADDRSTRLEN] = {0};
  const void* address = local.ss_family == AF_INET6
                            ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&local)->sin6_addr)
                            : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&local)->sin_addr);
  if (!ok || ::inet_ntop(local.ss_family, address, text, sizeof(text)) == nullptr) {
    *error = "no route to " + host;
    return "";
  }
  return text;
}

}  // namespace nightshift
