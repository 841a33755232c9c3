#!/usr/bin/python3
"""A second, independent gRPC client (Python grpcio) against the real coordinator with
a token file: SubmitJob and GetJob without a token are UNAUTHENTICATED, with a user's
token they work, and another user's token cannot read the job.

Usage: auth_python_client_test.py BIN_DIR SOURCE_DIR
Stubs are generated at test time with protoc --python_out (Debian's protoc matches
python3-protobuf); calls go through grpcio's generic unary-unary API.
"""
import hashlib
import os
import subprocess
import sys
import tempfile
import time

import grpc


def main():
    bin_dir, source_dir = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="nightshift-pyauth-") as tmp:
        gen = os.path.join(tmp, "gen")
        os.makedirs(gen)
        protos = ["nightshift/v1/" + p for p in ("spec.proto", "jobs.proto")]
        subprocess.run(["protoc", "--proto_path", os.path.join(source_dir, "proto"), "--python_out", gen] + protos,
                       check=True)
        sys.path.insert(0, gen)
        from nightshift.v1 import jobs_pb2  # noqa: E402

        tokens = os.path.join(tmp, "tokens")
        with open(tokens, "w") as f:
            f.write(hashlib.sha256(b"alice-secret").hexdigest() + " user alice\n")
            f.write(hashlib.sha256(b"bob-secret").hexdigest() + " user bob\n")
        port_file = os.path.join(tmp, "port")
        log = open(os.path.join(tmp, "coordinator.log"), "w")
        coord = subprocess.Popen([os.path.join(bin_dir, "nightshift-coordinator"), "--listen", "127.0.0.1:0",
                                  "--data-dir", os.path.join(tmp, "db"), "--port-file", port_file,
                                  "--token-file", tokens], stdout=log, stderr=log)
        try:
            for _ in range(300):
                if os.path.exists(port_file) and open(port_file).read().strip():
                    break
                time.sleep(0.05)
            address = "127.0.0.1:" + open(port_file).read().strip()
            channel = grpc.insecure_channel(address)
            submit = channel.unary_unary("/nightshift.v1.JobService/SubmitJob",
                                         request_serializer=jobs_pb2.SubmitJobRequest.SerializeToString,
                                         response_deserializer=jobs_pb2.Job.FromString)
            get = channel.unary_unary("/nightshift.v1.JobService/GetJob",
                                      request_serializer=jobs_pb2.GetJobRequest.SerializeToString,
                                      response_deserializer=jobs_pb2.Job.FromString)
            req = jobs_pb2.SubmitJobRequest()
            req.spec.model.arch = "transformer_classifier"
            req.spec.data.path = "/nonexistent"

            def code_of(call, *args, **kwargs):
                try:
                    call(*args, timeout=10, **kwargs)
                    return grpc.StatusCode.OK
                except grpc.RpcError as e:
                    return e.code()

            assert code_of(submit, req) == grpc.StatusCode.UNAUTHENTICATED
            assert code_of(submit, req, metadata=[("authorization", "Bearer nope")]) == \
                grpc.StatusCode.UNAUTHENTICATED
            alice = [("authorization", "Bearer alice-secret")]
            job = submit(req, timeout=10, metadata=alice)
            assert job.owner == "alice" and job.id, job
            assert code_of(get, jobs_pb2.GetJobRequest(id=job.id)) == grpc.StatusCode.UNAUTHENTICATED
            got = get(jobs_pb2.GetJobRequest(id=job.id), timeout=10, metadata=alice)
            assert got.id == job.id and got.spec.model.arch == "transformer_classifier"
            assert code_of(get, jobs_pb2.GetJobRequest(id=job.id),
                           metadata=[("authorization", "Bearer bob-secret")]) == grpc.StatusCode.PERMISSION_DENIED
            # The proto path refuses what the YAML path refuses: a NaN learning rate.
            bad = jobs_pb2.SubmitJobRequest()
            bad.CopyFrom(req)
            bad.spec.train.lr = float("nan")
            assert code_of(submit, bad, metadata=alice) == grpc.StatusCode.INVALID_ARGUMENT
            print("python grpc client: ok")
        finally:
            coord.kill()
            coord.wait()


if __name__ == "__main__":
    main()
