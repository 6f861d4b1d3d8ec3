#!/usr/bin/env bash
# down.sh: stops what up.sh started, by PID, and removes what it left on the host.
#   PURGE=1 also deletes the state ($RN: etcd, images, certificates).
# Safe to run when nothing is up (the harness runs it before up.sh, for what a killed test left).
set -uo pipefail
RN=${RN:-/var/lib/realnode}
RUN=${RUN:-/run/realnode}
export KUBECONFIG=$RN/pki/admin.kubeconfig CONTAINERD_ADDRESS=$RUN/containerd.sock
t0=$(date +%s)
alive() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [ "${st:0:1}" != Z ]; }
stop() { # name: SIGTERM, wait up to 20 s, then SIGKILL
  local f=$RUN/$1.pid
  [ -f "$f" ] || return 0
  local pid; pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
    alive "$pid" && kill -9 "$pid"
  fi
  rm -f "$f"
  [ -n "${VERBOSE:-}" ] && echo "stopped $1 at +$(( $(date +%s) - t0 ))s"
}
# No new pods, then every pod away through the kubelet (so the CNI tears its network down).
stop kube-controller-manager; stop kube-scheduler
if [ -f "$RUN/kubelet.pid" ] && kill -0 "$(cat "$RUN/kubelet.pid")" 2>/dev/null; then
  kubectl delete pods --all -A --grace-period=1 --wait=false >/dev/null 2>&1
  for _ in $(seq 1 150); do
    [ -z "$(ctr -n k8s.io tasks ls -q 2>/dev/null)" ] && break; sleep 0.2
  done
fi
echo "down: pods gone after $(( $(date +%s) - t0 ))s"
stop kubelet
# Whatever is left (kubelet gone): kill and delete the tasks and containers directly.
if [ -S "$RUN/containerd.sock" ]; then
  for t in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do ctr -n k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1; done
  sleep 0.5
  for t in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do ctr -n k8s.io tasks delete -f "$t" >/dev/null 2>&1; done
  for c in $(ctr -n k8s.io containers ls -q 2>/dev/null); do ctr -n k8s.io containers delete "$c" >/dev/null 2>&1; done
fi
stop kube-proxy; stop coredns; stop kube-apiserver; stop etcd; stop containerd
# kube-proxy's iptables rules, the CNI's, the bridge, leftover netns
[ -x "${BIN:-}/kube-proxy" ] && "$BIN/kube-proxy" --cleanup >/dev/null 2>&1
for chain in $(iptables -t nat -S 2>/dev/null | awk '/^-N CNI-/{print $2}'); do
  iptables -t nat -S POSTROUTING | grep -- "-j $chain" | sed 's/^-A/-D/' | while read -r r; do eval "iptables -t nat $r"; done
  iptables -t nat -F "$chain"; iptables -t nat -X "$chain"
done
# the kubelet's own chains (KUBE-FIREWALL drops non-loopback traffic to 127.0.0.0/8)
for ipt in iptables ip6tables; do
  for t in filter nat mangle; do
    $ipt -t $t -S 2>/dev/null | grep -E -- '-j KUBE-(FIREWALL|KUBELET-CANARY)' | sed 's/^-A/-D/' |
      while read -r r; do eval "$ipt -t $t $r"; done
    for c in KUBE-FIREWALL KUBE-KUBELET-CANARY; do $ipt -t $t -F $c 2>/dev/null; $ipt -t $t -X $c 2>/dev/null; done
  done
done
ip link del rn0 2>/dev/null
# the kubelet's cgroups (empty now), deepest first
find /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods -depth -type d -exec rmdir {} + 2>/dev/null
rmdir /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd 2>/dev/null
for ns in /run/netns/cni-*; do [ -e "$ns" ] && { umount "$ns" 2>/dev/null; rm -f "$ns"; }; done
awk -v a="$RN/" -v b="$RUN/" 'index($2, a) == 1 || index($2, b) == 1 {print $2}' /proc/mounts | sort -r | xargs -r -n1 umount 2>/dev/null
# pod IPs still on record (the pods are gone)
find "$RN/cni/ipam" -type f ! -name lock ! -name 'last_reserved_ip*' -delete 2>/dev/null
# the kernel settings the kubelet changed (recorded by up.sh)
[ -f "$RN/sysctl.before" ] && while IFS== read -r k v; do echo "$v" > "/proc/sys/$k"; done < "$RN/sysctl.before"
[ "${PURGE:-0}" = 1 ] && rm -rf "$RN" "$RUN"
echo "down: $(ls "$RUN"/*.pid 2>/dev/null | wc -l) pid files left"
