// How the CLI and the worker reach the coordinator: the channel's transport security
// (plaintext, or TLS with a CA to trust and, for mutual TLS, our own certificate) and the
// bearer token sent with every call; and the transport security of our own servers (the
// coordinator's port, a worker's file service).
#ifndef NIGHTSHIFT_COMMON_CLIENT_H_
#define NIGHTSHIFT_COMMON_CLIENT_H_

#include <grpcpp/channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace nightshift {

struct ClientOptions {
  std::string address;     // HOST:PORT of the coordinator
  std::string token;       // sent as `authorization: Bearer <token>` on every call; empty: none
  std::string token_file;  // read `token` from this file (first line) when `token` is empty
  std::string tls_ca;      // PEM file of the CA that signed the coordinator's certificate; empty: plaintext
  std::string tls_cert;    // PEM certificate (chain) of this client, for mutual TLS; optional
  std::string tls_key;     // its PEM private key
};

// Fills options->token from token_file, or else from the environment NIGHTSHIFT_TOKEN,
// when it is empty. Missing or unreadable files are errors naming the file.
Status ResolveToken(ClientOptions* options);

// For a daemon, once at start, before it starts a thread: the value of the variable
// `name` ("" when unset, trimmed), which is then wiped from this process (its bytes in the
// initial environment too, which /proc/PID/environ shows) and unset, so that no process it
// starts inherits it.
std::string TakeTokenFromEnvironment(const char* name = "NIGHTSHIFT_TOKEN");
// The variable an allocation's workers (--cluster slurm|kubernetes) find their attempt's
// token in (coordinator/allocation_tokens.h).
inline constexpr char kAllocationTokenEnv[] = "NIGHTSHIFT_ALLOCATION_TOKEN";

// For a daemon, once at start: makes this process non-dumpable (PR_SET_DUMPABLE 0), so a
// process of the same user (a job's) can neither ptrace it nor read its memory,
// environment, files or root through /proc/PID; no core dumps either.
Status MakeUndumpable();

// The longest a channel waits between two connect attempts (gRPC's default is 120 s).
inline constexpr int kMaxReconnectBackoffMs = 5000;

// The transport credentials of `options` (tls_ca, tls_cert, tls_key; plaintext without
// tls_ca). Files that cannot be read are errors naming them.
StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(const ClientOptions& options);

// A channel to options.address with the credentials above (after ResolveToken), trying
// to reconnect at most kMaxReconnectBackoffMs apart.
StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientOptions& options);

// Transport security of a server's port.
struct TlsServerOptions {
  std::string cert;       // PEM certificate chain of the server; empty: plaintext
  std::string key;        // its PEM private key
  std::string client_ca;  // PEM CA; when set, clients must present a certificate it signed
  std::string flag = "--tls";  // the flags' prefix, for messages: <flag>-cert, <flag>-key
};
// Plaintext when options.cert is empty; files that cannot be read are errors naming them.
StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsServerOptions& options);

// Reads a whole (small) file, or an error naming it and `what` it is for.
StatusOr<std::string> ReadSmallFile(const std::string& path, const std::string& what);

}  // namespace nightshift

#endif  // NIGHTSHIFT_COMMON_CLIENT_H_
