// Which of this host's addresses reaches another: what peers should be told to dial
// when the host name resolves to a loopback (Debian's 127.0.1.1) or to nothing (a Slurm
// node's name that only slurmctld knows).
#ifndef NIGHTSHIFT_COMMON_IO_NET_H_
#define NIGHTSHIFT_COMMON_IO_NET_H_

#include <string>

namespace nightshift {

// Our address on the route to `host` (a name or an IP literal, IPv6 without brackets),
// as the routing table chooses it: a UDP socket is connected there and asked its own
// address; nothing is sent. IPv6 results come without brackets. "" with *error set when
// `host` does not resolve or has no route.
std::string LocalAddressToward(const std::string& host, std::string* error);

}  // namespace nightshift

#endif  // NIGHTSHIFT_COMMON_IO_NET_H_
