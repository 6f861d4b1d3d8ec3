#!/usr/bin/env sh
# Prints the Secret opswire-secrets with fresh random NATS passwords, for
#   ./deploy/make-secret.sh '<Feishu webhook URL>' ['<signing secret>'] | kubectl apply -f -
# Nothing is written to disk. Re-running it rotates every password (restart
# NATS and the services afterwards).
set -eu
if [ $# -lt 1 ]; then
  echo "usage: $0 <feishu-webhook-url> [feishu-signing-secret]" >&2
  exit 2
fi
# NATS parses variable values like config values: a password must not look
# like a number, so every password starts with a letter.
pw() { printf "'p%s'" "$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"; }
yaml_quote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/''/g")"; }
cat <<YAML
apiVersion: v1
kind: Namespace
metadata:
  name: opswire
---
apiVersion: v1
kind: Secret
metadata:
  name: opswire-secrets
  namespace: opswire
type: Opaque
stringData:
  nats-watcher-password: $(pw)
  nats-cordon-password: $(pw)
  nats-cleanup-password: $(pw)
  nats-report-password: $(pw)
  nats-notifier-password: $(pw)
  nats-audit-password: $(pw)
  nats-operator-password: $(pw)
  nats-route-password: $(pw)
  feishu-url: $(yaml_quote "$1")
  feishu-secret: $(yaml_quote "${2:-}")
YAML
