#!/usr/bin/env bash
# certs.sh DIR NODE NODE_IP: a CA and the four certificates of a one-node test cluster.
set -euo pipefail
D=$1 NODE=$2 NODE_IP=$3
mkdir -p "$D" && cd "$D"
[ -f ca.crt ] && exit 0
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 365 -subj /CN=realnode-ca 2>/dev/null
sign() { # name subject [sans]
  openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
  local ext="basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=${4:-clientAuth}"
  [ -n "${3:-}" ] && ext="$ext
subjectAltName=$3"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 365 -extfile <(echo "$ext") 2>/dev/null
  rm "$1.csr"
}
sign apiserver /CN=kube-apiserver "IP:$NODE_IP,IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" serverAuth
sign kubelet-serving "/CN=$NODE" "IP:$NODE_IP,IP:127.0.0.1,DNS:$NODE" serverAuth
sign admin "/O=system:masters/CN=admin"
sign node "/O=system:nodes/CN=system:node:$NODE"
openssl genrsa -out sa.key 2048 2>/dev/null && openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
for u in admin node; do
  cat > "$u.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: realnode
  cluster: {server: "https://$NODE_IP:6443", certificate-authority: $D/ca.crt}
users:
- name: $u
  user: {client-certificate: $D/$u.crt, client-key: $D/$u.key}
contexts:
- name: realnode
  context: {cluster: realnode, user: $u}
current-context: realnode
KC
done
