#include "common/metrics.h"

#include <cstdio>

#include "common/io/atomic_file.h"

namespace nightshift {

void FamilyBuilder::Add(const std::string& name, const std::string& help, prometheus::MetricType type,
                        const Labels& labels, double value) {
  prometheus::MetricFamily& f = families_[name];
  f.name = name;
  f.help = help;
  f.type = type;
  prometheus::ClientMetric m;
  for (const auto& [k, v] : labels) m.label.push_back({k, v});
  if (type == prometheus::MetricType::Counter) m.counter.value = value;
  else m.gauge.value = value;
  f.metric.push_back(std::move(m));
}

void FamilyBuilder::Gauge(const std::string& name, const std::string& help, const Labels& labels, double value) {
  Add(name, help, prometheus::MetricType::Gauge, labels, value);
}

void FamilyBuilder::Counter(const std::string& name, const std::string& help, const Labels& labels, double value) {
  Add(name, help, prometheus::MetricType::Counter, labels, value);
}

std::vector<prometheus::MetricFamily> FamilyBuilder::Take() {
  std::vector<prometheus::MetricFamily> out;
  for (auto& [name, f] : families_) out.push_back(std::move(f));
  families_.clear();
  return out;
}

std::vector<prometheus::MetricFamily> SnapshotCollector::Collect() const {
  FamilyBuilder b;
  fill_(&b);
  return b.Take();
}

StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& listen) {
  auto server = std::make_unique<MetricsServer>();
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(listen);
  } catch (const std::exception& e) {
    return Status::Unavailable("cannot serve metrics on " + listen + ": " + e.what());
  }
  auto ports = server->exposer_->GetListeningPorts();
  server->port_ = ports.empty() ? 0 : ports[0];
  return server;
}

void MetricsServer::Register(std::weak_ptr<prometheus::Collectable> collectable) {
  exposer_->RegisterCollectable(collectable);
}

void WritePortFile(const std::string& path, int port) {
  if (path.empty()) return;
  io::WriteFileAtomically(path, std::to_string(port) + "\n");
}

}  // namespace nightshift
