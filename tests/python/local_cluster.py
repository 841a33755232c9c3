"""A real Nightshift cluster on 127.0.0.1 for the Python client's tests: one coordinator
and one worker, started from the build's binaries, with tokens and TLS (a test CA from
scripts/make-test-ca.sh), and the nightshift package built from the tree.

    with LocalCluster(bin_dir, source_dir, data_root) as c:
        client = c.client("alice")          # a nightshift.Client with alice's token

Every process it starts is stopped on exit (SIGTERM, then SIGKILL after 10 s).
"""
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# Tokens and who presents them: `<sha256> <role> <user>` lines of the coordinator's --token-file.
TOKENS = {"admin": ("admin-secret", "admin root"), "alice": ("alice-secret", "user alice"),
          "bob": ("bob-secret", "user bob"), "worker": ("worker-secret", "worker local-1")}


def build_package(source_dir, into):
    """pip-installs python/ (stubs generated from proto/ by its build step) into `into`, from a
    copy of both folders, so that tests running at once never share a build folder."""
    tree = os.path.join(into, "tree")
    for folder in ("python", "proto"):
        shutil.copytree(os.path.join(source_dir, folder), os.path.join(tree, folder),
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    site = os.path.join(into, "site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "--target", site, os.path.join(tree, "python")],
                   check=True, env=dict(os.environ, PIP_NO_INDEX="1"), timeout=300)
    return site


class LocalCluster:
    """A coordinator and one worker (one CPU slot) with tokens and TLS, in a temporary folder."""

    def __init__(self, bin_dir, source_dir, data_root, worker_cwd=None):
        self.bin_dir, self.source_dir, self.data_root = bin_dir, source_dir, os.path.abspath(data_root)
        self.worker_cwd = worker_cwd
        self.tmp = tempfile.TemporaryDirectory(prefix="nightshift-pyclient-")
        self.dir = self.tmp.name
        self.processes = []
        self.address = ""

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def path(self, *parts):
        """A path inside the cluster's folder."""
        return os.path.join(self.dir, *parts)

    def start(self):
        """Makes the certificates and the token file, starts the coordinator and the worker."""
        self.certs = self.path("certs")
        subprocess.run([os.path.join(self.source_dir, "scripts", "make-test-ca.sh"), self.certs], check=True,
                       timeout=120)
        with open(self.path("tokens"), "w") as f:
            for secret, who in TOKENS.values():
                f.write(f"{hashlib.sha256(secret.encode()).hexdigest()} {who}\n")
        port_file = self.path("coordinator.port")
        self._spawn("coordinator", [
            "nightshift-coordinator", "--listen", "127.0.0.1:0", "--port-file", port_file,
            "--data-dir", self.path("coordinator-db"), "--token-file", self.path("tokens"),
            "--tls-cert", self.cert("server.crt"), "--tls-key", self.cert("server.key"),
            "--worker-tls-ca", self.cert("ca.crt"), "--lease-seconds", "5", "--restart-backoff-seconds", "0.2"])
        self._await_file(port_file, "coordinator")
        with open(port_file) as f:
            self.address = "127.0.0.1:" + f.read().strip()
        with open(self.path("worker.token"), "w") as f:  # a daemon takes no token on its command line
            f.write(TOKENS["worker"][0] + "\n")
        self._spawn("worker", [
            "nightshift-worker", "--coordinator", self.address, "--name", "local-1", "--cpu-slots", "1",
            "--work-dir", self.path("worker"), "--data-root", self.data_root, "--token-file", self.path("worker.token"),
            "--tls-ca", self.cert("ca.crt"), "--file-service-tls-cert", self.cert("server.crt"),
            "--file-service-tls-key", self.cert("server.key"), "--metrics-listen", "127.0.0.1:0",
            "--metrics-port-file", self.path("worker.metrics-port")], cwd=self.worker_cwd)
        self._await_file(self.path("worker.metrics-port"), "worker")

    def cert(self, name):
        """A file of the test CA's folder (ca.crt, server.crt, ...)."""
        return os.path.join(self.certs, name)

    def env(self, who):
        """Environment variables that point the CLI and nightshift.Client at this cluster as `who`."""
        return {"NIGHTSHIFT_COORDINATOR": self.address, "NIGHTSHIFT_TOKEN": TOKENS[who][0],
                "NIGHTSHIFT_CONFIG": self.config_file()}

    def config_file(self):
        """A settings file (as ~/.config/nightshift/config.yaml) with the CA; relative to its folder."""
        path = self.path("config.yaml")
        if not os.path.exists(path):
            with open(path, "w") as f:
                f.write("tls_ca: certs/ca.crt\n")
        return path

    def client(self, who, **kwargs):
        """A nightshift.Client for `who` (a key of TOKENS), over TLS."""
        import nightshift

        return nightshift.Client(self.address, TOKENS[who][0], self.cert("ca.crt"), **kwargs)

    def log(self, name):
        """The last lines of a daemon's log, for failure messages."""
        with open(self.path(f"{name}.log"), errors="replace") as f:
            return "".join(f.readlines()[-30:])

    def _spawn(self, name, argv, cwd=None):
        argv = [os.path.join(self.bin_dir, argv[0])] + argv[1:]
        log = open(self.path(f"{name}.log"), "w")
        self.processes.append((name, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
                                                      start_new_session=True)))
        log.close()

    def _await_file(self, path, name, seconds=30):
        process = dict(self.processes)[name]
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if os.path.exists(path) and os.path.getsize(path) > 0:
                return
            if process.poll() is not None:
                raise RuntimeError(f"the {name} exited {process.returncode}:\n{self.log(name)}")
            time.sleep(0.05)
        raise RuntimeError(f"the {name} wrote no {path} in {seconds} s:\n{self.log(name)}")

    def stop(self):
        """Stops the worker (its trainers with it) and the coordinator, each within 10 s; removes the folder."""
        for name, p in reversed(self.processes):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(timeout=10)
            try:  # anything the daemon started and left in its session (trainers)
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.processes = []
        self.tmp.cleanup()


def make_text_data(root, per_class=40):
    """A small text_dir data set: ham/ and spam/ with distinct words (as tests/e2e/cluster.h's MakeData)."""
    words = [["meeting", "project", "lunch", "report", "agenda", "thanks", "team", "review"],
             ["winner", "prize", "free", "money", "click", "offer", "cash", "bonus"]]
    shared = ["the", "and", "you", "today"]
    for c, label in enumerate(("ham", "spam")):
        os.makedirs(os.path.join(root, label), exist_ok=True)
        for i in range(per_class):
            with open(os.path.join(root, label, f"{i}.txt"), "w") as f:
                f.write(" ".join(words[c][(i * 3 + k) % 8] if (k + i) % 3 == 0 else shared[(i + k) % 4]
                                 for k in range(6 + (i * 7) % 30)))
    return root
