#!/usr/bin/env bash
# The local quickstart: installs what is missing, builds, fetches the SpamAssassin
# corpus, starts a coordinator and one worker on 127.0.0.1 (free ports), submits the
# demo job, follows it to the end, prints its validation metrics, and stops the daemons
# (--keep-running leaves them up).
#   usage: deploy/local/quickstart.sh [--keep-running] [--with-prometheus] [SPEC]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
KEEP=0
PROM=0
SPEC=deploy/examples/spam-classifier.yaml
for arg in "$@"; do
  case "$arg" in
    --keep-running) KEEP=1 ;;
    --with-prometheus) PROM=1 ;;
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
# A reused NIGHTSHIFT_RUN_DIR keeps the last run's port files; waiting on them would
# hand out ports nobody listens on.
rm -f "$RUN/coordinator.port" "$RUN/coordinator.metrics-port" "$RUN/worker.metrics-port"
BIN=$ROOT/build/bin
"$BIN/nightshift-coordinator" --listen 127.0.0.1:0 --port-file "$RUN/coordinator.port" \
  --data-dir "$RUN/coordinator-db" --metrics-listen 127.0.0.1:0 --metrics-port-file "$RUN/coordinator.metrics-port" \
  2>"$RUN/coordinator.log" &
COORD_PID=$!
stop_daemons() {
  if [ "$KEEP" = 1 ]; then return; fi
  kill "${WORKER_PID:-}" "$COORD_PID" ${PROM_PID:-} 2>/dev/null || true
  wait 2>/dev/null || true
}
trap stop_daemons EXIT
for _ in $(seq 1 100); do [ -s "$RUN/coordinator.port" ] && break; sleep 0.1; done
[ -s "$RUN/coordinator.port" ] || { echo "quickstart: the coordinator did not start; see $RUN/coordinator.log" >&2; exit 1; }
export NIGHTSHIFT_COORDINATOR=127.0.0.1:$(cat "$RUN/coordinator.port")
"$BIN/nightshift-worker" --coordinator "$NIGHTSHIFT_COORDINATOR" --name local-1 --cpu-slots 1 \
  --work-dir "$RUN/worker-local-1" --metrics-listen 127.0.0.1:0 --metrics-port-file "$RUN/worker.metrics-port" \
  2>"$RUN/worker-local-1.log" &
WORKER_PID=$!
if [ "$PROM" = 1 ]; then
  for _ in $(seq 1 100); do [ -s "$RUN/worker.metrics-port" ] && break; sleep 0.1; done
  PROM_PORT=${NIGHTSHIFT_PROMETHEUS_PORT:-9090}
  cat >"$RUN/prometheus.yml" <<PROMCFG
global: {scrape_interval: 5s, evaluation_interval: 5s}
scrape_configs:
  - job_name: nightshift-coordinator
    static_configs: [{targets: ['127.0.0.1:$(cat "$RUN/coordinator.metrics-port")']}]
  - job_name: nightshift-worker
    static_configs: [{targets: ['127.0.0.1:$(cat "$RUN/worker.metrics-port")']}]
PROMCFG
  prometheus --config.file="$RUN/prometheus.yml" --storage.tsdb.path="$RUN/prometheus" \
    --web.listen-address=127.0.0.1:$PROM_PORT 2>"$RUN/prometheus.log" &
  PROM_PID=$!
  echo "quickstart: Prometheus on http://127.0.0.1:$PROM_PORT (dashboards: deploy/grafana/)"
fi

echo "quickstart: coordinator on $NIGHTSHIFT_COORDINATOR, worker local-1; submitting $SPEC"
set +e
"$BIN/nightshift" job submit "$SPEC" --wait
RC=$?
set -e
JOB=$("$BIN/nightshift" job list -o json | grep -o '"id": "[^"]*"' | tail -n 1 | cut -d'"' -f4)
echo
"$BIN/nightshift" job describe "$JOB"
if [ "$RC" = 0 ]; then
  # The trained model out: downloaded through the coordinator (checksums verified), then
  # run on two mails of the corpus by nightshift-predict.
  rm -rf "$RUN/model"
  "$BIN/nightshift" job artifacts "$JOB" --output "$RUN/model"
  HAM=$(find data/spamassassin/ham -type f -print -quit)  # no pipe: pipefail and SIGPIPE
  SPAM=$(find data/spamassassin/spam -type f -print -quit)
  echo "quickstart: nightshift predict --model $RUN/model $HAM $SPAM"
  "$BIN/nightshift" predict --model "$RUN/model" "$HAM" "$SPAM"
fi
cat <<MSG

quickstart: job $JOB ended with exit code $RC.
  coordinator log:  $RUN/coordinator.log
  worker log:       $RUN/worker-local-1.log
  trainer log:      $RUN/worker-local-1/jobs/$JOB/attempt-*/rank-0.log
  job store:        $RUN/coordinator-db (RocksDB)
  checkpoints:      $RUN/worker-local-1/checkpoints/$JOB
  the model:        $RUN/model (python: import nightshift; nightshift.load("$RUN/model").predict([...]))
  metrics:          http://127.0.0.1:$(cat "$RUN/coordinator.metrics-port")/metrics (coordinator), http://127.0.0.1:$(cat "$RUN/worker.metrics-port")/metrics (worker)
MSG
if [ "$KEEP" = 1 ]; then
  echo "  daemons left running: coordinator pid $COORD_PID, worker pid $WORKER_PID"
  echo "  export NIGHTSHIFT_COORDINATOR=$NIGHTSHIFT_COORDINATOR"
fi
exit $RC
