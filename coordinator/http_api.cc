#include "coordinator/http_api.h"

#include <curl/curl.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <mutex>

namespace nightshift {
namespace {

size_t Append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

// A credentials file's first line; "" for no file (path "") or an unreadable one.
std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

class CurlHttpApi : public HttpApi {
 public:
  explicit CurlHttpApi(HttpApiOptions options) : options_(std::move(options)) {
    static std::once_flag once;  // curl_global_init is not thread-safe
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  }
  StatusOr<HttpResponse> Call(const std::string& method, const std::string& path, const std::string& body,
                              double timeout_seconds) override {
    std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
    if (!curl) return Status::Internal("curl_easy_init failed");
    const std::string url = options_.base + path;
    HttpResponse response;
    curl_slist* headers = curl_slist_append(nullptr, "Accept: application/json");
    headers = curl_slist_append(headers, method == "PATCH" ? "Content-Type: application/merge-patch+json"
                                                           : "Content-Type: application/json");
    const std::string token = FirstLine(options_.token_file);
    if (!token.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + token).c_str());
    const std::string user_password = FirstLine(options_.basic_auth_file);
    if (!user_password.empty()) {  // libcurl keeps its own copy
      curl_easy_setopt(curl.get(), CURLOPT_HTTPAUTH, static_cast<long>(CURLAUTH_BASIC));
      curl_easy_setopt(curl.get(), CURLOPT_USERPWD, user_password.c_str());
    }
    curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl.get(), CURLOPT_CUSTOMREQUEST, method.c_str());
    curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, headers);
    if (!body.empty()) curl_easy_setopt(curl.get(), CURLOPT_POSTFIELDS, body.c_str());
    if (!options_.ca_file.empty()) curl_easy_setopt(curl.get(), CURLOPT_CAINFO, options_.ca_file.c_str());
    curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_seconds * 1000));
    curl_easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, Append);
    curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &response.body);
    const CURLcode code = curl_easy_perform(curl.get());
    curl_slist_free_all(headers);
    if (code != CURLE_OK) return Status::Unavailable(method + " " + url + ": " + curl_easy_strerror(code));
    long status = 0;
    curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &status);
    response.status = static_cast<int>(status);
    return response;
  }

 private:
  const HttpApiOptions options_;
};

}  // namespace

std::unique_ptr<HttpApi> MakeCurlHttpApi(const HttpApiOptions& options) { return std::make_unique<CurlHttpApi>(options); }

std::string UrlEncode(const std::string& value) {
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

}  // namespace nightshift
