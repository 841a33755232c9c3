// One HTTP exchange with a JSON API server: Kubernetes' API server (coordinator/kubernetes.h)
// and an MLflow tracking server (coordinator/mlflow.h). An interface, so that each user's
// tests can answer in memory; the real one is libcurl.
#ifndef NIGHTSHIFT_COORDINATOR_HTTP_API_H_
#define NIGHTSHIFT_COORDINATOR_HTTP_API_H_

#include <memory>
#include <string>

#include "common/status.h"

namespace nightshift {

struct HttpResponse {
  int status = 0;  // 0: no answer
  std::string body;
};

class HttpApi {
 public:
  virtual ~HttpApi() = default;
  // `path` from the server's root ("/apis/batch/v1/...", "/api/2.0/mlflow/..."), query
  // included; `body` JSON or "" (a PATCH's: a JSON merge patch, RFC 7386). UNAVAILABLE when no answer came within `timeout_seconds`.
  virtual StatusOr<HttpResponse> Call(const std::string& method, const std::string& path, const std::string& body,
                                      double timeout_seconds) = 0;
};

struct HttpApiOptions {
  std::string base;        // scheme, host and port (and a path prefix): "https://kubernetes.default.svc"
  std::string token_file;  // its first line is sent as `Authorization: Bearer`, read at every call
                           // (a kubelet rotates it); "": none
  std::string ca_file;     // PEM CA that verifies the server's TLS certificate; "": the system's
  std::string basic_auth_file;  // its first line, `user:password`, is sent as HTTP Basic
                                // (MLflow's basic-auth app), read at every call; "": none
};

// The real one: libcurl, JSON in and out.
std::unique_ptr<HttpApi> MakeCurlHttpApi(const HttpApiOptions& options);

// A query parameter's value, percent-encoded (RFC 3986 unreserved characters kept).
std::string UrlEncode(const std::string& value);

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_HTTP_API_H_
