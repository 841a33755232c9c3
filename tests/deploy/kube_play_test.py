#!/usr/bin/env python3
"""The pods of --cluster kubernetes, run from the images alone (issue 44).

A release check, not run in CI (the worker image holds GBs of CUDA libraries;
docs/operating.md#images): `kube_play_test.py BIN_DIR SOURCE_DIR [--images DIR]`, DIR
holding the archives deploy/images/build.sh wrote (default: both built here, about 5
minutes). Needs root, podman with runc and catatonit (scripts/install-deps.sh).

Test hosts: network namespaces joined by a bridge, addresses from 198.18.0.0/15
(tests/support/slurm_cluster.make_network): `ctl` holds the fake Kubernetes API server
(tests/support/fake_kube_api.py) and the coordinator of nightshift-control with
`--cluster kubernetes`; `n1` and `n2` are the nodes. This test then does what the Job
controller and the kubelet would, and nothing more: for each Job the coordinator
creates, it makes the Job's pods from its pod template as the Job controller does (one
per completion index: the index's label and annotation, JOB_COMPLETION_INDEX, hostname
<job>-<index>), gives podman the attempt's Secret (a podman secret) and the claims (podman
volumes bound to folders of this test), runs pod <index> on node n<index+1> with
`podman kube play` of nightshift-worker, the template as the coordinator wrote it
(command, env from the Secret, volumes, grace period), reports the pods in the Job's
status (active, then Complete or Failed, as the Job controller would), and removes them
when the coordinator deletes the Job.

Not Kubernetes here: a pod uses its node's network (podman's pods cannot join a named
namespace; the nodes are those namespaces), so the headless Service's DNS is not used
(our workers reach each other by address); podman 4.3 puts the `/dev/shm` emptyDir on
disk, not in memory; no GPU is asked for (a CPU job).

Checks: a 2-rank job SUCCEEDS with one rank in each pod, each pod's worker on its node's
address under the name <job>-a0-pod<index>; the coordinator (from its image) serves the
model the pods wrote to the checkpoint claim; after the job the coordinator deleted the Job
and every pod of it is gone. Then Kueue's preemption: a running Job is suspended (its pods
terminating, stopped 3 s later with SIGTERM): the next attempt's Job is created only once
they are gone, resumes from the checkpoint the ranks wrote when stopped (the only one: no
periodic checkpoints), counts no restart, and is deleted with its pods on `job cancel`. Everything this test made (containers, pods, secrets,
volumes, images, namespaces, folders) is removed at the end (podman keeps the pause image it
builds for pods from catatonit).
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import slurm_cluster  # noqa: E402  (make_network, the test hosts)

NAMESPACE = "nightshift"  # the coordinator's default --kubernetes-namespace


def run(argv: list[str], timeout: float = 120, check: bool = True, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r


def enter_netns(ns: str) -> None:
    """This process (its one thread) and what it starts from now on: in test host `ns`."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
            raise OSError(ctypes.get_errno(), f"setns {ns}")
    finally:
        os.close(fd)


def make_data(root: str) -> None:
    """Two classes of short mails, as tests/e2e/cluster.h's MakeData."""
    words = [["meeting", "project", "lunch", "report", "agenda", "thanks", "team", "review"],
             ["winner", "prize", "free", "money", "click", "offer", "cash", "bonus"]]
    shared = ["the", "and", "you", "today"]
    for c, label in enumerate(["ham", "spam"]):
        os.makedirs(os.path.join(root, label))
        for i in range(60):
            text = " ".join(words[c][(i * 3 + k) % 8] if (k + i) % 3 == 0 else shared[(i + k) % 4]
                            for k in range(6 + (i * 7) % 30))
            with open(os.path.join(root, label, f"{i}.txt"), "w") as f:
                f.write(text)


