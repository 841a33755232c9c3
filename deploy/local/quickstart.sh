#!/usr/bin/env bash
# The local quickstart: installs what is missing, builds, fetches the SpamAssassin
# corpus, starts a coordinator and one worker on 127.0.0.1 (free ports), submits the
# demo job, follows it to the end, prints its validation metrics, and stops the daemons
# (--keep-running leaves them up).
#   usage: deploy/local/quickstart.sh [--keep-running] [SPEC]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
KEEP=0
SPEC=deploy/examples/spam-classifier.yaml
for arg in "$@"; do
  case "$arg" in
    --keep-running) KEEP=1 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) SPEC=$arg ;;
  esac
done

if [ "$(id -u)" -eq 0 ]; then ./scripts/install-deps.sh; fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build nightshift-coordinator nightshift-worker nightshift-prepare nightshift-trainer nightshift
./scripts/fetch-data.sh

RUN=${NIGHTSHIFT_RUN_DIR:-$ROOT/run/quickstart-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RUN"
BIN=$ROOT/build/bin
"$BIN/nightshift-coordinator" --listen 127.0.0.1:0 --port-file "$RUN/coordinator.port" \
  --data-dir "$RUN/coordinator-db" 2>"$RUN/coordinator.log" &
COORD_PID=$!
stop_daemons() {
  if [ "$KEEP" = 1 ]; then return; fi
  kill "${WORKER_PID:-}" "$COORD_PID" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap stop_daemons EXIT
for _ in $(seq 1 100); do [ -s "$RUN/coordinator.port" ] && break; sleep 0.1; done
[ -s "$RUN/coordinator.port" ] || { echo "quickstart: the coordinator did not start; see $RUN/coordinator.log" >&2; exit 1; }
export NIGHTSHIFT_COORDINATOR=127.0.0.1:$(cat "$RUN/coordinator.port")
"$BIN/nightshift-worker" --coordinator "$NIGHTSHIFT_COORDINATOR" --name local-1 --cpu-slots 1 \
  --work-dir "$RUN/worker-local-1" 2>"$RUN/worker-local-1.log" &
WORKER_PID=$!

echo "quickstart: coordinator on $NIGHTSHIFT_COORDINATOR, worker local-1; submitting $SPEC"
set +e
"$BIN/nightshift" job submit "$SPEC" --wait
RC=$?
set -e
JOB=$("$BIN/nightshift" job list -o json | grep -o '"id": "[^"]*"' | tail -n 1 | cut -d'"' -f4)
echo
"$BIN/nightshift" job describe "$JOB"
cat <<MSG

quickstart: job $JOB ended with exit code $RC.
  coordinator log:  $RUN/coordinator.log
  worker log:       $RUN/worker-local-1.log
  trainer log:      $RUN/worker-local-1/jobs/$JOB/attempt-*/rank-0.log
  job store:        $RUN/coordinator-db (RocksDB)
  checkpoints:      $RUN/worker-local-1/checkpoints/$JOB
MSG
if [ "$KEEP" = 1 ]; then
  echo "  daemons left running: coordinator pid $COORD_PID, worker pid $WORKER_PID"
  echo "  export NIGHTSHIFT_COORDINATOR=$NIGHTSHIFT_COORDINATOR"
fi
exit $RC
