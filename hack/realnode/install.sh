#!/usr/bin/env bash
# install.sh: the Debian packages a real node needs (containerd 1.6, runc, the CNI plugins,
# iptables, conntrack, socat for port-forward), installed only when one is missing.
# Needs root (apt-get). Prints what it did; exits non-zero naming what could not be installed.
set -euo pipefail
missing=()
command -v containerd >/dev/null || missing+=(containerd)
[ -x /usr/sbin/runc ] || missing+=(runc)
[ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/portmap ] || missing+=(containernetworking-plugins)
command -v iptables >/dev/null || missing+=(iptables)
command -v conntrack >/dev/null || missing+=(conntrack)
command -v socat >/dev/null || missing+=(socat)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install.sh: missing Debian packages ${missing[*]}, and installing them needs root" >&2
  exit 1
fi
echo ">> installing ${missing[*]} (Debian packages, once per machine)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo ">> installed ${missing[*]}"