class Kubelet:
    """The Job controller and the kubelets of the nodes, for the Jobs of one namespace."""

    def __init__(self, api: str, nodes: list[str], podman: list[str], work: str):
        self.api, self.nodes, self.podman, self.work = api, nodes, podman, work
        self.jobs: dict[str, dict] = {}  # name -> {"pods": [...], "done": bool}
        self.removed: list[str] = []    # Jobs the coordinator deleted, whose pods went
        self.stopping: dict[str, dict] = {}  # suspended Jobs whose pods are being stopped
        self.seen_at: dict[str, float] = {}  # when each Job was first listed
        self.gone_at: dict[str, float] = {}  # when a suspended Job's pods were all stopped

    SUSPENDED = [{"type": "Suspended", "status": "True", "reason": "JobSuspended", "message": "preempted"}]

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.api + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read() or b"{}")

    def pass_(self) -> None:
        listed_at = time.monotonic()  # before stop_pods: a Job listed now existed before pods it stops are gone
        listed = {j["metadata"]["name"]: j for j in
                  self.call("GET", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs")["items"]}
        self.stop_pods()
        for name, job in listed.items():
            self.seen_at.setdefault(name, listed_at)
            if name not in self.jobs and not job["spec"].get("suspend"):
                self.start(name, job)
            elif name in self.jobs and not self.jobs[name]["done"]:
                self.follow(name)
        for name in [n for n in self.jobs if n not in listed and n not in self.stopping]:
            self.remove(name)  # deleted: its pods get SIGTERM and the grace period

    def start(self, name: str, job: dict) -> None:
        template = job["spec"]["template"]
        secret = self.call("GET", f"/_test/objects/secrets/{NAMESPACE}/{name}")
        # podman's secretKeyRef reads a podman secret holding {key: base64 value}; the API
        # server keeps stringData as data the same way.
        values = {k: base64.b64encode(v.encode()).decode() for k, v in secret.get("stringData", {}).items()}
        values.update(secret.get("data", {}))
        secret_file = os.path.join(self.work, f"{name}.secret.json")
        with open(secret_file, "w") as f:
            json.dump(values, f)
        pods: list[str] = []
        self.jobs[name] = {"pods": pods, "done": False}  # before anything is made: removed on any failure
        run(self.podman + ["secret", "create", name, secret_file])
        for index in range(job["spec"]["completions"]):
            pod_name = f"{name}-{index}"
            spec = json.loads(json.dumps(template["spec"]))
            spec["hostname"] = pod_name
            for c in spec["containers"]:
                c.setdefault("env", []).append({"name": "JOB_COMPLETION_INDEX", "value": str(index)})
            labels = dict(template["metadata"].get("labels", {}),
                          **{"batch.kubernetes.io/job-completion-index": str(index), "job-name": name})
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": pod_name, "labels": labels,
                                "annotations": {"batch.kubernetes.io/job-completion-index": str(index)}},
                   "spec": spec}
            pod_file = os.path.join(self.work, f"{pod_name}.yaml")
            with open(pod_file, "w") as f:
                json.dump(pod, f)  # JSON is YAML
            node = self.nodes[index % len(self.nodes)]
            pods.append(pod_name)
            run(["nsenter", f"--net=/run/netns/{node}"] + self.podman + ["kube", "play", "--network", "host", pod_file],
                timeout=300)
        self.call("POST", f"/_test/jobs/{NAMESPACE}/{name}/status", {"active": len(pods), "ready": len(pods)})

    def exit_code(self, pod: str) -> int | None:
        r = run(self.podman + ["inspect", f"{pod}-worker", "--format", "{{.State.Status}} {{.State.ExitCode}}"])
        status, code = r.stdout.split()
        return int(code) if status in ("exited", "stopped") else None

    def follow(self, name: str) -> None:
        codes = [self.exit_code(p) for p in self.jobs[name]["pods"]]
        if any(c is None for c in codes):
            return
        self.jobs[name]["done"] = True
        n = len(codes)
        if all(c == 0 for c in codes):
            status = {"succeeded": n, "conditions": [{"type": "Complete", "status": "True"}]}
        else:
            bad_spec = 2 in codes  # the pod failure policy's FailJob rule
            status = {"failed": sum(c != 0 for c in codes), "succeeded": sum(c == 0 for c in codes),
                      "conditions": [{"type": "Failed", "status": "True",
                                      "reason": "PodFailurePolicy" if bad_spec else "BackoffLimitExceeded",
                                      "message": f"exit codes {codes}"}]}
        self.call("POST", f"/_test/jobs/{NAMESPACE}/{name}/status", status)

    def suspend(self, name: str, after: float = 3.0) -> None:
        """Kueue takes the Job back (spec.suspend): the Job is Suspended at once, its pods
        terminating (status.terminating, Kubernetes 1.29+); the Job controller deletes them
        and each gets SIGTERM and its grace period. Here they are stopped `after` seconds
        (a checkpoint that takes that long), by later passes, which go on meanwhile."""
        self.jobs[name]["done"] = True
        self.stopping[name] = {"at": time.monotonic() + after, "stops": None}
        self.call("POST", f"/_test/jobs/{NAMESPACE}/{name}/status",
                  {"active": 0, "terminating": len(self.jobs[name]["pods"]), "conditions": self.SUSPENDED})

    def stop_pods(self) -> None:
        for name, s in list(self.stopping.items()):
            if s["stops"] is None and time.monotonic() >= s["at"]:
                s["stops"] = [subprocess.Popen(self.podman + ["pod", "stop", "-t", "30", p], stdout=subprocess.DEVNULL)
                              for p in self.jobs[name]["pods"]]
            if s["stops"] is not None and all(stop.poll() is not None for stop in s["stops"]):
                del self.stopping[name]
                self.gone_at[name] = time.monotonic()
                try:  # (deleted already, if the coordinator did not wait for them)
                    self.call("POST", f"/_test/jobs/{NAMESPACE}/{name}/status",
                              {"active": 0, "conditions": self.SUSPENDED})
                except urllib.error.HTTPError as e:
                    if e.code != 404:
                        raise

    def remove(self, name: str) -> None:
        for pod in self.jobs.pop(name)["pods"]:
            run(self.podman + ["pod", "rm", "-f", "-t", "30", pod], timeout=60, check=False)
        run(self.podman + ["secret", "rm", name], check=False)
        self.removed.append(name)

    def logs(self) -> str:
        return "\n".join(f"--- {p}:\n" + run(self.podman + ["logs", f"{p}-worker"], check=False).stderr[-4000:]
                         for j in self.jobs.values() for p in j["pods"])


