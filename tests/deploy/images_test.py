#!/usr/bin/env python3
"""The control image, built for real and run (deploy/images/build.sh --only control).

Builds nightshift-control from Debian 12 and this build, loads the OCI archive into
podman (no registry), and runs the coordinator from the image on 127.0.0.1 with a port it
picks; the CLI of this build then submits a job to it, reads it back and cancels it, and
the CLI inside the image does the same. Every container and the image are removed at the
end. Needs root, debootstrap, buildah, podman and runc (install-deps); crun cannot start
containers where cgroups are v1 or rlimits cannot be raised, as in this project's
machines, so runc is named and the open-files limit is the current one.

The worker image (LibTorch and CUDA: GB) is not built here: docs/operating.md gives the
release command and its time.

Usage: images_test.py BIN_DIR SOURCE_DIR
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time


def run(argv: list[str], timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r


def main() -> int:
    bin_dir, source = sys.argv[1], sys.argv[2]
    if os.geteuid() != 0:
        print("SKIP: needs root (debootstrap, buildah, podman)")
        return 0
    work = tempfile.mkdtemp(prefix="nightshift-images-test-")
    tag = f"test{os.getpid()}"
    image = f"localhost/nightshift-control:{tag}"
    container = f"nightshift-control-test-{os.getpid()}"
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    # (nproc at the current value is refused too; root is not held to it anyway)
    podman_run = ["podman", "run", "--runtime", "runc", "--ulimit", f"nofile={nofile[0]}:{nofile[1]}",
                  "--ulimit", "nproc=4096:4096"]
    try:
        started = time.monotonic()
        build = run([os.path.join(source, "deploy/images/build.sh"), "--only", "control", "--build",
                     os.path.dirname(bin_dir.rstrip("/")), "--out", work, "--tag", tag], timeout=900)
        print(build.stdout.strip(), f"({time.monotonic() - started:.0f} s)")
        archive = os.path.join(work, "nightshift-control.tar")
        run(["podman", "load", "-i", archive])
        # The coordinator from the image, on the host's loopback with a port it picks.
        os.makedirs(os.path.join(work, "data"))
        run(podman_run + ["-d", "--name", container, "--network", "host", "-v", f"{work}/data:/data", image,
                          "nightshift-coordinator", "--listen", "127.0.0.1:0", "--data-dir", "/data/db",
                          "--port-file", "/data/port"])
        port_file = os.path.join(work, "data", "port")
        for _ in range(300):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the coordinator in the image wrote no port:\n" +
                                 run(["podman", "logs", container], check=False).stderr)
        address = "127.0.0.1:" + open(port_file).read().strip()
        spec = os.path.join(work, "data", "job.yaml")
        with open(spec, "w") as f:
            f.write("model: {arch: transformer_classifier}\ndata: {path: /nowhere}\n")
        cli = [os.path.join(bin_dir, "nightshift"), "--coordinator", address]
        job = run(cli + ["job", "submit", spec]).stdout.strip().splitlines()[-1]
        described = run(cli + ["job", "describe", job]).stdout
        assert "QUEUED" in described, described
        # The CLI in the image sees the same job.
        listed = run(podman_run + ["--rm", "--network", "host", image, "nightshift", "--coordinator", address,
                                   "job", "list"]).stdout
        assert job in listed, listed
        run(cli + ["job", "cancel", job])
        assert "CANCELLED" in run(cli + ["job", "describe", job]).stdout
        print(f"the coordinator and the CLI of {image} ran job {job} on {address}")
        return 0
    finally:
        run(["podman", "rm", "-f", container], check=False)
        run(["podman", "rmi", "-f", image], check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
