#!/usr/bin/env python3
"""A throwaway, real Slurm cluster on one machine, for tests.

Every "host" is a Linux network namespace: one for the controller (slurmctld
and munged) and one per compute node (slurmd), plus one namespace that holds
only a bridge joining them. All addresses come from 198.18.0.0/15 and live
only inside those namespaces; the host's own network is never touched.
Each daemon also runs in its own UTS namespace so that `hostname` inside a
job prints the Slurm node name (n1, n2, ...).

Needs root (ip netns), Debian 12 packages slurm-wlm (22.05) and munge.
Python 3.11, stdlib only.

Python use:

    with SlurmCluster(nodes=2) as c:
        out = c.run(["sbatch", "--parsable", "--wrap", "srun hostname"])
        ...

CLI use (e.g. from C++ tests through a subprocess):

    python3 slurm_cluster.py up --dir DIR [--nodes 2] [--cpus-per-node 2]
        -> prints one JSON object: env to use, bin dir with client wrappers
    python3 slurm_cluster.py down --dir DIR
    python3 slurm_cluster.py fail-node --dir DIR --node n2
        -> every process of that node's host is killed at once (slurmd, its
           steps and what they started), as when a machine loses power;
           slurmctld marks it DOWN after --slurmd-timeout
    python3 slurm_cluster.py cut-node --dir DIR --node n2
        -> that node's cable is pulled at the bridge: its processes live on,
           nothing reaches it or leaves it (slurmctld: NODE_FAIL, DOWN)
    python3 slurm_cluster.py selftest

Client commands must run in a namespace that reaches the controller; the
`up` output's "bin_dir" holds wrappers (sbatch, squeue, scancel, scontrol,
sinfo, sacct, srun, ...) that do exactly that, so putting it first on PATH
(the "env" entry does) is enough.

Lifetime: a detached watchdog tears the cluster down after --lifetime seconds
(default 1800), or as soon as the owning process exits when used as a context
manager, so a crashed test cannot leave daemons or namespaces behind.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

SBIN = "/usr/sbin"
CLIENTS = [
    "sbatch", "squeue", "scancel", "scontrol", "sinfo", "sacct", "srun",
    "salloc", "sprio", "sstat", "sdiag", "sshare", "strigger", "sattach",
    "sacctmgr",
]
STATE_FILE = "cluster.json"
DEFAULT_PARTITIONS = (
    # name, priority tier, preempt mode, default
    ("low", 1, "REQUEUE", True),
    ("high", 10, "OFF", False),
)


def _run(cmd, check=True, timeout=30, **kw):
    return subprocess.run(cmd, check=check, timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, **kw)


def _nsenter(ns: str) -> list[str]:
    return ["nsenter", f"--net=/run/netns/{ns}"]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ns_pids(ns: str) -> list[int]:
    r = _run(["ip", "netns", "pids", ns], check=False)
    if r.returncode != 0:
        return []
    return [int(x) for x in r.stdout.split() if x.strip().isdigit()]


def _kill_ns_processes(namespaces: list[str], grace: float = 5.0,
                       signals=(signal.SIGTERM, signal.SIGKILL)) -> None:
    me = os.getpid()
    for sig in signals:
        pids = [p for ns in namespaces for p in _ns_pids(ns) if p != me]
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + (grace if sig == signal.SIGTERM else 5.0)
        while time.monotonic() < deadline:
            if not any(_ns_pids(ns) for ns in namespaces):
                return
            time.sleep(0.1)


def make_network(bridge_ns: str, hosts: list[dict]) -> None:
    """Test hosts: a namespace `bridge_ns` holding a bridge, and one namespace per host
    (h["ns"]) joined to it by a veth whose end there is eth0 with h["addr"]/24."""
    def ip(*a):
        _run(["ip", *a])

    ip("netns", "add", bridge_ns)
    ip("-n", bridge_ns, "link", "add", "br0", "type", "bridge")
    ip("-n", bridge_ns, "link", "set", "br0", "up")
    for h in hosts:
        ip("netns", "add", h["ns"])
        v = "v-" + h["name"]
        ip("-n", bridge_ns, "link", "add", v, "type", "veth",
           "peer", "name", "eth0", "netns", h["ns"])
        ip("-n", bridge_ns, "link", "set", v, "master", "br0")
        ip("-n", bridge_ns, "link", "set", v, "up")
        ip("-n", h["ns"], "link", "set", "lo", "up")
        ip("-n", h["ns"], "addr", "add", h["addr"] + "/24", "dev", "eth0")
        ip("-n", h["ns"], "link", "set", "eth0", "up")


def teardown(state: dict) -> list[str]:
    """Removes everything `state` describes. Returns problems (empty: clean)."""
    problems = []
    namespaces = [state["ctl"]["ns"]] + [n["ns"] for n in state["nodes"]]
    wd = state.get("watchdog_pid")
    if wd and wd != os.getpid() and _pid_alive(wd):
        try:
            os.kill(wd, signal.SIGKILL)
        except ProcessLookupError:
            pass
    existing = set(_run(["ip", "netns", "list"], check=False).stdout.split())
    _kill_ns_processes([ns for ns in namespaces if ns in existing])
    for ns in namespaces + [state["bridge_ns"]]:
        if ns in existing:
            r = _run(["ip", "netns", "del", ns], check=False)
            if r.returncode != 0:
                problems.append(f"ip netns del {ns}: {r.stderr.strip()}")
    d = state["dir"]
    if os.path.isdir(d):
        if state.get("owns_dir"):
            shutil.rmtree(d, ignore_errors=True)
        else:
            for name in os.listdir(d):
                p = os.path.join(d, name)
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    os.unlink(p)
        if os.path.exists(d) and state.get("owns_dir"):
            problems.append(f"could not remove {d}")
    return problems


@dataclass
class SlurmCluster:
    nodes: int = 2
    cpus_per_node: int = 2
    real_memory_mb: int = 1000
    partitions: tuple = DEFAULT_PARTITIONS
    dir: str | None = None
    subnet: int | None = None       # x in 198.18.x.0/24; from the pid if None
    min_job_age: int = 30           # seconds a finished job stays in squeue
    slurmd_timeout: int = 30        # a silent node is DOWN after this
    lifetime: int = 1800            # watchdog tears down after this
    start_timeout: float = 60.0
    jobcomp_file: bool = True       # JobCompType=jobcomp/filetxt into dir
    # Accounting: MariaDB and slurmdbd on the controller's host, so sacct answers
    # (Debian's mariadb-server and slurmdbd; the database only reachable from that host).
    accounting: bool = False
    extra_conf: str = ""
    state: dict = field(default_factory=dict)

    # ---- public API -------------------------------------------------------
    def __enter__(self) -> "SlurmCluster":
        self.up(watch_pid=os.getpid())
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    @property
    def env(self) -> dict:
        return dict(self.state["env"])

    def client_cmd(self, argv: list[str]) -> list[str]:
        """argv (e.g. ["squeue", "--json"]) run inside the controller ns."""
        return _nsenter(self.state["ctl"]["ns"]) + [
            "env", f"SLURM_CONF={self.state['slurm_conf']}"] + list(argv)

    def run(self, argv: list[str], check=True, timeout=30, **kw):
        return _run(self.client_cmd(argv), check=check, timeout=timeout, **kw)

    def up(self, watch_pid: int | None = None) -> dict:
        if os.geteuid() != 0:
            raise RuntimeError("SlurmCluster needs root (ip netns)")
        for exe in ("slurmctld", "slurmd", "munged"):
            if not os.path.exists(os.path.join(SBIN, exe)):
                raise RuntimeError(f"{exe} missing: apt-get install slurm-wlm munge")
        if not 1 <= self.nodes <= 200:
            raise ValueError("nodes must be in 1..200")
        pid = os.getpid()
        tag = f"nsslurm-{pid}-{secrets.token_hex(2)}"
        owns_dir = True
        if self.dir is None:
            d = tempfile.mkdtemp(prefix=tag + "-", dir="/tmp")
        else:
            d = os.path.abspath(self.dir)
            if os.path.exists(d):
                if os.listdir(d):
                    raise RuntimeError(f"{d} exists and is not empty")
                owns_dir = False
            else:
                os.makedirs(d, mode=0o700)
        # Others may pass through (not list): the users an allocation is submitted as
        # (--slurm-submit-as-owner) read slurm.conf and reach munged's socket.
        os.chmod(d, 0o711)
        x = self.subnet if self.subnet is not None else (pid % 250) + 1
        net = f"198.18.{x}"
        st = {
            "dir": d, "owns_dir": owns_dir, "tag": tag,
            "bridge_ns": f"{tag}-br",
            "ctl": {"name": "ctl", "ns": f"{tag}-ctl", "addr": f"{net}.1"},
            "nodes": [{"name": f"n{i}", "ns": f"{tag}-n{i}",
                       "addr": f"{net}.{10 + i}"} for i in range(1, self.nodes + 1)],
            "slurm_conf": os.path.join(d, "slurm.conf"),
            "munge_socket": os.path.join(d, "munge", "munge.socket"),
            "bin_dir": os.path.join(d, "bin"),
            "partitions": [p[0] for p in self.partitions],
            "cluster_name": "nsslurm",
            "pids": {},
            "watchdog_pid": None,
        }
        st["env"] = {
            "SLURM_CONF": st["slurm_conf"],
            "PATH": st["bin_dir"] + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
        }
        st["exec_prefix"] = _nsenter(st["ctl"]["ns"])
        self.state = st
        self._save()
        try:
            self._start_watchdog(watch_pid)
            self._write_files()
            self._make_network()
            self._start_daemons()
            self._wait_idle()
        except BaseException:
            self.down()
            raise
        self._save()
        return st

    def down(self) -> list[str]:
        if not self.state:
            return []
        problems = teardown(self.state)
        self.state = {}
        return problems

    # ---- internals --------------------------------------------------------
    def _save(self) -> None:
        path = os.path.join(self.state["dir"], STATE_FILE)
        with open(path + ".tmp", "w") as f:
            json.dump(self.state, f, indent=1)
        os.replace(path + ".tmp", path)

    def _start_watchdog(self, watch_pid: int | None) -> None:
        log = open(os.path.join(self.state["dir"], "watchdog.log"), "ab")
        argv = [sys.executable, os.path.abspath(__file__), "_watchdog",
                "--dir", self.state["dir"], "--lifetime", str(self.lifetime)]
        if watch_pid:
            argv += ["--parent", str(watch_pid)]
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=log, start_new_session=True, close_fds=True)
        log.close()
        self.state["watchdog_pid"] = p.pid
        self._save()

    def _write_files(self) -> None:
        st, d = self.state, self.state["dir"]
        for sub in ["munge", "ctld", "ctld/state", "bin", "jobs"] + \
                [n["name"] for n in st["nodes"]] + \
                [n["name"] + "/spool" for n in st["nodes"]]:
            os.makedirs(os.path.join(d, sub), mode=0o700, exist_ok=True)
        os.chmod(os.path.join(d, "munge"), 0o711)  # munged wants o+x
        os.chmod(os.path.join(d, "jobs"), 0o777)  # job stdout/stderr go here
        for n in st["nodes"]:  # the batch script runs from the spool as the job's user
            for sub in (n["name"], n["name"] + "/spool"):
                os.chmod(os.path.join(d, sub), 0o711)
        key = os.path.join(d, "munge", "munge.key")
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        os.write(fd, os.urandom(1024))
        os.close(fd)
        ctl = st["ctl"]
        lines = [
            f"ClusterName={st['cluster_name']}",
            f"SlurmctldHost={ctl['name']}({ctl['addr']})",
            "SlurmctldPort=6817",
            "SlurmdPort=6818",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={st['munge_socket']}",
            f"StateSaveLocation={d}/ctld/state",
            f"SlurmctldPidFile={d}/ctld/slurmctld.pid",
            f"SlurmctldLogFile={d}/ctld/slurmctld.log",
            f"SlurmdSpoolDir={d}/%n/spool",
            f"SlurmdPidFile={d}/%n/slurmd.pid",
            f"SlurmdLogFile={d}/%n/slurmd.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            # No cgroups: plain process tracking, no task containment.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/backfill",
            # Preemption by partition PriorityTier.
            "PreemptType=preempt/partition_prio",
            "PreemptMode=REQUEUE",
            (f"AccountingStorageType=accounting_storage/slurmdbd\n"
             f"AccountingStorageHost={ctl['addr']}\nAccountingStoragePort=6819\n"
             # the munge socket the clients (sacct, slurmctld) use for slurmdbd
             f"AccountingStoragePass={st['munge_socket']}"
             if self.accounting else "AccountingStorageType=accounting_storage/none"),
            (f"JobCompType=jobcomp/filetxt\nJobCompLoc={d}/ctld/jobcomp.txt"
             if self.jobcomp_file else "JobCompType=jobcomp/none"),
            # Configured CPUs/memory win over the real hardware.
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            f"MinJobAge={self.min_job_age}",
            "KillWait=5",
            "InactiveLimit=0",
            f"SlurmdTimeout={self.slurmd_timeout}",
            "SlurmctldTimeout=30",
            "MessageTimeout=10",
            "TmpFS=/tmp",
            "MailProg=/bin/true",
        ]
        if self.extra_conf:
            lines.append(self.extra_conf)
        for n in st["nodes"]:
            lines.append(f"NodeName={n['name']} NodeAddr={n['addr']} "
                         f"NodeHostname={n['name']} CPUs={self.cpus_per_node} "
                         f"RealMemory={self.real_memory_mb} State=UNKNOWN")
        for name, tier, mode, default in self.partitions:
            lines.append(f"PartitionName={name} Nodes=ALL Default="
                         f"{'YES' if default else 'NO'} PriorityTier={tier} "
                         f"PreemptMode={mode} MaxTime=INFINITE State=UP")
        with open(st["slurm_conf"], "w") as f:
            f.write("\n".join(lines) + "\n")
        if self.accounting:  # beside slurm.conf, where slurmdbd looks for it; its password file
            os.makedirs(os.path.join(d, "dbd"), mode=0o700, exist_ok=True)
            dbd = os.path.join(d, "slurmdbd.conf")
            fd = os.open(dbd, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, "\n".join([
                "AuthType=auth/munge",
                f"AuthInfo=socket={st['munge_socket']}",
                f"DbdHost={ctl['name']}",
                f"DbdAddr={ctl['addr']}",
                "DbdPort=6819",
                "SlurmUser=root",
                f"LogFile={d}/dbd/slurmdbd.log",
                f"PidFile={d}/dbd/slurmdbd.pid",
                "StorageType=accounting_storage/mysql",
                "StorageHost=127.0.0.1",  # the controller host's own loopback
                "StoragePort=3306",
                "StorageUser=root",
                "StorageLoc=slurm_acct_db",
            ]).encode() + b"\n")
            os.close(fd)
        for c in CLIENTS:
            p = os.path.join(st["bin_dir"], c)
            with open(p, "w") as f:
                f.write("#!/bin/sh\n"
                        f"SLURM_CONF='{st['slurm_conf']}' exec nsenter "
                        f"--net=/run/netns/'{ctl['ns']}' /usr/bin/{c} "
                        '"$@"\n')
            os.chmod(p, 0o755)

    def _make_network(self) -> None:
        make_network(self.state["bridge_ns"], [self.state["ctl"]] + self.state["nodes"])

    def _spawn(self, ns: str, hostname: str | None, argv: list[str], log: str) -> int:
        # nsenter, not `ip netns exec`: the latter remounts /sys, which hides
        # /sys/fs/cgroup, and slurmd 22.05 refuses to start without it even
        # with proctrack/linuxproc + task/none ("Unable to initialize cgroup
        # plugin").
        cmd = _nsenter(ns)
        if hostname:
            cmd += ["unshare", "--uts", "sh", "-c",
                    f'hostname "$0" && exec "$@"', hostname]
        cmd += argv
        env = dict(os.environ, SLURM_CONF=self.state["slurm_conf"])
        with open(log, "ab") as lf:
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=lf,
                                 stderr=lf, env=env, start_new_session=True,
                                 close_fds=True)
        self._children = getattr(self, "_children", []) + [p]
        return p.pid

    def _start_daemons(self) -> None:
        st, d = self.state, self.state["dir"]
        ctl = st["ctl"]
        m = os.path.join(d, "munge")
        st["pids"]["munged"] = self._spawn(ctl["ns"], None, [
            f"{SBIN}/munged", "-F", "--force", f"--socket={st['munge_socket']}",
            f"--key-file={m}/munge.key", f"--pid-file={m}/munged.pid",
            f"--log-file={m}/munged.log", f"--seed-file={m}/munged.seed",
            "--num-threads=2"], os.path.join(m, "munged.out"))
        self._wait_for(lambda: os.path.exists(st["munge_socket"]), 10,
                       "munged socket", os.path.join(m, "munged.log"))
        if self.accounting:
            self._start_accounting()
        st["pids"]["slurmctld"] = self._spawn(
            ctl["ns"], ctl["name"],
            [f"{SBIN}/slurmctld", "-D", "-c", "-i", "-f", st["slurm_conf"]],
            os.path.join(d, "ctld", "slurmctld.out"))
        for n in st["nodes"]:
            st["pids"]["slurmd-" + n["name"]] = self._spawn(
                n["ns"], n["name"],
                [f"{SBIN}/slurmd", "-D", "-N", n["name"], "-f", st["slurm_conf"]],
                os.path.join(d, n["name"], "slurmd.out"))
        self._save()

    def _start_accounting(self) -> None:
        """MariaDB (its own data directory, 127.0.0.1 of the controller's host, no
        grant tables: nothing else can reach it), then slurmdbd on it, then the
        cluster registered, before slurmctld starts."""
        st, d = self.state, self.state["dir"]
        ctl = st["ctl"]
        db = os.path.join(d, "db")
        os.makedirs(db, mode=0o700, exist_ok=True)
        _run(["mariadb-install-db", "--no-defaults", f"--datadir={db}", "--user=root",
              "--skip-test-db", "--auth-root-authentication-method=normal"], timeout=120)
        st["pids"]["mariadbd"] = self._spawn(ctl["ns"], None, [
            f"{SBIN}/mariadbd", "--no-defaults", f"--datadir={db}", f"--socket={db}/mysqld.sock",
            f"--pid-file={db}/mysqld.pid", "--bind-address=127.0.0.1", "--port=3306",
            "--user=root", "--skip-grant-tables", "--innodb-buffer-pool-size=32M",
            "--innodb-lock-wait-timeout=900",
            f"--log-error={db}/mariadbd.log"], os.path.join(db, "mariadbd.out"))
        self._wait_for(lambda: os.path.exists(os.path.join(db, "mysqld.sock")), 60,
                       "mariadbd socket", os.path.join(db, "mariadbd.log"))
        st["pids"]["slurmdbd"] = self._spawn(
            ctl["ns"], ctl["name"], [f"{SBIN}/slurmdbd", "-D"],
            os.path.join(d, "dbd", "slurmdbd.out"))

        def registered():
            r = self.run(["sacctmgr", "-i", "add", "cluster", st["cluster_name"]],
                         check=False, timeout=15)
            return r.returncode == 0 or "already exists" in r.stdout + r.stderr
        self._wait_for(registered, 60, "slurmdbd to register the cluster",
                       os.path.join(d, "dbd", "slurmdbd.log"))
        self._save()

    def _wait_for(self, pred, timeout, what, log=None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            for p in getattr(self, "_children", []):
                if p.poll() is not None:
                    raise RuntimeError(f"daemon {p.args} exited {p.returncode} "
                                       f"while waiting for {what}\n{self._logs()}")
            time.sleep(0.2)
        raise RuntimeError(f"timed out waiting for {what}\n{self._logs()}")

    def _logs(self, tail=20) -> str:
        out = []
        for root, _, files in os.walk(self.state["dir"]):
            for f in files:
                if f.endswith((".log", ".out")) and not root.endswith("jobs"):
                    p = os.path.join(root, f)
                    with open(p, errors="replace") as fh:
                        lines = fh.readlines()[-tail:]
                    out.append(f"--- {p}\n" + "".join(lines))
        return "\n".join(out)

    def node_states(self) -> dict:
        r = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], check=False, timeout=15)
        if r.returncode != 0:
            return {}
        states = {}
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1]
        return states

    def _wait_idle(self) -> None:
        names = {n["name"] for n in self.state["nodes"]}

        def all_idle():
            s = self.node_states()
            return names <= s.keys() and all(s[n] == "idle" for n in names)

        self._wait_for(all_idle, self.start_timeout, "all nodes idle")


# ---- CLI --------------------------------------------------------------------
def _load_state(d: str) -> dict | None:
    try:
        with open(os.path.join(os.path.abspath(d), STATE_FILE)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def _watchdog(args) -> int:
    deadline = time.monotonic() + args.lifetime
    path = os.path.join(args.dir, STATE_FILE)
    while time.monotonic() < deadline:
        if not os.path.exists(path):
            return 0
        if args.parent and not _pid_alive(args.parent):
            break
        time.sleep(1.0)
    st = _load_state(args.dir)
    if st:
        print(f"watchdog: tearing down {args.dir}", flush=True)
        teardown(st)
    return 0


def _selftest(args) -> int:
    t0 = time.monotonic()
    with SlurmCluster(nodes=args.nodes) as c:
        t_up = time.monotonic() - t0
        out = os.path.join(c.state["dir"], "jobs", "selftest-%j.out")
        r = c.run(["sbatch", "--parsable", f"--nodes={args.nodes}",
                   "--ntasks-per-node=1", "--job-name=selftest", "--time=2",
                   f"--output={out}", "--wrap",
                   "srun --kill-on-bad-exit=1 hostname"])
        job_id = r.stdout.strip().split(";")[0]
        state = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            q = c.run(["scontrol", "show", "job", "-o", job_id], check=False)
            for tok in q.stdout.split():
                if tok.startswith("JobState="):
                    state = tok.split("=", 1)[1]
            if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
                         "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL"):
                break
            time.sleep(0.5)
        path = out.replace("%j", job_id)
        text = open(path).read() if os.path.exists(path) else ""
        hosts = sorted(text.split())
        want = sorted(n["name"] for n in c.state["nodes"])
        ok = state == "COMPLETED" and hosts == want
        print(json.dumps({"job_id": job_id, "state": state, "hosts": hosts,
                          "up_s": round(t_up, 1)}), flush=True)
        if not ok:
            print(c._logs(), file=sys.stderr)
        d, tag = c.state["dir"], c.state["tag"]
    left = [ns for ns in _run(["ip", "netns", "list"]).stdout.split()
            if ns.startswith(tag)]
    total = time.monotonic() - t0
    gone = not os.path.exists(d) and not left
    print(json.dumps({"ok": ok and gone, "total_s": round(total, 1),
                      "cleaned_up": gone}), flush=True)
    return 0 if ok and gone else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up")
    u.add_argument("--dir", required=True)
    u.add_argument("--nodes", type=int, default=2)
    u.add_argument("--cpus-per-node", type=int, default=2)
    u.add_argument("--min-job-age", type=int, default=30)
    u.add_argument("--lifetime", type=int, default=1800)
    u.add_argument("--slurmd-timeout", type=int, default=30)
    u.add_argument("--accounting", action="store_true",
                   help="MariaDB and slurmdbd on the controller's host, for sacct")
    u.add_argument("--watch-pid", type=int, default=0,
                   help="tear down as soon as this process (the test) is gone")
    for verb in ("fail-node", "cut-node"):
        fn = sub.add_parser(verb)
        fn.add_argument("--dir", required=True)
        fn.add_argument("--node", required=True)
    dn = sub.add_parser("down")
    dn.add_argument("--dir", required=True)
    s = sub.add_parser("selftest")
    s.add_argument("--nodes", type=int, default=2)
    w = sub.add_parser("_watchdog")
    w.add_argument("--dir", required=True)
    w.add_argument("--lifetime", type=int, required=True)
    w.add_argument("--parent", type=int, default=0)
    args = ap.parse_args(argv)

    if args.cmd == "up":
        c = SlurmCluster(nodes=args.nodes, cpus_per_node=args.cpus_per_node,
                         dir=args.dir, min_job_age=args.min_job_age,
                         lifetime=args.lifetime, slurmd_timeout=args.slurmd_timeout,
                         accounting=args.accounting)
        try:
            st = c.up(watch_pid=args.watch_pid or None)
        except Exception as e:  # noqa: BLE001
            print(json.dumps({"error": str(e)}), flush=True)
            return 1
        print(json.dumps(st, indent=1), flush=True)
        return 0
    if args.cmd == "down":
        st = _load_state(args.dir)
        if st is None:
            print(json.dumps({"ok": True, "note": "no cluster state"}))
            return 0
        problems = teardown(st)
        print(json.dumps({"ok": not problems, "problems": problems}))
        return 0 if not problems else 1
    if args.cmd in ("fail-node", "cut-node"):
        st = _load_state(args.dir)
        node = next((n for n in (st or {}).get("nodes", []) if n["name"] == args.node), None)
        if node is None:
            print(json.dumps({"error": f"no node {args.node}"}))
            return 1
        if args.cmd == "cut-node":
            _run(["ip", "-n", st["bridge_ns"], "link", "set", "v-" + node["name"], "down"])
            print(json.dumps({"ok": True}))
            return 0
        _kill_ns_processes([node["ns"]], signals=(signal.SIGKILL,))
        print(json.dumps({"ok": True, "left": _ns_pids(node["ns"])}))
        return 0
    if args.cmd == "selftest":
        return _selftest(args)
    if args.cmd == "_watchdog":
        return _watchdog(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
