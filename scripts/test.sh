#!/usr/bin/env bash
# Sets up and runs every test: installs the Debian packages (as root), builds everything
# in build/, and runs the whole suite with ctest. Exit code is ctest's.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then
  ./scripts/install-deps.sh
fi
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=ON >/dev/null
ninja -C "$BUILD_DIR" -j "$JOBS"
# The tokenizer equality test reads every SpamAssassin mail (cached after the first fetch).
./scripts/fetch-data.sh
# Tests are bounded in time by ctest (each has a TIMEOUT) and start their own servers on
# 127.0.0.1 with ports they pick.
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" "$@"
