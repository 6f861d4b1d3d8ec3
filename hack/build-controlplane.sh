#!/usr/bin/env bash
# Builds the real Kubernetes components, etcd and nats-server the end-to-end
# harness runs, the helm CLI the chart tests run and the nats CLI the
# documented operator commands run with, from the Go module proxy,
# into the user's cache directory (~/.cache/opswire/bin). Skips what is already built. (Most tests embed
# nats-server; the 3-node cluster test runs real nats-server processes, at the
# version of test/go.mod; helm at the version of hack/helm/go.mod.)
# The first build of the Kubernetes components takes 10-25 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
K8S_VERSION=v1.37.2
ETCD_VERSION=v3.6.16
NATS_VERSION=$(cd test && GOWORK=off go list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)
HELM_VERSION=$(cd hack/helm && GOWORK=off go list -m -f '{{.Version}}' helm.sh/helm/v3)
# Cached in the user's cache directory, keyed by version, so another clone on
# this machine reuses them (OPSWIRE_BIN_DIR overrides).
BIN="${OPSWIRE_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/opswire/bin}"
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
NATSCLI_VERSION=$(cd hack/natscli && go list -m -f '{{.Version}}' github.com/nats-io/natscli)
if [ ! -x "$BIN/nats-$NATSCLI_VERSION" ]; then
  echo ">> building the nats CLI $NATSCLI_VERSION (about a minute, once)"
  (cd hack/natscli && go build -o "$BIN/nats-$NATSCLI_VERSION.tmp" github.com/nats-io/natscli/nats)
  mv "$BIN/nats-$NATSCLI_VERSION.tmp" "$BIN/nats-$NATSCLI_VERSION"
fi
# The Kubernetes components, built in one go build (they share most packages)
# with the version ldflags a release has, so the Node's kubeletVersion and
# `kubectl version` say v1.37.2. Cached per version under $BIN/k8s-<version>/.
KBIN="$BIN/k8s-$K8S_VERSION"
K8S_CMDS="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy"
missing=
for c in $K8S_CMDS; do [ -x "$KBIN/$c" ] || missing=1; done
if [ -n "$missing" ]; then
  echo ">> building Kubernetes $K8S_VERSION ($K8S_CMDS): 10-25 minutes on 2 cores, once; later runs reuse $KBIN"
  start=$(date +%s)
  V=k8s.io/component-base/version
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  rm -rf "$KBIN.tmp" && mkdir -p "$KBIN.tmp"
  pkgs=; for c in $K8S_CMDS; do pkgs="$pkgs k8s.io/kubernetes/cmd/$c"; done
  # shellcheck disable=SC2086 # pkgs is a list
  (cd hack/controlplane && go build -ldflags "-X $V.gitVersion=$K8S_VERSION -X $V.gitMajor=1 -X $V.gitMinor=$minor -X $V.gitTreeState=clean" \
    -o "$KBIN.tmp/" $pkgs) &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 30
    kill -0 "$pid" 2>/dev/null && echo "   ... still building Kubernetes ($(( $(date +%s) - start ))s)"
  done
  wait "$pid"
  rm -rf "$KBIN" && mv "$KBIN.tmp" "$KBIN"
  echo ">> Kubernetes built in $(( $(date +%s) - start ))s"
fi
# CoreDNS answers Service names on the real node (hack/realnode): the plugins
# it needs only (hack/coredns), a static binary.
COREDNS_VERSION=$(cd hack/coredns && go list -m -f '{{.Version}}' github.com/coredns/coredns)
if [ ! -x "$BIN/coredns-$COREDNS_VERSION" ]; then
  echo ">> building CoreDNS $COREDNS_VERSION (a few minutes, once)"
  start=$(date +%s)
  (cd hack/coredns && CGO_ENABLED=0 go build -o "$BIN/coredns-$COREDNS_VERSION.tmp" .)
  mv "$BIN/coredns-$COREDNS_VERSION.tmp" "$BIN/coredns-$COREDNS_VERSION"
  echo ">> CoreDNS built in $(( $(date +%s) - start ))s"
fi
echo ">> control plane binaries in $BIN"
