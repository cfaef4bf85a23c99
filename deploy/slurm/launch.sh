#!/bin/bash
# Start a TLS dask-dppca cluster on SLURM with plain sbatch jobs, the commands of
# deploy/commands.json: one scheduler job, N ordinary worker jobs, and the trusted
# worker (its own certificate, resource dppca-trusted) as its own job, on the
# partition/nodes you trust.
#
#   export DPPCA_TLS=$HOME/dppca-tls        # CA_DIR=<private> deploy/tls/make-certs.sh $DPPCA_TLS <scheduler nodes>
#   deploy/slurm/launch.sh start 4          # scheduler + 4 workers + the trusted worker
#   deploy/slurm/launch.sh address          # tls://node:8786 once the scheduler runs
#   deploy/slurm/launch.sh trusted ADDRESS  # only the trusted worker, for another scheduler
#                                           # (e.g. a dask_jobqueue.SLURMCluster's)
#   deploy/slurm/launch.sh stop             # scancel every job started here
#
# Settings (environment): DPPCA_TLS (the role folders made by make-certs.sh, on a
# shared file system), DPPCA_PARTITION, DPPCA_TRUSTED_SBATCH (extra sbatch flags for the
# trusted worker, e.g. "--nodelist=secure01" or "--constraint=trusted"), DPPCA_STATE
# (default $HOME/.dask-dppca: the scheduler file, job ids and job logs).
set -euo pipefail

TLS=${DPPCA_TLS:?set DPPCA_TLS to the folder made by deploy/tls/make-certs.sh}
STATE=${DPPCA_STATE:-$HOME/.dask-dppca}
PORT=8786
SCHEDULER_FILE=$STATE/scheduler.json
mkdir -p "$STATE"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

submit() {  # NAME SBATCH_FLAGS... -- COMMAND ARGS...
  local name=$1; shift
  local flags=()
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  if [ -n "${DPPCA_PARTITION:-}" ]; then flags+=("--partition=$DPPCA_PARTITION"); fi
  # sbatch --wrap runs its text with /bin/sh: quote every argument for it.  The command
  # runs again when it stops (a scheduler that died comes back at the same address, and
  # workers, which exit with their scheduler, rejoin it) until the job is cancelled.
  sbatch --parsable --job-name="$name" --output="$STATE/$name-%j.log" \
    "${flags[@]}" --wrap="while :; do $(printf '%q ' "$@"); sleep 5; done" >> "$STATE/jobs"
}

scheduler_address() {
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['address'])" "$SCHEDULER_FILE"
}

submit_trusted() {  # ADDRESS
  local extra=()
  read -r -a extra <<< "${DPPCA_TRUSTED_SBATCH:-}"
  submit dppca-trusted --cpus-per-task=2 --mem=16G --time=08:00:00 "${extra[@]}" -- \
    dask worker "$1" --nthreads 1 \
    --tls-ca-file "$TLS/trusted-worker/ca.pem" --tls-cert "$TLS/trusted-worker/trusted-worker.pem" \
    --tls-key "$TLS/trusted-worker/trusted-worker.key" --resources dppca-trusted=1
}

case ${1:-} in
  start)
    workers=${2:-2}
    rm -f "$SCHEDULER_FILE" "$STATE/jobs"
    submit dppca-scheduler --cpus-per-task=2 --mem=8G --time=08:00:00 -- \
      dask scheduler --protocol tls --port "$PORT" \
      --tls-ca-file "$TLS/scheduler/ca.pem" --tls-cert "$TLS/scheduler/scheduler.pem" \
      --tls-key "$TLS/scheduler/scheduler.key" --scheduler-file "$SCHEDULER_FILE"
    echo "waiting for the scheduler file $SCHEDULER_FILE ..." >&2
    for _ in $(seq 600); do [ -s "$SCHEDULER_FILE" ] && break; sleep 1; done
    [ -s "$SCHEDULER_FILE" ] || { echo "scheduler did not start" >&2; exit 1; }
    address=$(scheduler_address)
    for i in $(seq "$workers"); do
      submit "dppca-worker-$i" --cpus-per-task=4 --mem=16G --time=08:00:00 -- \
        dask worker "$address" --nthreads 4 \
        --tls-ca-file "$TLS/worker/ca.pem" --tls-cert "$TLS/worker/worker.pem" \
        --tls-key "$TLS/worker/worker.key"
    done
    submit_trusted "$address"
    echo "$address"
    ;;
  trusted)
    submit_trusted "${2:?usage: $0 trusted SCHEDULER_ADDRESS}"
    ;;
  address)
    scheduler_address
    ;;
  stop)
    if [ -f "$STATE/jobs" ]; then xargs -r scancel < "$STATE/jobs"; fi
    rm -f "$STATE/jobs" "$SCHEDULER_FILE"
    ;;
  *)
    echo "usage: $0 start [N_WORKERS] | trusted ADDRESS | address | stop" >&2
    exit 2
    ;;
esac
