#!/usr/bin/env bash
# Installs every Debian 12 package that the build, the tests, the benchmarks and the
# quickstart need. Idempotent; run as root. Skips apt entirely when all are present.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config git ccache
  # training: LibTorch 1.13 (CPU) and the Gloo headers its c10d needs; a fast BLAS
  libtorch-dev libgloo-dev libopenblas0-pthread
  # services
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librocksdb-dev prometheus-cpp-dev libxxhash-dev
  # security: SHA-256 of tokens (libcrypto), test certificates (openssl CLI)
  libssl-dev openssl
  # data, config, CLI
  libsentencepiece-dev sentencepiece nlohmann-json3-dev libcli11-dev libyaml-cpp-dev
  # tests
  libgtest-dev libgmock-dev prometheus curl python3-grpcio python3-protobuf python3-yaml
  # fuzzing (libFuzzer comes with clang's runtime library)
  clang libclang-rt-14-dev
  # benchmark baseline (plain PyTorch)
  python3-torch python3-numpy
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
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages (${missing[*]}); run this script as root" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"

# LibTorch's libblas.so.3 resolves through Debian's alternatives; make sure it points at
# OpenBLAS (pthread flavour) and not at the reference BLAS (30x slower).
for alt in libblas.so.3-x86_64-linux-gnu liblapack.so.3-x86_64-linux-gnu; do
  target=$(update-alternatives --list "$alt" 2>/dev/null | grep openblas-pthread | head -n 1 || true)
  if [ -n "$target" ]; then update-alternatives --set "$alt" "$target" >/dev/null; fi
done
echo "install-deps: done"
