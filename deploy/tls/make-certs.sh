#!/bin/sh
# Make the TLS material of a dask-dppca cluster with the openssl command line:
#   ca.pem/ca.key                   the cluster's own CA (keep ca.key offline)
#   scheduler.pem/.key, worker.pem/.key, client.pem/.key   signed by it
# Usage: make-certs.sh OUTPUT_DIR [SCHEDULER_HOST ...]
# Every certificate is valid for server and client authentication (Dask workers are
# both); the scheduler's names it with the given hosts (default: scheduler, localhost,
# 127.0.0.1).  Dask checks the chain (mutual TLS), not host names.
set -eu
out=${1:?usage: make-certs.sh OUTPUT_DIR [SCHEDULER_HOST ...]}
shift
hosts=${*:-scheduler localhost 127.0.0.1}
days=${DAYS:-365}
mkdir -p "$out"
cd "$out"
umask 077

san=""
for host in $hosts; do
  case $host in
    *[!0-9.]*) san="$san,DNS:$host" ;;
    *) san="$san,IP:$host" ;;
  esac
done
san=${san#,}

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -keyout ca.key -out ca.pem -days "$days" -subj "/CN=dask-dppca CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"

for role in scheduler worker client; do
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$role.key" -out "$role.csr" -subj "/CN=dask-dppca $role"
  printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n' \
    "$san" > "$role.ext"
  openssl x509 -req -in "$role.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
    -out "$role.pem" -days "$days" -extfile "$role.ext"
  rm -f "$role.csr" "$role.ext"
done
rm -f ca.srl
chmod 0644 ./*.pem
echo "wrote $(pwd): ca.pem, scheduler/worker/client .pem + .key"
