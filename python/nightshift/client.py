"""The Nightshift client: submit, follow and analyse jobs from a script or a notebook.

    import nightshift
    client = nightshift.Client()              # settings as the CLI finds them
    job = client.submit("job.yaml")           # a path, YAML text or a dict
    job.wait()                                # a progress bar until it ends
    print(job.metrics())                      # evaluations per epoch
    model = job.model()                       # downloaded, verified, loaded

Every verb mirrors the `nightshift` CLI's (cli/verbs/job.cc): the same calls, retries,
checks and error words. A refused call raises a nightshift.errors class.
"""
from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import random
import shutil
import tempfile
import time
import uuid
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, TypeVar, Union

import grpc
import yaml

from nightshift import download, settings
from nightshift.errors import DownloadCorrupt, SettingsError, Unavailable, from_rpc_error
from nightshift.metrics import Metrics
from nightshift.sweeps import Sweep, SweepLike, sweep_yaml

try:
    from nightshift.v1 import admin_pb2, admin_pb2_grpc, jobs_pb2, jobs_pb2_grpc, spec_pb2
except ImportError as e:  # a source tree on sys.path: the stubs are made by the package build
    raise ImportError("nightshift.v1 (the gRPC stubs) is generated when the package is built: "
                      "pip install ./python") from e

log = logging.getLogger("nightshift")
T = TypeVar("T")

CALL_SECONDS = 30.0  # the deadline of a unary call, as the CLI's Session::Deadline()
TERMINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")
SpecLike = Union[str, "os.PathLike[str]", Dict[str, Any], spec_pb2.JobSpec]


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How submit retries UNAVAILABLE and DEADLINE_EXCEEDED (cli/retry.h): exponential
    backoff with jitter, the same request id on every attempt."""

    retry_for: float = 60.0  # seconds after which no new attempt starts; 0: one attempt
    first_backoff: float = 0.2  # seconds before the 2nd attempt; doubles each time
    max_backoff: float = 5.0  # the longest wait between two attempts, seconds
    attempt_seconds: float = 30.0  # deadline of one attempt (cut to the time left, at least 1 s)


def call_with_retry(policy: RetryPolicy, attempt: Callable[[float], T]) -> T:
    """Calls attempt(timeout_seconds) until it returns, raises an error that is not
    UNAVAILABLE or DEADLINE_EXCEEDED, or the policy's time is up (then the last error)."""
    end = time.monotonic() + policy.retry_for
    backoff, n = policy.first_backoff, 0
    while True:
        budget = min(policy.attempt_seconds, max(end - time.monotonic(), 1.0))
        n += 1
        try:
            return attempt(budget)
        except grpc.RpcError as e:
            if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
            wait = random.uniform(backoff / 2, backoff)
            if time.monotonic() + wait >= end:
                raise
            log.warning("note: %s; attempt %d failed, retrying in %.1f s", e.details(), n, wait)
            time.sleep(wait)
            backoff = min(backoff * 2, policy.max_backoff)


def _state_name(state: int) -> str:
    return jobs_pb2.JobState.Name(state)  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class Event:
    """One change of a job's state (Job.events)."""

    time: datetime.datetime  # UTC
    state: str  # QUEUED, RUNNING, ...
    reason: str
    attempt: int
    step: int  # the step the attempt resumes from (0: from scratch)


@dataclasses.dataclass(frozen=True)
class Worker:
    """A worker as the coordinator sees it (Client.workers)."""

    name: str
    state: str  # WORKER_READY or WORKER_LOST, with ",CORDONED" or ",DRAINING" (as `nightshift worker list`)
    slots: int
    used_slots: int
    jobs: List[str]  # the jobs of its tasks


