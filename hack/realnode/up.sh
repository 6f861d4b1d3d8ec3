#!/usr/bin/env bash
# up.sh: a real one-node Kubernetes cluster on this machine (no systemd, cgroup v1/hybrid):
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd 1.6 + runc (Debian),
# kubelet, bridge CNI (Debian), optional kube-proxy and CoreDNS. Every PID goes to $RUN/*.pid; down.sh stops them.
#   BIN=dir-with-binaries IMAGES="a.tar b.tar" [ADMIN_TOKEN=...] ./up.sh
# The recipe and the traps it avoids: docs/real-node.md. test/harness (StartRealNode) runs it.
set -euo pipefail
BIN=${BIN:?directory with etcd kube-apiserver kube-controller-manager kube-scheduler kubelet [kube-proxy coredns]}
RN=${RN:-/var/lib/realnode}          # persistent state (etcd, containerd, kubelet, certs)
RUN=${RUN:-/run/realnode}            # sockets, pids, logs
NODE=${NODE:-rn-node}
NODE_IP=${NODE_IP:-10.88.0.1}        # the CNI bridge's gateway: pods reach the API server and DNS here
POD_CIDR=${POD_CIDR:-10.88.0.0/24}
SVC_CIDR=${SVC_CIDR:-10.0.0.0/24}
LO=${LO:-127.0.0.2}                  # loopback address of etcd and the health/metrics ports
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$RN" "$RUN"
t0=$(date +%s.%N)
since() { awk -v a="$t0" -v b="$(date +%s.%N)" -v m="$*" 'BEGIN { printf "%6.1fs  %s\n", b - a, m }'; }
start() { # name cmd...   (in its own session, so neither Ctrl-C nor `timeout` of the caller kills it;
  local n=$1; shift        #  logs to $RUN/name.log, pid to $RUN/name.pid; down.sh stops it)
  setsid "$@" >"$RUN/$n.log" 2>&1 </dev/null &
  echo $! >"$RUN/$n.pid"
}
waitfor() { # what seconds cmd...
  local w=$1 end=$(( $(date +%s) + $2 )); shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -ge "$end" ] && { echo "timed out waiting for $w" >&2; return 1; }
    sleep 0.2
  done
}

# 1. Host: the pod bridge with the node's address, forwarding. The kernel settings that this
#    and the kubelet change are recorded first; down.sh puts them back.
[ -f "$RN/sysctl.before" ] || for k in net/ipv4/ip_forward net/bridge/bridge-nf-call-iptables vm/overcommit_memory \
  vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes; do
  echo "$k=$(cat /proc/sys/$k)"; done >"$RN/sysctl.before"
if ! ip link show rn0 >/dev/null 2>&1; then
  ip link add rn0 type bridge
  ip addr add "$NODE_IP/${POD_CIDR#*/}" dev rn0
fi
ip link set rn0 up
sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
"$HERE/certs.sh" "$RN/pki" "$NODE" "$NODE_IP"
P=$RN/pki
# A bearer token for system:masters besides the admin certificate (what the test harness's clients use).
echo "${ADMIN_TOKEN:-$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')},admin,admin,system:masters" >"$P/tokens.csv"
chmod 600 "$P/tokens.csv"
since "host ready"

# 2. containerd (CRI) with runc and the Debian CNI plugins.
mkdir -p "$RN/cni/net.d"
cat >"$RN/containerd.toml" <<TOML
version = 2
root = "$RN/containerd"
state = "$RUN/containerd"
[grpc]
  address = "$RUN/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  # no CAP_SYS_RESOURCE on this machine: runc cannot set the sandbox's oom_score_adj -998
  # ("can't get final child's PID from pipe: EOF"); clamp it to containerd's own (0)
  restrict_oom_score_adj = true
  disable_hugetlb_controller = true
  tolerate_missing_hugetlb_controller = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$RN/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
TOML
cat >"$RN/cni/net.d/10-realnode.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "realnode", "plugins": [
  {"type": "bridge", "bridge": "rn0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
            "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$RN/cni/ipam"}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
start containerd containerd --config "$RN/containerd.toml"
waitfor containerd 30 ctr -a "$RUN/containerd.sock" version
for img in ${IMAGES:-}; do ctr -a "$RUN/containerd.sock" -n k8s.io images import "$img" >/dev/null; done
since "containerd up, $(echo ${IMAGES:-} | wc -w) image archives imported"

