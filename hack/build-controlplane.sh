#!/usr/bin/env bash
# Builds the real kube-apiserver, etcd and nats-server the end-to-end harness
# runs, and the helm CLI the chart tests run, from the Go module proxy, into
# .cache/bin (git-ignored). Skips what is already built. (Most tests embed
# nats-server; the 3-node cluster test runs real nats-server processes, at the
# version of test/go.mod; helm at the version of hack/helm/go.mod.)
# The first build of kube-apiserver takes 5-15 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
K8S_VERSION=v1.37.2
ETCD_VERSION=v3.6.16
NATS_VERSION=$(cd test && GOWORK=off go list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)
HELM_VERSION=$(cd hack/helm && GOWORK=off go list -m -f '{{.Version}}' helm.sh/helm/v3)
BIN="${OPSWIRE_BIN_DIR:-$PWD/.cache/bin}"
mkdir -p "$BIN"
export GOWORK=off GOFLAGS=-mod=mod

if [ ! -x "$BIN/etcd-$ETCD_VERSION" ]; then
  echo ">> building etcd $ETCD_VERSION (about a minute, once)"
  (cd hack/etcd && go build -o "$BIN/etcd-$ETCD_VERSION.tmp" go.etcd.io/etcd/server/v3)
  mv "$BIN/etcd-$ETCD_VERSION.tmp" "$BIN/etcd-$ETCD_VERSION"
fi
if [ ! -x "$BIN/nats-server-$NATS_VERSION" ]; then
  echo ">> building nats-server $NATS_VERSION (under a minute, once)"
  (cd test && go build -o "$BIN/nats-server-$NATS_VERSION.tmp" github.com/nats-io/nats-server/v2)
  mv "$BIN/nats-server-$NATS_VERSION.tmp" "$BIN/nats-server-$NATS_VERSION"
fi
if [ ! -x "$BIN/helm-$HELM_VERSION" ]; then
  echo ">> building helm $HELM_VERSION (about a minute, once)"
  (cd hack/helm && go build -ldflags "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    -o "$BIN/helm-$HELM_VERSION.tmp" helm.sh/helm/v3/cmd/helm)
  mv "$BIN/helm-$HELM_VERSION.tmp" "$BIN/helm-$HELM_VERSION"
fi
if [ ! -x "$BIN/kube-apiserver-$K8S_VERSION" ]; then
  echo ">> building kube-apiserver $K8S_VERSION (5-15 minutes on 2 cores, once; later runs reuse $BIN)"
  start=$(date +%s)
  (cd hack/controlplane && go build -o "$BIN/kube-apiserver-$K8S_VERSION.tmp" k8s.io/kubernetes/cmd/kube-apiserver) &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 30
    kill -0 "$pid" 2>/dev/null && echo "   ... still building kube-apiserver ($(( $(date +%s) - start ))s)"
  done
  wait "$pid"
  mv "$BIN/kube-apiserver-$K8S_VERSION.tmp" "$BIN/kube-apiserver-$K8S_VERSION"
  echo ">> kube-apiserver built in $(( $(date +%s) - start ))s"
fi
echo ">> control plane binaries in $BIN"
