#!/bin/bash
# Start a TLS dask-dppca cluster on SLURM with plain sbatch jobs, the commands of
# deploy/commands.json: one scheduler job, N ordinary worker jobs, and the trusted
# worker (resource dppca-trusted) as its own job, on the partition/nodes you trust.
#
#   export DPPCA_TLS=$HOME/dppca-tls        # deploy/tls/make-certs.sh $DPPCA_TLS <scheduler node names>
#   deploy/slurm/launch.sh start 4          # scheduler + 4 workers + the trusted worker
#   deploy/slurm/launch.sh address          # tls://node:8786 once the scheduler runs
#   deploy/slurm/launch.sh stop
#
# Settings (environment): DPPCA_TLS (certificates, on a shared file system),
# DPPCA_PARTITION, DPPCA_TRUSTED_SBATCH (extra sbatch flags for the trusted worker,
# e.g. "--nodelist=secure01" or "--constraint=trusted"), DPPCA_STATE (default
# $HOME/.dask-dppca: the scheduler file and job ids).
set -euo pipefail

TLS=${DPPCA_TLS:?set DPPCA_TLS to the folder made by deploy/tls/make-certs.sh}
STATE=${DPPCA_STATE:-$HOME/.dask-dppca}
PARTITION=${DPPCA_PARTITION:+--partition=$DPPCA_PARTITION}
PORT=8786
SCHEDULER_FILE=$STATE/scheduler.json
mkdir -p "$STATE"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

submit() {  # NAME SBATCH_FLAGS... -- COMMAND
  local name=$1; shift
  local flags=()
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  sbatch --parsable --job-name="$name" --output="$STATE/$name-%j.log" $PARTITION \
    "${flags[@]}" --wrap="$*" >> "$STATE/jobs"
}

case ${1:-} in
  start)
    workers=${2:-2}
    rm -f "$SCHEDULER_FILE" "$STATE/jobs"
    submit dppca-scheduler --cpus-per-task=2 --mem=8G --time=08:00:00 -- \
      dask scheduler --protocol tls --port "$PORT" \
      --tls-ca-file "$TLS/ca.pem" --tls-cert "$TLS/scheduler.pem" --tls-key "$TLS/scheduler.key" \
      --scheduler-file "$SCHEDULER_FILE"
    echo "waiting for the scheduler file $SCHEDULER_FILE ..."
    for _ in $(seq 600); do [ -s "$SCHEDULER_FILE" ] && break; sleep 1; done
    [ -s "$SCHEDULER_FILE" ] || { echo "scheduler did not start" >&2; exit 1; }
    address=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['address'])" "$SCHEDULER_FILE")
    for i in $(seq "$workers"); do
      submit "dppca-worker-$i" --cpus-per-task=4 --mem=16G --time=08:00:00 -- \
        dask worker "$address" --nthreads 4 \
        --tls-ca-file "$TLS/ca.pem" --tls-cert "$TLS/worker.pem" --tls-key "$TLS/worker.key"
    done
    # shellcheck disable=SC2086
    submit dppca-trusted --cpus-per-task=2 --mem=16G --time=08:00:00 ${DPPCA_TRUSTED_SBATCH:-} -- \
      dask worker "$address" --nthreads 1 \
      --tls-ca-file "$TLS/ca.pem" --tls-cert "$TLS/worker.pem" --tls-key "$TLS/worker.key" \
      --resources dppca-trusted=1
    echo "$address"
    ;;
  address)
    python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['address'])" "$SCHEDULER_FILE"
    ;;
  stop)
    [ -f "$STATE/jobs" ] && xargs -r scancel < "$STATE/jobs"
    rm -f "$STATE/jobs" "$SCHEDULER_FILE"
    ;;
  *)
    echo "usage: $0 start [N_WORKERS] | address | stop" >&2
    exit 2
    ;;
esac
