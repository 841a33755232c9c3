// Prometheus plumbing shared by the daemons: a pull exposer on --metrics-listen and a
// Collectable that builds gauge/counter families from a snapshot at scrape time (so
// state such as "jobs by state" is read, never mirrored into a second copy that could
// drift). Metric names follow Prometheus conventions: nightshift_*, base units
// (seconds, bytes) in the name, counters end in _total.
#ifndef NIGHTSHIFT_COMMON_METRICS_H_
#define NIGHTSHIFT_COMMON_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace nightshift {

// Builds metric families during one scrape.
class FamilyBuilder {
 public:
  using Labels = std::map<std::string, std::string>;
  void Gauge(const std::string& name, const std::string& help, const Labels& labels, double value);
  void Counter(const std::string& name, const std::string& help, const Labels& labels, double value);
  std::vector<prometheus::MetricFamily> Take();

 private:
  void Add(const std::string& name, const std::string& help, prometheus::MetricType type,
           const Labels& labels, double value);
  std::map<std::string, prometheus::MetricFamily> families_;
};

// A Collectable whose families come from a function called at every scrape.
class SnapshotCollector : public prometheus::Collectable {
 public:
  explicit SnapshotCollector(std::function<void(FamilyBuilder*)> fill) : fill_(std::move(fill)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::function<void(FamilyBuilder*)> fill_;
};

// Serves registries on http://<listen>/metrics. "127.0.0.1:0" picks a free port.
class MetricsServer {
 public:
  static StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& listen);
  void Register(std::weak_ptr<prometheus::Collectable> collectable);
  int port() const { return port_; }

 private:
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

// Writes `value` to `path` atomically (for --port-file style flags).
void WritePortFile(const std::string& path, int port);

}  // namespace nightshift

#endif  // NIGHTSHIFT_COMMON_METRICS_H_
