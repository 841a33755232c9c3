#include "common/client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/client_interceptor.h>

#include <sys/prctl.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace nightshift {
namespace {

// Adds the bearer token to the initial metadata of every call on the channel, so no call
// site can forget it (and plaintext channels can carry it, unlike call credentials).
class TokenInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", *header_);
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;  // owned by the factory, which the channel keeps
};

class TokenInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(std::string token) : header_("Bearer " + std::move(token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo*) override {
    return new TokenInterceptor(&header_);
  }

 private:
  const std::string header_;
};

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

StatusOr<std::string> ReadSmallFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::InvalidArgument("cannot read " + what + " " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > (1 << 20)) return Status::InvalidArgument(what + " " + path + " is larger than 1 MiB");
  return ss.str();
}

Status ResolveToken(ClientOptions* o) {
  if (!o->token.empty()) return Status::OK();
  if (!o->token_file.empty()) {
    auto text = ReadSmallFile(o->token_file, "--token-file");
    if (!text.ok()) return text.status();
    o->token = Trim(text.value().substr(0, text.value().find('\n')));
    if (o->token.empty()) return Status::InvalidArgument("--token-file " + o->token_file + " holds no token");
    return Status::OK();
  }
  const char* env = std::getenv("NIGHTSHIFT_TOKEN");
  if (env != nullptr) o->token = Trim(env);
  return Status::OK();
}

std::string TakeTokenFromEnvironment(const char* name) {
  char* value = std::getenv(name);
  if (value == nullptr) return "";
  const std::string token = Trim(value);
  ::explicit_bzero(value, std::strlen(value));
  ::unsetenv(name);
  return token;
}

Status MakeUndumpable() {
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
    return Status::Internal(std::string("prctl(PR_SET_DUMPABLE, 0): ") + std::strerror(errno));
  return Status::OK();
}

StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(const ClientOptions& o) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (o.tls_ca.empty()) {
    if (!o.tls_cert.empty() || !o.tls_key.empty())
      return Status::InvalidArgument("--tls-cert/--tls-key need --tls-ca (the CA of the coordinator)");
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    auto ca = ReadSmallFile(o.tls_ca, "--tls-ca");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = ca.value();
    if (o.tls_cert.empty() != o.tls_key.empty())
      return Status::InvalidArgument("--tls-cert and --tls-key go together");
    if (!o.tls_cert.empty()) {
      auto cert = ReadSmallFile(o.tls_cert, "--tls-cert");
      if (!cert.ok()) return cert.status();
      auto key = ReadSmallFile(o.tls_key, "--tls-key");
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = cert.value();
      ssl.pem_private_key = key.value();
    }
    creds = grpc::SslCredentials(ssl);
  }
  return creds;
}

StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientOptions& o) {
  auto credentials = ChannelCredentialsFor(o);
  if (!credentials.ok()) return credentials.status();
  std::shared_ptr<grpc::ChannelCredentials> creds = credentials.value();
  // gRPC's reconnect backoff grows to 120 s: after a long outage (a cut link, a restarted
  // coordinator) a worker would stay away for up to two minutes after the coordinator is
  // back. Try again at most every 5 s instead (a connect attempt is cheap).
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 500);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  if (o.token.empty()) return grpc::CreateCustomChannel(o.address, creds, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<TokenInterceptorFactory>(o.token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(o.address, creds, args, std::move(interceptors));
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsServerOptions& o) {
  const std::string cert_flag = o.flag + "-cert", key_flag = o.flag + "-key";
  if (o.cert.empty()) {
    if (!o.key.empty() || !o.client_ca.empty())
      return Status::InvalidArgument(key_flag + " and --tls-client-ca need " + cert_flag);
    return grpc::InsecureServerCredentials();
  }
  if (o.key.empty()) return Status::InvalidArgument(cert_flag + " needs " + key_flag);
  auto cert = ReadSmallFile(o.cert, cert_flag);
  if (!cert.ok()) return cert.status();
  auto key = ReadSmallFile(o.key, key_flag);
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({key.value(), cert.value()});
  if (!o.client_ca.empty()) {
    auto ca = ReadSmallFile(o.client_ca, "--tls-client-ca");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = ca.value();
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

}  // namespace nightshift
