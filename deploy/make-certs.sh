#!/usr/bin/env sh
# Makes a CA and the NATS servers' certificate (client port 4222 and cluster
# routes 6222) with openssl, and prints the Secret nats-tls that the
# production overlay mounts, for clusters without cert-manager:
#   ./deploy/make-certs.sh | kubectl apply -f -
# (With cert-manager, add the component deploy/components/nats-tls-cert-manager
# instead; it makes the same Secret.) Nothing is written to disk and the CA's
# private key is discarded: re-running it makes a new CA, so apply the new
# Secret and restart NATS and the services together (docs/security.md).
#
# Environment:
#   NAMESPACE   namespace of the Services (default opswire)
#   DAYS        validity of the server certificate (default 365; the CA: 10 years)
#   EXTRA_SANS  more subjectAltNames, e.g. "DNS:nats.example.com,IP:10.0.0.5"
#   OUT_DIR     also keep ca.crt, ca.key, tls.crt and tls.key in this directory
#               (mode 0600; for tests and for signing more certificates)
set -eu
ns=${NAMESPACE:-opswire}
days=${DAYS:-365}
command -v openssl >/dev/null || { echo "$0: openssl not found" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
umask 077
serial() { printf '0x%s' "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n' | sed 's/^./7/')"; }

openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
  -keyout "$work/ca.key" -out "$work/ca.crt" -days 3650 -set_serial "$(serial)" \
  -subj "/O=opswire/CN=opswire NATS CA" \
  -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

sans="DNS:nats,DNS:nats.$ns,DNS:nats.$ns.svc,DNS:nats.$ns.svc.cluster.local"
sans="$sans,DNS:*.nats-headless.$ns.svc,DNS:*.nats-headless.$ns.svc.cluster.local"
sans="$sans,DNS:nats-headless.$ns.svc,DNS:nats-headless.$ns.svc.cluster.local"
if [ -n "${EXTRA_SANS:-}" ]; then sans="$sans,$EXTRA_SANS"; fi
cat >"$work/ext.cnf" <<CNF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
# serverAuth for clients and routes; clientAuth because each server also
# presents it when it dials a route (routes verify both ends).
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$sans
CNF
openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
  -keyout "$work/tls.key" -out "$work/tls.csr" -subj "/O=opswire/CN=nats.$ns.svc" 2>/dev/null
openssl x509 -req -in "$work/tls.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" \
  -set_serial "$(serial)" -days "$days" -extfile "$work/ext.cnf" -out "$work/tls.crt" 2>/dev/null
openssl verify -CAfile "$work/ca.crt" "$work/tls.crt" >/dev/null

if [ -n "${OUT_DIR:-}" ]; then
  mkdir -p "$OUT_DIR"
  for f in ca.crt ca.key tls.crt tls.key; do cp "$work/$f" "$OUT_DIR/$f"; done
fi
b64() { base64 <"$1" | tr -d '\n'; }
cat <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: nats-tls
  namespace: $ns
  labels: {app.kubernetes.io/part-of: opswire}
type: kubernetes.io/tls
data:
  tls.crt: $(b64 "$work/tls.crt")
  tls.key: $(b64 "$work/tls.key")
  ca.crt: $(b64 "$work/ca.crt")
YAML
