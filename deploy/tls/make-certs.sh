#!/bin/sh
# Make the TLS material of a dask-dppca cluster with the openssl command line.
#
#   make-certs.sh OUTPUT_DIR [SCHEDULER_HOST ...]
#
# writes one folder per role, each holding only what that role needs:
#   OUTPUT_DIR/scheduler/       ca.pem scheduler.pem scheduler.key
#   OUTPUT_DIR/worker/          ca.pem worker.pem worker.key
#   OUTPUT_DIR/trusted-worker/  ca.pem trusted-worker.pem trusted-worker.key
#   OUTPUT_DIR/client/          ca.pem client.pem client.key
# and the cluster's own CA in CA_DIR (default OUTPUT_DIR/ca): ca.pem and ca.key.  Mount
# or ship a role's folder to that role only; ca.key never goes anywhere: keep CA_DIR on
# this machine (or delete ca.key once the certificates are made).
#
# Identities: each certificate's subject is "CN=dask-dppca ROLE".  The release of a fit
# runs only on a worker whose certificate names "dask-dppca trusted-worker"
# (dask_dppca/compute/trust.py), so holding worker.key is not enough to claim it.
# Every certificate is valid for server and client authentication (Dask workers are
# both) and names the given hosts (default: scheduler localhost 127.0.0.1; IPv4 and
# IPv6 addresses become IP names); Dask checks the chain (mutual TLS), not host names.
#
# Modes: OUTPUT_DIR and CA_DIR are 0700 (only you reach the keys on this machine); the
# role folders are 0755 and their files 0644, so that a container user (uid 1000 in
# deploy/docker) can read its own folder when it is bind-mounted or put in a
# Kubernetes secret, whatever your uid here.
set -eu
out=${1:?usage: make-certs.sh OUTPUT_DIR [SCHEDULER_HOST ...]}
shift
hosts=${*:-scheduler localhost 127.0.0.1}
days=${DAYS:-365}
ca_dir=${CA_DIR:-$out/ca}
umask 077
mkdir -p "$out" "$ca_dir"
chmod 0700 "$out" "$ca_dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

san=""
for host in $hosts; do
  case $host in
    *:*) san="$san,IP:$host" ;;            # IPv6
    *[!0-9.]*) san="$san,DNS:$host" ;;     # a name
    *) san="$san,IP:$host" ;;              # IPv4
  esac
done
san=${san#,}

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -keyout "$ca_dir/ca.key" -out "$ca_dir/ca.pem" -days "$days" -subj "/CN=dask-dppca CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"

for role in scheduler worker trusted-worker client; do
  mkdir -p "$out/$role"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$out/$role/$role.key" -out "$work/$role.csr" -subj "/CN=dask-dppca $role"
  printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n' \
    "$san" > "$work/$role.ext"
  openssl x509 -req -in "$work/$role.csr" -CA "$ca_dir/ca.pem" -CAkey "$ca_dir/ca.key" \
    -CAcreateserial -CAserial "$work/ca.srl" -out "$out/$role/$role.pem" -days "$days" \
    -extfile "$work/$role.ext"
  cp "$ca_dir/ca.pem" "$out/$role/ca.pem"
  chmod 0644 "$out/$role/"*
  chmod 0755 "$out/$role"
done
chmod 0600 "$ca_dir/ca.key"
chmod 0644 "$ca_dir/ca.pem"
echo "wrote $out/{scheduler,worker,trusted-worker,client}/ (one folder per role); CA key: $ca_dir/ca.key"
