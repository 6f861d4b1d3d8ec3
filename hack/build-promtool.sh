#!/usr/bin/env bash
# Builds promtool (Prometheus' rules checker) from the Go module proxy into
# the user's cache directory (OPSWIRE_BIN_DIR), like build-controlplane.sh; skips it when
# already built. About two minutes on 2 cores, once.
set -euo pipefail
cd "$(dirname "$0")/.."
PROMETHEUS_VERSION=v0.316.0
BIN="${OPSWIRE_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/opswire/bin}"
mkdir -p "$BIN"
if [ ! -x "$BIN/promtool-$PROMETHEUS_VERSION" ]; then
  echo ">> building promtool $PROMETHEUS_VERSION (a few minutes, once)" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  GOWORK=off GOFLAGS=-mod=mod GOBIN="$tmp" go install "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"
  mv "$tmp/promtool" "$BIN/promtool-$PROMETHEUS_VERSION"
fi
echo "$BIN/promtool-$PROMETHEUS_VERSION"
