package harness

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The made-up account, region and workloads of the real-size objects.
const (
	realRegion   = "eu-west-1"
	realRegistry = "registry.acme.io"
	awsRegistry  = "602401143452.dkr.ecr.eu-west-1.amazonaws.com"
)

var (
	realTeams = []string{"payments", "checkout", "search", "catalog", "identity", "notifications", "ledger", "risk"}
	realApps  = []string{"api", "worker", "gateway", "consumer", "scheduler", "indexer", "exporter", "webhook-receiver"}
)

// infraImages are the images every node of such a cluster pulls: its
// add-ons and DaemonSets. Sizes are a kubelet's report of them.
var infraImages = []struct {
	repo, tag string
	size      int64
}{
	{awsRegistry + "/amazon-k8s-cni", "v1.20.1-eksbuild.1", 56_829_274},
	{awsRegistry + "/amazon-k8s-cni-init", "v1.20.1-eksbuild.1", 43_119_305},
	{awsRegistry + "/amazon/aws-network-policy-agent", "v1.2.5-eksbuild.1", 34_221_870},
	{awsRegistry + "/eks/kube-proxy", KubeVersion + "-minimal-eksbuild.1", 31_460_752},
	{awsRegistry + "/eks/pause", "3.10", 318_731},
	{awsRegistry + "/eks/coredns", "v1.12.3-eksbuild.1", 23_810_114},
	{awsRegistry + "/eks/aws-ebs-csi-driver", "v1.48.0", 90_452_310},
	{awsRegistry + "/eks/csi-node-driver-registrar", "v2.14.0-eks-1-34-1", 14_892_207},
	{awsRegistry + "/eks/livenessprobe", "v2.16.0-eks-1-34-1", 14_012_650},
	{"public.ecr.aws/aws-observability/aws-for-fluent-bit", "2.32.5", 120_334_981},
	{"quay.io/prometheus/node-exporter", "v1.9.1", 12_547_004},
	{"registry.k8s.io/kube-state-metrics/kube-state-metrics", "v2.16.0", 19_118_442},
	{"docker.io/datadog/agent", "7.69.3", 508_337_120},
	{"registry.k8s.io/ingress-nginx/controller", "v1.13.1", 119_701_338},
	{"quay.io/jetstack/cert-manager-controller", "v1.18.2", 21_900_531},
	{"ghcr.io/external-secrets/external-secrets", "v0.19.2", 43_650_877},
	{"docker.io/grafana/alloy", "v1.10.2", 187_223_019},
	{"docker.io/istio/proxyv2", "1.27.0", 96_005_412},
	{"registry.k8s.io/metrics-server/metrics-server", "v0.8.0", 20_342_193},
	{"public.ecr.aws/karpenter/controller", "1.6.2", 52_771_906},
}

// nodeImages are n images as a kubelet reports them: each by digest and by
// tag, the largest first. The infra images, then the teams' service images
// (several versions each, as rollouts leave them behind), cut to the n
// largest.
func nodeImages(n int) []corev1.ContainerImage {
	if n <= 0 {
		return nil
	}
	var all []corev1.ContainerImage
	add := func(repo, tag string, size int64) {
		all = append(all, corev1.ContainerImage{
			Names:     []string{repo + "@sha256:" + digestOf(repo+":"+tag), repo + ":" + tag},
			SizeBytes: size,
		})
	}
	for _, im := range infraImages {
		add(im.repo, im.tag, im.size)
	}
	for i := 0; len(all) < n+len(infraImages); i++ {
		team, app := realTeams[i%len(realTeams)], realApps[(i/len(realTeams))%len(realApps)]
		tag := fmt.Sprintf("v1.%d.%d-%s", (i*7)%40, i%10, hashOf(fmt.Sprint("image", i)).hex(7))
		add(realRegistry+"/"+team+"/"+app, tag, 60_000_000+int64(hashOf(tag).n(0, 840))*1_000_000+int64(hashOf(tag).n(1, 1_000_000)))
	}
	slices.SortStableFunc(all, func(a, b corev1.ContainerImage) int { return cmp.Compare(b.SizeBytes, a.SizeBytes) })
	return all[:n]
}

// hash is the SHA-256 of a seed: the source of every made-up value.
type hash [sha256.Size]byte

func hashOf(seed string) hash { return sha256.Sum256([]byte(seed)) }

// n is a number in [0, mod) taken from the hash's i-th 4 bytes (i < 8).
func (h hash) n(i, mod int) int {
	return int(binary.BigEndian.Uint32(h[4*i:]) % uint32(mod))
}

// hex is the first n hex digits of the hash, extended by hashing again.
func (h hash) hex(n int) string {
	s := hex.EncodeToString(h[:])
	for len(s) < n {
		h = sha256.Sum256(h[:])
		s += hex.EncodeToString(h[:])
	}
	return s[:n]
}

func digestOf(s string) string { return hashOf(s).hex(64) }

// uuidOf is a UUID-shaped hex string derived from s.
func uuidOf(s string) string {
	x := hashOf(s).hex(32)
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:]
}

func dashed(ip string) string { return strings.ReplaceAll(ip, ".", "-") }

func lastOctet(ip string) string { return ip[strings.LastIndex(ip, ".")+1:] }

func intOrName(name string) intstr.IntOrString { return intstr.FromString(name) }
