#!/usr/bin/env bash
# nightshift-trainer of a CUDA build links LibTorch's CUDA libraries but not the driver
# (libcuda.so.1 is loaded lazily by LibTorch), and starts on a machine without one.
# Usage: linkage_test.sh BINARY CUDA_BUILD(0|1)
set -euo pipefail
bin=$1 cuda=$2
needed=$(readelf -d "$bin" | grep NEEDED)
if grep -q 'libcuda\.so' <<<"$needed"; then
  echo "FAIL: $bin needs libcuda.so at load time: it will not start without a driver"; exit 1
fi
if [ "$cuda" = 1 ]; then
  for lib in libtorch_cuda.so libc10_cuda.so; do
    grep -qF "[$lib]" <<<"$needed" || { echo "FAIL: a CUDA build but $bin does not link $lib"; exit 1; }
  done
fi
set +e
out=$("$bin" 2>&1)
rc=$?
set -e
[ "$rc" = 2 ] || { echo "FAIL: expected the usage exit code 2, got $rc: $out"; exit 1; }
echo "ok: $(wc -l <<<"$needed") libraries needed, none of them the driver; CUDA build: $cuda"
