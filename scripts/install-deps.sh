#!/usr/bin/env bash
# Installs everything the build, the tests, the benchmarks and the quickstart need:
# Debian 12 packages (apt; skipped when all are present) and the Python virtual
# environment that provides LibTorch (the PyTorch wheel, pinned in
# scripts/requirements.txt) and the Python side of the benchmarks:
#   NIGHTSHIFT_VENV (default /opt/nightshift/venv), made with Python 3.11 and reused
#   while it holds exactly the pinned requirements. CMake finds LibTorch through it.
# Idempotent; run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${NIGHTSHIFT_VENV:-/opt/nightshift/venv}
REQUIREMENTS=scripts/requirements.txt

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config git ccache
  # training: LibTorch comes from the PyTorch wheel (below); the wheel ships no gloo
  # headers, which its c10d headers include (Debian's, headers only)
  libgloo-dev python3-venv
  # services
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librocksdb-dev prometheus-cpp-dev libxxhash-dev
  # the Kubernetes API client of --cluster kubernetes
  libcurl4-openssl-dev
  # security: SHA-256 of tokens (libcrypto), test certificates (openssl CLI)
  libssl-dev openssl
  # data, config, CLI
  libsentencepiece-dev sentencepiece nlohmann-json3-dev libcli11-dev libyaml-cpp-dev
  # tokenizers from tokenizer.json: Unicode normalisation, categories and regular expressions
  libicu-dev
  # tests
  libgtest-dev libgmock-dev prometheus curl python3-grpcio python3-protobuf python3-yaml
  # Slurm as the cluster under the coordinator: real daemons on test hosts
  # (tests/support/slurm_cluster.py), started by the tests, never as services
  slurm-wlm slurmctld slurmd slurm-client munge
  # Slurm's accounting, for sacct (tests/e2e/slurm_test.cc): slurmdbd on MariaDB, both
  # started by the tests on a test host, never as services (see policy-rc.d below)
  slurmdbd mariadb-server
  # --slurm-submit-as-owner runs sbatch through sudo (tests/e2e/slurm_test.cc)
  sudo
  # images without a registry (deploy/images/build.sh, tests/deploy/images_test.py); runc
  # because crun cannot start containers on cgroup v1 hosts like these machines; catatonit
  # for the pods of `podman kube play` (tests/deploy/kube_play_test.py: their infra image)
  debootstrap buildah podman skopeo runc uidmap catatonit
  # fuzzing (libFuzzer comes with clang's runtime library)
  clang libclang-rt-14-dev
  # scripts/function-lengths.sh (the review rule: no function over about 80 lines)
  universal-ctags
  ca-certificates
)
# data fetch uses `npm pack`; a machine that already has a Node.js of its own (which
# conflicts with Debian's npm) keeps it.
if ! command -v npm >/dev/null 2>&1; then PACKAGES+=(nodejs npm); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
elif [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages (${missing[*]}); run this script as root" >&2
  exit 1
else
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Packages with daemons (mariadb-server, slurmctld, munge) start them as services where
  # nothing forbids it: the tests start their own, on test hosts, and nothing else may run.
  policy_made=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && policy_made=1
  fi
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
  if [ -n "$policy_made" ]; then rm -f /usr/sbin/policy-rc.d; fi
fi

# The user a worker run as root runs jobs as (nightshift-worker --run-as; docs/security.md):
# no home, no shell, no password.
if [ "$(id -u)" -eq 0 ] && ! getent passwd nightshift-job >/dev/null; then
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin nightshift-job
  echo "install-deps: made the system user nightshift-job (jobs of a worker run as root run as it)"
fi

# The virtual environment: reused when it was made from this very requirements file.
stamp="$VENV/.nightshift-requirements"
if [ -x "$VENV/bin/python" ] && cmp -s "$REQUIREMENTS" "$stamp"; then
  echo "install-deps: $VENV has the pinned Python packages"
  exit 0
fi
python=""
for candidate in python3.11 /usr/bin/python3.11; do
  if command -v "$candidate" >/dev/null 2>&1; then python=$(command -v "$candidate"); break; fi
done
if [ -z "$python" ]; then
  echo "install-deps: Python 3.11 not found (the pinned torch wheel is for CPython 3.11)" >&2
  exit 1
fi
echo "install-deps: making $VENV with $python (torch is about 5.5 GB)"
[ -x "$VENV/bin/python" ] || "$python" -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQUIREMENTS"
"$VENV/bin/python" -c 'import torch; print("install-deps: torch", torch.__version__, "CUDA", torch.version.cuda)'
cp "$REQUIREMENTS" "$stamp"
echo "install-deps: done"