def load(podman: list[str], archive: str) -> str:
    out = run(podman + ["load", "-i", archive], timeout=900).stdout
    return out.strip().splitlines()[-1].split(": ", 1)[1].split(",")[0]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("source")
    parser.add_argument("--images", default="", help="the archives of deploy/images/build.sh (default: built here)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("SKIP: needs root (ip netns, podman)")
        return 0
    pid = os.getpid()
    tag = f"nskube-{pid}"
    work = tempfile.mkdtemp(prefix=tag + "-")
    net = f"198.19.{pid % 250 + 1}"
    ctl = {"name": "ctl", "ns": f"{tag}-ctl", "addr": f"{net}.1"}
    nodes = [{"name": f"n{i}", "ns": f"{tag}-n{i}", "addr": f"{net}.{10 + i}"} for i in (1, 2)]
    bridge = f"{tag}-br"
    claims = {"checkpoints": f"{tag}-checkpoints", "data": f"{tag}-data"}
    # crun cannot start containers on these machines (cgroup v1, rlimits): runc, and the
    # open-files limit as it is (kube play has no --ulimit).
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    conf = os.path.join(work, "containers.conf")
    with open(conf, "w") as f:
        f.write(f'[containers]\ndefault_ulimits = ["nofile={nofile[0]}:{nofile[1]}", "nproc=4096:4096"]\n'
                '[engine]\nruntime = "runc"\n')
    os.environ["CONTAINERS_CONF"] = conf
    podman = ["podman"]
    images: list[str] = []
    coordinator = f"{tag}-coordinator"
    kubelet = None
    api_process = None
    try:
        archives = args.images
        if not archives:
            archives = os.path.join(work, "images")
            started = time.monotonic()
            built = run([os.path.join(args.source, "deploy/images/build.sh"), "--build",
                         os.path.dirname(args.bin_dir.rstrip("/")), "--out", archives, "--tag", tag], timeout=1800)
            print(built.stdout.strip(), f"({time.monotonic() - started:.0f} s)")
        control = load(podman, os.path.join(archives, "nightshift-control.tar"))
        images.append(control)
        worker = load(podman, os.path.join(archives, "nightshift-worker.tar"))
        images.append(worker)
        print(f"loaded {control} and {worker}")

        for sub in ("db", "checkpoints", "data"):
            os.makedirs(os.path.join(work, sub))
        make_data(os.path.join(work, "data", "mails"))
        # The pods run as the images' nightshift user (--kubernetes-run-as-user): the
        # checkpoint share is made its own, as an operator makes an NFS export.
        os.chown(os.path.join(work, "checkpoints"), 10001, 10001)
        os.chmod(work, 0o755)
        for claim, sub in (("checkpoints", "checkpoints"), ("data", "data")):
            run(podman + ["volume", "create", "--opt", "type=none", "--opt", "o=bind", "--opt",
                          f"device={work}/{sub}", claims[claim]])
        slurm_cluster.make_network(bridge, [ctl] + nodes)
        enter_netns(ctl["ns"])  # from here on this process is on test host ctl

        api_process = subprocess.Popen([sys.executable, os.path.join(args.source, "tests/support/fake_kube_api.py")],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        api = f"http://127.0.0.1:{api_process.stdout.readline().strip()}"
        admin = "kube-play-admin-token"
        digest = run(["sha256sum"], input=admin).stdout.split()[0]
        with open(os.path.join(work, "tokens"), "w") as f:
            f.write(f"{digest} admin kube-play\n")
        with open(os.path.join(work, "admin-token"), "w") as f:
            f.write(admin + "\n")
        run(podman + ["run", "-d", "--name", coordinator, "--network", "host", "-v", f"{work}:/work", control,
                      "nightshift-coordinator", "--listen", f"{ctl['addr']}:0", "--data-dir", "/work/db",
                      "--port-file", "/work/db/port", "--token-file", "/work/tokens", "--lease-seconds", "5",
                      "--checkpoint-root", "/work/checkpoints", "--cluster", "kubernetes", "--kubernetes-api", api,
                      "--kubernetes-image", worker, "--kubernetes-checkpoint-claim", claims["checkpoints"],
                      "--kubernetes-data-claim", claims["data"], "--kubernetes-grace-seconds", "30",
                      "--ranks-per-node", "1", "--allocation-worker-arg=--work-dir=/tmp/nightshift",
                      "--allocation-worker-arg=--checkpoint-root=/checkpoints",
                      "--allocation-worker-arg=--data-root=/data"])
        port_file = os.path.join(work, "db", "port")
        deadline = time.monotonic() + 60
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if time.monotonic() > deadline:
                raise AssertionError("the coordinator wrote no port:\n" +
                                     run(podman + ["logs", coordinator], check=False).stderr)
            time.sleep(0.2)
        address = f"{ctl['addr']}:{open(port_file).read().strip()}"
        cli = podman + ["exec", coordinator, "nightshift", "--coordinator", address, "--token-file", "/work/admin-token"]

        def submit(name: str, steps: int, checkpoint_every: int) -> str:
            with open(os.path.join(work, f"{name}.yaml"), "w") as f:
                f.write(f"name: {name}\n"
                        "model: {arch: transformer_classifier, layers: 1, d_model: 32, heads: 2, ffn: 64, max_len: 32}\n"
                        "data: {format: text_dir, path: /data/mails, validation_fraction: 0.2, "
                        "tokenizer: {vocab_size: 64}}\n"
                        f"train: {{epochs: 100000, max_steps: {steps}, lr: 0.003, seed: 7, batching: {{batch_size: 8}}, "
                        "threads: 1}\n"
                        "resources: {world_size: 2, device: cpu, timeout_seconds: 300}\n"
                        f"checkpoint: {{every_steps: {checkpoint_every}, keep_last: 2}}\n")
            return run(cli + ["job", "submit", f"/work/{name}.yaml"]).stdout.strip().splitlines()[-1]

        def wait(job: str, done, seconds: float) -> str:
            deadline = time.monotonic() + seconds
            while True:
                kubelet.pass_()
                described = run(cli + ["job", "describe", job]).stdout
                if done(described) or time.monotonic() > deadline:
                    return described
                time.sleep(0.5)

        def failure(what: str, described: str) -> AssertionError:
            return AssertionError(f"{what}:\n{described}\n{kubelet.logs()}\n" +
                                  run(podman + ["logs", coordinator], check=False).stderr[-6000:])

        kubelet = Kubelet(api, [n["ns"] for n in nodes], podman, work)
        job = submit("on-pods", 30, 10)
        described = wait(job, lambda d: any(s in d for s in ("SUCCEEDED", "FAILED", "CANCELLED")), 600)
        pods_log = kubelet.logs()
        if "SUCCEEDED" not in described:
            raise failure(f"job {job} did not succeed", described)
        allocation = f"nightshift-{job.lower()}-a0"
        # Not root: the jobs confined in a user namespace of the worker's (podman's seccomp
        # profile allows one; docs/security.md for containerd's).
        assert pods_log.count("in a user and mount namespace of their own") == 2, pods_log
        for index, node in enumerate(nodes):
            assert f"worker {job}-a0-pod{index}: serves attempt 0 of job {job}" in pods_log, pods_log
            assert f"reached on {node['addr']}" in pods_log, pods_log
        # The model the pods wrote to the claim, served by the coordinator from its mount.
        run(cli + ["job", "artifacts", job, "--output", "/work/model"])
        artifacts = sorted(os.listdir(os.path.join(work, "model")))
        assert "model.safetensors" in artifacts and "config.json" in artifacts, artifacts
        # The coordinator deletes the Job of a finished attempt; its pods go with it.
        deadline = time.monotonic() + 60
        while allocation not in kubelet.removed and time.monotonic() < deadline:
            kubelet.pass_()
            time.sleep(1)
        assert allocation in kubelet.removed, f"the coordinator did not delete Job {allocation}"
        left = run(podman + ["pod", "ps", "--format", "{{.Name}}"]).stdout.split()
        assert not [p for p in left if p.startswith(allocation)], left
        print(f"job {job} SUCCEEDED on the pods of {allocation} (nodes {nodes[0]['addr']}, {nodes[1]['addr']}); "
              f"downloaded: {', '.join(artifacts)}")

        # Kueue preempts a running job by suspending its Job: the pods get SIGTERM, the
        # ranks checkpoint in the grace period (the only checkpoint: none periodic), and
        # the next attempt resumes from it, no restart counted.
        long_job = submit("preempted", 1000000, 1000000)
        first = f"nightshift-{long_job.lower()}-a0"
        described = wait(long_job, lambda d: re.search(r"step ([1-9]\d+)/", d) is not None, 300)
        if first not in kubelet.jobs or not re.search(r"step ([1-9]\d+)/", described):
            raise failure(f"job {long_job} did not start training", described)
        kubelet.suspend(first)
        described = wait(long_job, lambda d: "attempt 1 resumed from step" in d or "started from step" in d, 300)
        resumed = re.search(r"attempt 1 resumed from step (\d+)", described)
        if not resumed or int(resumed.group(1)) <= 0:
            raise failure(f"job {long_job}'s attempt 1 did not resume from the checkpoint written on SIGTERM",
                          described)
        assert "Restarts: 0/" in described, described
        assert f"the cluster took the allocation back (kubernetes job {first}" in described, described
        second = f"nightshift-{long_job.lower()}-a1"
        # The next attempt's Job only once the pods were gone (their checkpoint written).
        assert kubelet.seen_at[second] > kubelet.gone_at[first], (kubelet.seen_at, kubelet.gone_at)
        assert first in kubelet.removed, f"the coordinator did not delete the preempted Job {first}"
        run(cli + ["job", "cancel", long_job])
        described = wait(long_job, lambda d: second in kubelet.removed, 60)
        assert "CANCELLED" in described and second in kubelet.removed, described
        print(f"job {long_job}: suspended at {first}, attempt 1 resumed from step {resumed.group(1)} "
              "(the checkpoint written when stopped), no restart counted; cancelled, its Job deleted")
        return 0
    finally:
        def attempt(step, *args):  # every step of the clean-up, whatever the one before did
            try:
                step(*args)
            except Exception as e:  # noqa: BLE001
                print(f"clean-up: {e}", file=sys.stderr)

        if kubelet is not None:
            for s in kubelet.stopping.values():
                for stop in s["stops"] or []:
                    attempt(stop.wait, 60)
            for name in list(kubelet.jobs):
                attempt(kubelet.remove, name)
        attempt(run, podman + ["rm", "-f", "-t", "5", coordinator], 60, False)
        if api_process is not None:
            attempt(api_process.stdin.close)
            attempt(api_process.kill)
            attempt(api_process.wait, 10)
        for claim in claims.values():
            attempt(run, podman + ["volume", "rm", "-f", claim], 60, False)
        for image in images:
            attempt(run, podman + ["rmi", "-f", image], 120, False)
        for ns in [ctl["ns"]] + [n["ns"] for n in nodes] + [bridge]:
            attempt(run, ["ip", "netns", "del", ns], 30, False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
