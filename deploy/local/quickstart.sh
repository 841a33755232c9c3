#!/usr/bin/env bash
# The local quickstart: installs what is missing, builds the programs, fetches the
# SpamAssassin corpus, starts a coordinator and one worker on 127.0.0.1 (free ports),
# submits the demo job, follows it to the end, downloads the trained model, classifies a
# ham and a spam mail with it, and stops the daemons.
#   usage: deploy/local/quickstart.sh [--keep-running] [--with-prometheus] [--skip-build]
#                                     [--port N] [SPEC]
#   --keep-running     leave the coordinator and the worker up afterwards
#   --with-prometheus  start a Prometheus server that scrapes both
#   --skip-build       use the programs already in the build folder (no install, no build)
#   --port N           the coordinator's port (default: a free one)
#   SPEC               another job spec (its data is yours to provide; no download, no
#                      classification of the demo's mails)
# Environment: NIGHTSHIFT_RUN_DIR (default run/quickstart-DATE), NIGHTSHIFT_BUILD_DIR
# (default build), NIGHTSHIFT_DATA_ROOT (the worker's --data-root, default data/: jobs
# read only under it). Each step's output goes to a log in the run folder; a step that fails
# ends the script with a non-zero exit code and a line naming the step and its logs.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
KEEP=0
PROM=0
BUILD=1
PORT=0
DEMO_SPEC=deploy/examples/spam-classifier.yaml
SPEC=$DEMO_SPEC
while [ $# -gt 0 ]; do
  case "$1" in
    --keep-running) KEEP=1 ;;
    --with-prometheus) PROM=1 ;;
    --skip-build) BUILD=0 ;;
    --port) PORT=${2:?--port needs a number}; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "quickstart: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) SPEC=$1 ;;
  esac
  shift
done
BUILD_DIR=${NIGHTSHIFT_BUILD_DIR:-$ROOT/build}
BIN=$BUILD_DIR/bin
# What this script runs, directly or through another program (the worker starts
# nightshift-prepare and nightshift-trainer; `nightshift predict` runs nightshift-predict).
PROGRAMS=(nightshift-coordinator nightshift-worker nightshift-prepare nightshift-trainer nightshift nightshift-predict)

