// Text the verbs print, shared between them: pure functions of the messages, so every
// row and line is written once and tested without a coordinator.
#ifndef NIGHTSHIFT_CLI_FORMAT_H_
#define NIGHTSHIFT_CLI_FORMAT_H_

#include <google/protobuf/map.h>
#include <google/protobuf/message.h>

#include <cstdint>
#include <string>

#include "common/job_state.h"
#include "nightshift/v1/admin.pb.h"
#include "nightshift/v1/jobs.pb.h"

namespace nightshift::cli {

// snprintf into a string of whatever length the text needs.
std::string Sprintf(const char* format, ...) __attribute__((format(printf, 1, 2)));

// -o json: the protobuf JSON mapping with the .proto field names, indented.
std::string ToJson(const google::protobuf::Message& m);

// Rounded to seconds: "42s", "3m07s", "2h05m"; "-" for negative, NaN or absurd (> 10^7 s).
std::string Duration(double seconds);

// "2024-05-01T12:00:00Z" (UTC) for seconds since the epoch.
std::string UtcTime(int64_t seconds);

// "[######..] 25% step 50/200 epoch 0 loss 0.6931 1234 tok/s rss 512 MiB ETA 1m40s".
std::string ProgressLine(const v1::Job& job);

// One "  name   value" line per metric, sorted by name, each ending in a newline.
std::string MetricLines(const google::protobuf::Map<std::string, double>& metrics);

// READY, READY,CORDONED or READY,DRAINING (draining implies cordoned).
std::string WorkerStateText(const v1::WorkerInfo& w);

// A worker's row in `worker list` and `cluster status`, which differ only in the width
// of the state column: name, state, slots, used slots, its tasks' job ids (a,b).
std::string WorkerRow(const v1::WorkerInfo& w, int state_width);

// `job metrics`: per attempt, one row per evaluation (epoch, step, the training loss at
// that step, every val_* metric), or a line saying there is none yet.
std::string MetricsTable(const v1::JobMetrics& m);
// `job metrics -o csv`: "attempt,step,epoch,metric,value" then one row per value (the
// training points' loss, lr and tokens_per_second, the evaluations' val_*), in order.
std::string MetricsCsv(const v1::JobMetrics& m);
// The training loss against the step, every attempt, drawn in `width` x `height`
// characters ('*' a point), with the loss range on the left and the step range below;
// "" when there are fewer than two points.
std::string LossCurve(const v1::JobMetrics& m, int width = 60, int height = 12);

}  // namespace nightshift::cli

#endif  // NIGHTSHIFT_CLI_FORMAT_H_
