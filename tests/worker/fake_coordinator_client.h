// FakeCoordinatorClient: the coordinator's side of the worker protocol, scripted by a
// test: it records every request and answers with what the test queued. Used from the
// test's thread only (the test drives the agent with RunOnce).
#ifndef NIGHTSHIFT_TESTS_WORKER_FAKE_COORDINATOR_CLIENT_H_
#define NIGHTSHIFT_TESTS_WORKER_FAKE_COORDINATOR_CLIENT_H_

#include <deque>
#include <vector>

#include "worker/coordinator_client.h"

namespace nightshift {

class FakeCoordinatorClient : public CoordinatorClient {
 public:
  // Answers: each call takes the front of its queue, or OK and an empty response.
  std::deque<Status> register_statuses, heartbeat_statuses, report_statuses;
  v1::RegisterResponse register_response;
  std::deque<v1::HeartbeatResponse> heartbeat_responses;

  // Every request, in order (also those answered with an error).
  std::vector<v1::RegisterRequest> registers;
  std::vector<v1::HeartbeatRequest> heartbeats;
  std::vector<v1::ReportTaskRequest> reports;

  Status Register(const v1::RegisterRequest& request, v1::RegisterResponse* response) override {
    registers.push_back(request);
    Status s = Next(&register_statuses);
    if (s.ok()) *response = register_response;
    return s;
  }
  Status Heartbeat(const v1::HeartbeatRequest& request, v1::HeartbeatResponse* response) override {
    heartbeats.push_back(request);
    Status s = Next(&heartbeat_statuses);
    if (s.ok() && !heartbeat_responses.empty()) {
      *response = heartbeat_responses.front();
      heartbeat_responses.pop_front();
    }
    return s;
  }
  Status ReportTask(const v1::ReportTaskRequest& request, v1::ReportTaskResponse*) override {
    reports.push_back(request);
    return Next(&report_statuses);
  }
  void SetDeadline(std::chrono::milliseconds d) override { deadline = d; }
  std::chrono::milliseconds deadline{0};  // the last SetDeadline (0: never called)

 private:
  static Status Next(std::deque<Status>* queue) {
    if (queue->empty()) return Status::OK();
    Status s = queue->front();
    queue->pop_front();
    return s;
  }
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_TESTS_WORKER_FAKE_COORDINATOR_CLIENT_H_