# 3. etcd and kube-apiserver.
# Every loopback listener is on $LO (127.0.0.2), not 127.0.0.1: test harnesses on this machine
# pick "free" 127.0.0.1 ports below the ephemeral range; one that picked etcd's port while this
# etcd was restarting pointed its kube-apiserver at this etcd and wrote its Nodes into it.
start etcd "$BIN/etcd" --name realnode --data-dir "$RN/etcd" --listen-client-urls "http://$LO:2379" \
  --advertise-client-urls "http://$LO:2379" --listen-peer-urls "http://$LO:2380" \
  --initial-advertise-peer-urls "http://$LO:2380" --initial-cluster "realnode=http://$LO:2380"
start kube-apiserver "$BIN/kube-apiserver" --etcd-servers "http://$LO:2379" \
  --bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port 6443 \
  --tls-cert-file "$P/apiserver.crt" --tls-private-key-file "$P/apiserver.key" --client-ca-file "$P/ca.crt" \
  --kubelet-client-certificate "$P/admin.crt" --kubelet-client-key "$P/admin.key" \
  --kubelet-certificate-authority "$P/ca.crt" --kubelet-preferred-address-types InternalIP \
  --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$P/sa.pub" \
  --service-account-signing-key-file "$P/sa.key" --service-cluster-ip-range "$SVC_CIDR" \
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction --allow-privileged=true \
  --token-auth-file "$P/tokens.csv"
export KUBECONFIG=$P/admin.kubeconfig
waitfor kube-apiserver 120 kubectl get --raw /readyz
since "kube-apiserver ready"

# 4. Controllers and scheduler.
start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$P/admin.kubeconfig" \
  --authentication-kubeconfig "$P/admin.kubeconfig" --authorization-kubeconfig "$P/admin.kubeconfig" \
  --bind-address "$LO" --leader-elect=false --use-service-account-credentials \
  --root-ca-file "$P/ca.crt" --service-account-private-key-file "$P/sa.key" \
  --cluster-signing-cert-file "$P/ca.crt" --cluster-signing-key-file "$P/ca.key" \
  --service-cluster-ip-range "$SVC_CIDR"
start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$P/admin.kubeconfig" \
  --authentication-kubeconfig "$P/admin.kubeconfig" --authorization-kubeconfig "$P/admin.kubeconfig" \
  --bind-address "$LO" --leader-elect=false

# 5. DNS (optional): CoreDNS on the host, answering on $NODE_IP:53 from the API.
DNS=()
if [ -x "$BIN/coredns" ]; then
  cat >"$RN/Corefile" <<COREFILE
.:53 {
    bind $NODE_IP
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $P/admin.kubeconfig
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf
    cache 30
}
COREFILE
  start coredns "$BIN/coredns" -conf "$RN/Corefile"
  DNS=("$NODE_IP")
fi

# 6. kubelet.
mkdir -p "$RN/kubelet"
cat >"$RN/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false                 # this machine has cgroup v1 (hybrid); v1.37 refuses v1 unless told
cgroupDriver: cgroupfs              # no systemd; containerd 1.6 cannot report its driver (RuntimeConfig)
containerRuntimeEndpoint: unix://$RUN/containerd.sock
address: $NODE_IP
readOnlyPort: 0
healthzBindAddress: $LO
tlsCertFile: $P/kubelet-serving.crt
tlsPrivateKeyFile: $P/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
clusterDNS: [${DNS[*]:-}]
resolvConf: /etc/resolv.conf
failSwapOn: false
podLogsDir: $RN/pod-logs            # default /var/log/pods
volumePluginDir: $RN/kubelet-plugins # default /usr/libexec/kubernetes/...
serializeImagePulls: false
imageGCHighThresholdPercent: 100    # never garbage-collect the images imported by hand
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 2Gi, imagefs.available: 2Gi}
YAML
kubelet_started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
start kubelet "$BIN/kubelet" --config "$RN/kubelet.yaml" --kubeconfig "$P/node.kubeconfig" \
  --root-dir "$RN/kubelet" --cert-dir "$RN/kubelet/pki" --hostname-override "$NODE" --node-ip "$NODE_IP" -v=1

# 7. kube-proxy (optional): Service ClusterIPs via iptables.
if [ -x "$BIN/kube-proxy" ]; then
  start kube-proxy "$BIN/kube-proxy" --kubeconfig "$P/admin.kubeconfig" --hostname-override "$NODE" \
    --proxy-mode iptables --cluster-cidr "$POD_CIDR" --conntrack-max-per-core 0 \
    --iptables-localhost-nodeports=false --metrics-bind-address "$LO:10249" --healthz-bind-address "$LO:10256"
fi
# Ready, as posted by this kubelet (a Node kept from an earlier run may still say Ready from before)
node_ready() {
  local out st hb
  out=$(kubectl get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}') || return 1
  read -r st hb <<<"$out"
  [ "$st" = True ] && [[ "$hb" > "$kubelet_started" || "$hb" == "$kubelet_started" ]]
}
waitfor "node Ready" 180 node_ready
since "node $NODE Ready"