class Client:
    """A connection to a Nightshift coordinator.

    Settings come from the arguments, else NIGHTSHIFT_COORDINATOR / NIGHTSHIFT_TOKEN, else
    the settings file (`config`, NIGHTSHIFT_CONFIG or ~/.config/nightshift/config.yaml),
    exactly as for the CLI (nightshift.settings). `interceptors` are gRPC client
    interceptors put in front of every call (tracing, tests).
    """

    def __init__(self, coordinator: Optional[str] = None, token: Optional[str] = None,
                 tls_ca: Optional[str] = None, *, token_file: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None, config: Optional[str] = None,
                 retry: RetryPolicy = RetryPolicy(),
                 interceptors: Sequence[grpc.UnaryUnaryClientInterceptor] = ()) -> None:
        self.settings = settings.resolve(coordinator, token, token_file, tls_ca, tls_cert, tls_key, config)
        self.retry = retry
        s = self.settings
        # gRPC's reconnect backoff grows to 120 s; the CLI's channel tries at most 5 s apart.
        options = [("grpc.initial_reconnect_backoff_ms", 500), ("grpc.max_reconnect_backoff_ms", 5000)]
        if s.tls_ca:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=settings.read_small_file(s.tls_ca, "tls_ca"),
                private_key=settings.read_small_file(s.tls_key, "tls_key") if s.tls_key else None,
                certificate_chain=settings.read_small_file(s.tls_cert, "tls_cert") if s.tls_cert else None)
            self._channel = grpc.secure_channel(s.coordinator, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(s.coordinator, options=options)
        channel = grpc.intercept_channel(self._channel, *interceptors) if interceptors else self._channel
        self._metadata = (("authorization", f"Bearer {s.token}"),) if s.token else ()
        self._jobs = jobs_pb2_grpc.JobServiceStub(channel)
        self._admin = admin_pb2_grpc.AdminServiceStub(channel)

    def __repr__(self) -> str:
        return f"nightshift.Client({self.settings.coordinator!r}{', TLS' if self.settings.tls_ca else ''})"

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connection."""
        self._channel.close()

    def _unary(self, method: Callable[..., T], request: Any, context: str = "") -> T:
        try:
            return method(request, timeout=CALL_SECONDS, metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e, context) from None

    def _submit(self, method: Callable[..., T], request: Any, request_id: Optional[str], context: str) -> T:
        """Sends a submission with one request id (random unless given) on every attempt,
        UNAVAILABLE and DEADLINE_EXCEEDED retried for self.retry.retry_for seconds: a reply
        lost on the way back never makes a second job or sweep."""
        request.request_id = request_id if request_id is not None else uuid.uuid4().hex
        try:
            return call_with_retry(self.retry, lambda seconds: method(request, timeout=seconds, metadata=self._metadata))
        except grpc.RpcError as e:
            raise from_rpc_error(e, context) from None

    # -- jobs ------------------------------------------------------------------------------
    def submit(self, spec: SpecLike, request_id: Optional[str] = None) -> "Job":
        """Submits a job: `spec` is a path to a YAML or JSON file, YAML text, a dict or a JobSpec.

        One request id (random unless given) is sent on every attempt, and UNAVAILABLE or
        DEADLINE_EXCEEDED are retried for self.retry.retry_for seconds, so a reply lost on
        the way back never makes two jobs. SpecRefused names the field the coordinator refused.
        """
        request, context = spec_request(spec)
        return Job(self, self._submit(self._jobs.SubmitJob, request, request_id, context))

    def job(self, id: str) -> "Job":
        """The job `id` now (NotFound if there is none)."""
        return Job(self, self._unary(self._jobs.GetJob, jobs_pb2.GetJobRequest(id=id)))

    def jobs(self, state: Union[str, Sequence[str], None] = None) -> List["Job"]:
        """Every job the caller may see (a user: their own), oldest first; `state` filters
        (a name such as "RUNNING", or several)."""
        request = jobs_pb2.ListJobsRequest()
        for name in [state] if isinstance(state, str) else list(state or []):
            if name not in jobs_pb2.JobState.keys() or name == "JOB_STATE_UNSPECIFIED":
                raise SettingsError(f"state: unknown state {name}")
            request.states.append(jobs_pb2.JobState.Value(name))
        out: List[Job] = []
        while True:
            page = self._unary(self._jobs.ListJobs, request)
            out += [Job(self, j) for j in page.jobs]
            if not page.next_page_token:
                return out
            request.page_token = page.next_page_token

    def cancel(self, id: str, reason: str = "") -> "Job":
        """Cancels the job: its ranks stop and its slots are freed. Returns it as the coordinator left it."""
        return Job(self, self._unary(self._jobs.CancelJob, jobs_pb2.CancelJobRequest(id=id, reason=reason)))

    def delete(self, id: str) -> None:
        """Removes a finished job and its history now (FailedPrecondition while it runs: cancel it first)."""
        self._unary(self._jobs.DeleteJob, jobs_pb2.DeleteJobRequest(id=id))

    # -- sweeps ----------------------------------------------------------------------------
    def sweep(self, sweep: SweepLike, request_id: Optional[str] = None) -> Sweep:
        """Submits a sweep (docs/sweeps.md): a path to its YAML file, YAML text or a dict;
        `base: FILE` names a job spec file relative to the sweep file, as for the CLI.
        request_id (default: a new one): a retry with the same id gets the sweep the first
        call made, as for submit()."""
        text, context = sweep_yaml(sweep)
        return Sweep(self, self._submit(self._jobs.SubmitSweep, jobs_pb2.SubmitSweepRequest(sweep_yaml=text),
                                        request_id, context))

    def sweeps(self) -> List[Sweep]:
        """Every sweep the caller may see (a user: their own), oldest first, without their events."""
        request = jobs_pb2.ListSweepsRequest()
        out: List[Sweep] = []
        while True:
            page = self._unary(self._jobs.ListSweeps, request)
            out += [Sweep(self, w) for w in page.sweeps]
            if not page.next_page_token:
                return out
            request.page_token = page.next_page_token

    def get_sweep(self, id: str) -> Sweep:
        """The sweep `id` now (NotFound if there is none)."""
        return Sweep(self, self._unary(self._jobs.GetSweep, jobs_pb2.GetSweepRequest(id=id)))

    def workers(self) -> List[Worker]:
        """The workers (an admin call: PermissionDenied for a user's token)."""
        out = self._unary(self._admin.ListWorkers, admin_pb2.ListWorkersRequest())
        return [Worker(w.name, _worker_state(w), w.slots, w.used_slots, [t.job_id for t in w.tasks])
                for w in out.workers]


def _worker_state(w: admin_pb2.WorkerInfo) -> str:
    state = admin_pb2.WorkerState.Name(w.state)
    return state + (",DRAINING" if w.draining else ",CORDONED" if w.cordoned else "")


def spec_request(spec: SpecLike) -> tuple[jobs_pb2.SubmitJobRequest, str]:
    """The SubmitJobRequest for a spec, and the context an error names (the file, if any)."""
    request = jobs_pb2.SubmitJobRequest()
    if isinstance(spec, spec_pb2.JobSpec):
        request.spec.CopyFrom(spec)
        return request, ""
    if isinstance(spec, dict):
        request.spec_yaml = yaml.safe_dump(spec, sort_keys=False)
        return request, ""
    if isinstance(spec, os.PathLike) or (isinstance(spec, str) and "\n" not in spec and (
            os.path.isfile(spec) or spec.endswith((".yaml", ".yml", ".json")))):
        path = os.fspath(spec)
        try:
            with open(path, encoding="utf-8") as f:
                request.spec_yaml = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise SettingsError(f"cannot read spec file {path}") from e
        if not request.spec_yaml:
            raise SettingsError(f"spec file {path} is empty")
        return request, path
    if not isinstance(spec, str):
        raise SettingsError(f"spec: a path, YAML text, a dict or a JobSpec, not {type(spec).__name__}")
    if not spec.strip():
        raise SettingsError("spec is empty")
    request.spec_yaml = spec
    return request, ""


class Job:
    """A job as last seen (`proto`: the nightshift.v1.Job), with what can be done with it."""

    def __init__(self, client: Client, proto: jobs_pb2.Job) -> None:
        self.client = client
        self.proto = proto

    @property
    def id(self) -> str:
        """The job's id (j-000001)."""
        return self.proto.id

    @property
    def state(self) -> str:
        """QUEUED, SCHEDULED, RUNNING, SUCCEEDED, FAILED, CANCELLED, PREEMPTED or STUCK (as last seen)."""
        return _state_name(self.proto.state)

    @property
    def name(self) -> str:
        """The spec's name."""
        return self.proto.spec.name

    @property
    def reason(self) -> str:
        """Why it is in its state."""
        return self.proto.reason

    @property
    def error(self) -> str:
        """The failing rank's last error (empty unless it failed)."""
        return self.proto.error

    @property
    def final_metrics(self) -> Dict[str, float]:
        """The final validation metrics (val_accuracy, ...), once it succeeded."""
        return dict(sorted(self.proto.metrics.items()))

    @property
    def done(self) -> bool:
        """Whether it ended (SUCCEEDED, FAILED or CANCELLED), as last seen."""
        return self.state in TERMINAL_STATES

    def __repr__(self) -> str:
        return f"<nightshift.Job {self.id} {self.state}{': ' + self.reason if self.reason else ''}>"

    def refresh(self) -> "Job":
        """Reads the job again; returns self."""
        self.proto = self.client.job(self.id).proto
        return self

    def events(self) -> List[Event]:
        """Its changes of state, in order (read now)."""
        self.refresh()
        return [Event(datetime.datetime.fromtimestamp(e.time.seconds + e.time.nanos / 1e9, datetime.timezone.utc),
                      _state_name(e.state), e.reason, e.attempt, e.step) for e in self.proto.events]

    def watch(self, timeout: Optional[float] = None) -> Iterator["Job"]:
        """Yields the job now, then again on every change of state or progress, until it ends.
        A lost connection is reopened (up to 30 times, 1 s apart), as `nightshift job watch`
        does; TimeoutError after `timeout` seconds."""
        end = None if timeout is None else time.monotonic() + timeout
        for _ in range(30):
            left = None if end is None else max(end - time.monotonic(), 0.001)
            stream = self.client._jobs.WatchJob(jobs_pb2.WatchJobRequest(id=self.id), timeout=left,
                                                metadata=self.client._metadata)
            try:
                for update in stream:
                    self.proto = update
                    yield self
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED and end is not None and time.monotonic() >= end:
                    raise TimeoutError(f"job {self.id} is still {self.state} after {timeout} s") from None
                if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise from_rpc_error(e, self.id) from None
            finally:
                stream.cancel()  # also when the caller stops iterating early
            if self.done:
                return
            time.sleep(1)
        raise Unavailable(f"lost the coordinator 30 times while following job {self.id}",
                          grpc.StatusCode.UNAVAILABLE, self.id)

    def wait(self, progress: bool = True, timeout: Optional[float] = None) -> "Job":
        """Follows the job to its end and returns it (check .state: SUCCEEDED, FAILED or
        CANCELLED). `progress`: a tqdm bar of its steps with loss and state, in a terminal
        or a notebook. TimeoutError after `timeout` seconds."""
        bar = None
        try:
            for job in self.watch(timeout):
                p = job.proto.progress
                if progress and bar is None and (p.total_steps > 0 or job.done):
                    from tqdm.auto import tqdm

                    bar = tqdm(total=max(p.total_steps, 1), desc=job.id, unit="step")
                if bar is not None:
                    bar.total = max(p.total_steps, bar.total or 1)
                    bar.n = bar.total if job.state == "SUCCEEDED" else min(p.step, bar.total)
                    bar.set_postfix_str(f"{job.state} loss {p.loss:.4f}" if p.step else job.state, refresh=False)
                    bar.refresh()
        finally:
            if bar is not None:
                bar.close()
        return self

    def logs(self, rank: int = 0, follow: bool = False) -> Iterator[str]:
        """The rank's log, line by line, as the coordinator relays it from the worker;
        `follow`: keep yielding new lines until the rank ends (like tail -f)."""
        stream = self.client._jobs.StreamLogs(jobs_pb2.StreamLogsRequest(id=self.id, rank=rank, follow=follow),
                                              metadata=self.client._metadata)
        rest = b""
        try:
            for chunk in stream:
                lines = (rest + chunk.data).split(b"\n")
                rest = lines.pop()
                for line in lines:
                    yield line.decode("utf-8", "replace")
        except grpc.RpcError as e:
            raise from_rpc_error(e, self.id) from None
        finally:
            stream.cancel()
        if rest:
            yield rest.decode("utf-8", "replace")

    def metrics(self) -> Metrics:
        """Its evaluations per epoch and its training curve, per attempt (nightshift.metrics.Metrics)."""
        return Metrics(self.client._unary(self.client._jobs.GetJobMetrics, jobs_pb2.GetJobMetricsRequest(id=self.id)))

    def plot(self) -> Any:
        """Its loss and validation curves as a matplotlib Figure (needs matplotlib)."""
        return self.metrics().plot()

    def artifacts(self, dir: Optional[str] = None, step: int = 0) -> str:
        """Downloads its exported model (or the kept checkpoint at `step`) into `dir`
        (default ./<id>-model[-step-N], which must not exist), verifying every checksum;
        returns the folder. On any failure nothing is kept (DownloadCorrupt for a mismatch)."""
        if step < 0:
            raise SettingsError(f"step must be 0 or more, not {step}")
        dest = dir if dir else (f"{self.id}-model-step-{step}" if step > 0 else f"{self.id}-model")
        tmp = download.prepare(dest)
        try:
            stream = self.client._jobs.GetArtifacts(jobs_pb2.GetArtifactsRequest(id=self.id, step=step),
                                                    metadata=self.client._metadata)
            try:
                checksums_json, _ = download.receive(stream, tmp)
            except grpc.RpcError as e:
                raise from_rpc_error(e, self.id) from None
            except DownloadCorrupt as e:
                stream.cancel()
                raise DownloadCorrupt(f"download of job {self.id} failed, nothing kept: {e}") from None
            with open(os.path.join(tmp, download.CHECKSUMS_FILE), "w", encoding="utf-8") as f:
                f.write(checksums_json)
            try:
                download.verify(tmp)
            except DownloadCorrupt as e:
                raise DownloadCorrupt(f"the model of job {self.id} did not verify, nothing kept: {e}") from None
            os.rename(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return dest

    def model(self, dir: Optional[str] = None, device: str = "cpu") -> Any:
        """Downloads its model (artifacts(dir); default: a new temporary folder) and loads it
        with nightshift.load for prediction."""
        from nightshift.model import load  # torch, only when a model is loaded

        if dir is not None:
            return load(self.artifacts(dir), device=device)
        parent = tempfile.mkdtemp(prefix=f"nightshift-{self.id}-")
        try:
            return load(self.artifacts(os.path.join(parent, "model")), device=device)
        except BaseException:
            shutil.rmtree(parent, ignore_errors=True)
            raise