RUN=${NIGHTSHIFT_RUN_DIR:-$ROOT/run/quickstart-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RUN"
# A reused NIGHTSHIFT_RUN_DIR keeps the last run's port files; waiting on them would
# hand out ports nobody listens on.
rm -f "$RUN/coordinator.port" "$RUN/coordinator.metrics-port" "$RUN/worker.metrics-port"

# A failed step: its name, the exit code, where its logs are and their last lines.
fail() {  # fail STEP RC LOG...
  local step=$1 rc=$2
  shift 2
  echo >&2
  echo "quickstart: FAILED at step '$step' (exit code $rc); logs: $*" >&2
  local log
  for log in "$@"; do
    [ -s "$log" ] || continue
    echo "--- last lines of $log" >&2
    tail -n 8 "$log" >&2
  done
  exit "$rc"
}
# Runs one step, its output both on the terminal and in LOG.
step() {  # step NAME LOG COMMAND...
  local name=$1 log=$2
  shift 2
  echo "quickstart: $name (log: $log)"
  set +e
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  set -e
  [ "$rc" = 0 ] || fail "$name" "$rc" "$log"
}

stop_daemons() {
  local rc=$?
  kill ${WATCH_PID:-} 2>/dev/null || true
  if [ "$KEEP" = 1 ]; then
    [ "$rc" = 0 ] || echo "quickstart: left running (--keep-running): coordinator pid ${COORD_PID:-none}," \
                         "worker pid ${WORKER_PID:-none}" >&2
    return
  fi
  # The worker stops its trainers on SIGTERM; wait for each so nothing is left behind.
  kill ${WORKER_PID:-} ${COORD_PID:-} ${PROM_PID:-} 2>/dev/null || true
  wait 2>/dev/null || true
}
trap stop_daemons EXIT
trap 'exit 130' INT TERM

if [ "$BUILD" = 1 ]; then
  if [ "$(id -u)" -eq 0 ]; then step "install dependencies" "$RUN/install-deps.log" ./scripts/install-deps.sh; fi
  build() {
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
      ninja -C "$BUILD_DIR" nightshift-programs
  }
  step "build" "$RUN/build.log" build
fi
missing=()
for p in "${PROGRAMS[@]}"; do [ -x "$BIN/$p" ] || missing+=("$BIN/$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "quickstart: missing ${missing[*]}: not built by the nightshift-programs target" \
       "(declare it with nightshift_program() in its CMakeLists.txt)" >"$RUN/check-programs.log"
  fail "build" 1 "$RUN/check-programs.log" "$RUN/build.log"
fi
if [ "$SPEC" = "$DEMO_SPEC" ]; then
  step "fetch the SpamAssassin corpus" "$RUN/fetch-data.log" ./scripts/fetch-data.sh
fi

# A background process of this script that is gone fails STEP with its exit code (1 when
# it exited 0, or is still there); the step's log is LOG.
fail_gone() {  # fail_gone STEP PID LOG
  local rc=1
  if ! kill -0 "$2" 2>/dev/null; then wait "$2" || rc=$?; fi
  fail "$1" "$rc" "$3"
}

# Waits up to 10 s for a daemon's port file; fails the step if the daemon exits first.
await_port_file() {  # await_port_file STEP PID FILE LOG
  for _ in $(seq 1 100); do
    [ -s "$3" ] && return 0
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  fail_gone "$1" "$2" "$4"
}

echo "quickstart: start the coordinator (log: $RUN/coordinator.log)"
"$BIN/nightshift-coordinator" --listen "127.0.0.1:$PORT" --port-file "$RUN/coordinator.port" \
  --data-dir "$RUN/coordinator-db" --metrics-listen 127.0.0.1:0 --metrics-port-file "$RUN/coordinator.metrics-port" \
  2>"$RUN/coordinator.log" &
COORD_PID=$!
await_port_file "start the coordinator" "$COORD_PID" "$RUN/coordinator.port" "$RUN/coordinator.log"
export NIGHTSHIFT_COORDINATOR=127.0.0.1:$(cat "$RUN/coordinator.port")

WORKER_LOG=$RUN/worker-local-1.log
echo "quickstart: start the worker (log: $WORKER_LOG)"
"$BIN/nightshift-worker" --coordinator "$NIGHTSHIFT_COORDINATOR" --name local-1 --cpu-slots 1 \
  --work-dir "$RUN/worker-local-1" --data-root "${NIGHTSHIFT_DATA_ROOT:-$ROOT/data}" --metrics-listen 127.0.0.1:0 --metrics-port-file "$RUN/worker.metrics-port" \
  2>"$WORKER_LOG" &
WORKER_PID=$!
await_port_file "start the worker" "$WORKER_PID" "$RUN/worker.metrics-port" "$WORKER_LOG"

if [ "$PROM" = 1 ]; then
  if ! command -v prometheus >/dev/null; then
    echo "quickstart: --with-prometheus: no prometheus binary (scripts/install-deps.sh installs it)" \
      >"$RUN/prometheus.log"
    fail "start Prometheus" 1 "$RUN/prometheus.log"
  fi
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
  sleep 1
  kill -0 "$PROM_PID" 2>/dev/null || fail_gone "start Prometheus" "$PROM_PID" "$RUN/prometheus.log"
  echo "quickstart: Prometheus on http://127.0.0.1:$PROM_PORT (dashboards: deploy/grafana/)"
fi

STEP="submit $SPEC"
echo "quickstart: $STEP to the coordinator on $NIGHTSHIFT_COORDINATOR"
set +e
JOB=$("$BIN/nightshift" job submit "$SPEC" 2>"$RUN/submit.log")
RC=$?
set -e
[ "$RC" = 0 ] || fail "$STEP" "$RC" "$RUN/submit.log" "$RUN/coordinator.log"
TRAINER_LOGS="$RUN/worker-local-1/jobs/$JOB/attempt-*/rank-*.log"

# Follows the job; a daemon that dies meanwhile fails the step at once instead of
# leaving the watch waiting for a job nobody runs.
STEP="train job $JOB"
echo "quickstart: $STEP (nightshift job watch $JOB)"
"$BIN/nightshift" job watch "$JOB" &
WATCH_PID=$!
while kill -0 "$WATCH_PID" 2>/dev/null; do
  for d in "coordinator:$COORD_PID:$RUN/coordinator.log" "worker:$WORKER_PID:$WORKER_LOG"; do
    IFS=: read -r name pid log <<<"$d"
    kill -0 "$pid" 2>/dev/null || fail_gone "$STEP: the $name exited" "$pid" "$log"
  done
  sleep 1
done
set +e
wait "$WATCH_PID"
RC=$?
set -e
WATCH_PID=
echo
# The job's record, shown and kept (.ci/quickstart-check reads job.json); a coordinator
# gone by now fails the download below, naming its log.
"$BIN/nightshift" job describe "$JOB" || true
"$BIN/nightshift" job describe "$JOB" -o json >"$RUN/job.json" || true
if [ "$RC" != 0 ]; then
  shopt -s nullglob
  # shellcheck disable=SC2206  # the trainer logs are a glob
  trainer_logs=($TRAINER_LOGS)
  fail "$STEP" "$RC" "$RUN/coordinator.log" "$WORKER_LOG" "${trainer_logs[@]}"
fi

# The trained model out: downloaded through the coordinator (checksums verified), then
# run on a ham and a spam mail of the corpus by nightshift-predict.
rm -rf "$RUN/model"
step "download the model" "$RUN/artifacts.log" "$BIN/nightshift" job artifacts "$JOB" --output "$RUN/model"
if [ "$SPEC" = "$DEMO_SPEC" ]; then
  classify() {
    local ham spam
    ham=$(find data/spamassassin/ham -type f -print -quit) &&  # no pipe: pipefail and SIGPIPE
      spam=$(find data/spamassassin/spam -type f -print -quit) &&
      [ -n "$ham" ] && [ -n "$spam" ] &&
      "$BIN/nightshift" -o json predict --model "$RUN/model" "$ham" "$spam" >"$RUN/predictions.jsonl"
  }
  step "classify a ham and a spam mail (nightshift predict --model $RUN/model)" "$RUN/predict.log" classify
  cat "$RUN/predictions.jsonl"
fi
cat <<MSG

quickstart: job $JOB SUCCEEDED.
  coordinator log:  $RUN/coordinator.log
  worker log:       $WORKER_LOG
  trainer log:      $TRAINER_LOGS
  job store:        $RUN/coordinator-db (RocksDB)
  checkpoints:      $RUN/worker-local-1/checkpoints/$JOB
  the model:        $RUN/model (python: import nightshift; nightshift.load("$RUN/model").predict([...]))
  metrics:          http://127.0.0.1:$(cat "$RUN/coordinator.metrics-port")/metrics (coordinator), http://127.0.0.1:$(cat "$RUN/worker.metrics-port")/metrics (worker)
MSG
if [ "$KEEP" = 1 ]; then
  echo "  daemons left running: coordinator pid $COORD_PID, worker pid $WORKER_PID"
  echo "  export NIGHTSHIFT_COORDINATOR=$NIGHTSHIFT_COORDINATOR"
fi
