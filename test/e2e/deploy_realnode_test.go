package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/test/harness"
)

// realNodeReadyWithin bounds how long NATS and the five services may take to
// become Ready on the real node after an apply (measured: 7-20 s; the
// bound leaves room for a loaded CI machine).
const realNodeReadyWithin = 3 * time.Minute

// TestDeployOnRealNode installs opswire as users do, onto a real node that
// runs its pods: the images of `make images` imported into the node's
// containerd, then `kubectl apply -k deploy/overlays/dev` (the Secret from
// deploy/make-secret.sh), and later `helm install` of the chart. Every pod of
// opswire and NATS must become Ready under the namespace's Pod Security
// "restricted" enforcement, with the deployed probes, read-only root,
// ConfigMap, Secret, Services, ServiceAccounts and RBAC; then a fake node
// of the same cluster filled to the deployed maxPods is cordoned by the
// deployed cordon Deployment, and the card reaches a fake Feishu that the
// notifier pod calls over the pod network.
func TestDeployOnRealNode(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	start := time.Now()
	mk := exec.Command("make", "--no-print-directory", "-C", root, "images", "IMAGE_PLATFORMS=linux/amd64",
		"VERSION=dev", "IMAGE_DIR="+filepath.Join(tmp, "images"), "IMAGE_BIN="+filepath.Join(tmp, "bin"))
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make images: %v\n%s", err, out)
	}
	archives, err := filepath.Glob(filepath.Join(tmp, "images", "*.oci.tar"))
	if err != nil || len(archives) != len(harness.Services) {
		t.Fatalf("make images wrote %v (%v); want one archive per service", archives, err)
	}
	t.Logf("make images (five services, linux/amd64): %s", time.Since(start).Round(time.Second))

	rn := harness.StartRealNode(t, archives...)
	// The fake Feishu listens on the node's address: the notifier's pod
	// reaches the host there, not on its own loopback.
	l, err := net.Listen("tcp", harness.RealNodeIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	bot := feishutest.NewServerOn(l)
	t.Cleanup(bot.Close)
	const botToken, botSecret = "realnode-bot-5c2e", "realnode-bot-secret-81d0"
	botURL := bot.AddBot(botToken, feishutest.Bot{Secret: botSecret})

	t.Run("kubectl apply -k deploy/overlays/dev", func(t *testing.T) {
		rn.HostPathPV(t, "realnode-kustomize-nats-0", "5Gi", 1000)
		// The README's install, command by command.
		applied := time.Now()
		shell(t, rn, root, "kubectl apply -f deploy/base/namespace.yaml")
		shell(t, rn, root, "./deploy/make-secret.sh '"+botURL+"' '"+botSecret+"' | kubectl apply -f -")
		shell(t, rn, root, "kubectl apply -k deploy/overlays/dev")
		waitOpswireReady(t, rn, 6, applied)
		checkRestrictedEnforced(t, rn.Client)
		cordonedWithCard(t, rn.Client, bot, botToken, "rn-fake-kustomize")
		seedConfigSaysWhyNoLeader(t, rn, filepath.Join(tmp, "bin", "linux_amd64"))

		rn.Kubectl(t, "delete", "-k", filepath.Join(root, "deploy", "overlays", "dev"), "--wait=true", "--timeout=3m")
		removeFakeNode(t, rn.Client, "rn-fake-kustomize")
	})

	t.Run("helm install", func(t *testing.T) {
		rn.HostPathPV(t, "realnode-helm-nats-0", "5Gi", 1000)
		// The README's install with Helm: the Namespace with its labels first.
		installed := time.Now()
		shell(t, rn, root, "kubectl apply -f deploy/base/namespace.yaml")
		shell(t, rn, root, helmBin(t)+" install opswire deploy/helm/opswire -n opswire --set secrets.feishuURL='"+botURL+
			"' --set secrets.feishuSecret='"+botSecret+"'")
		// The chart's default: two replicas per service.
		waitOpswireReady(t, rn, 11, installed)
		checkRestrictedEnforced(t, rn.Client)
		cordonedWithCard(t, rn.Client, bot, botToken, "rn-fake-helm")
	})
}

// shell runs a documented command line with kubectl pointed at the node.
func shell(t *testing.T, rn *harness.RealNode, dir, line string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+rn.Kubeconfig)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
}

// waitOpswireReady waits for want pods in namespace opswire, every one Ready,
// and logs how long after since they took.
func waitOpswireReady(t *testing.T, rn *harness.RealNode, want int, since time.Time) {
	t.Helper()
	ctx := context.Background()
	var last string
	deadline := time.Now().Add(realNodeReadyWithin)
	for {
		pods, err := rn.Client.CoreV1().Pods("opswire").List(ctx, metav1.ListOptions{})
		if err == nil {
			ready, states := 0, []string{}
			for _, p := range pods.Items {
				if podReady(&p) {
					ready++
				}
				states = append(states, p.Name+"="+podState(&p))
			}
			last = strings.Join(states, " ")
			if ready == want && len(pods.Items) == want {
				t.Logf("%d opswire and NATS pods Ready %s after the install", want, time.Since(since).Round(100*time.Millisecond))
				return
			}
		}
		if time.Now().After(deadline) {
			events, _ := rn.KubectlErr("-n", "opswire", "get", "events", "--sort-by=.lastTimestamp")
			t.Fatalf("not %d Ready pods within %v: %s\n%s", want, realNodeReadyWithin, last, tailLines(events, 30))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podState is the phase, or the waiting reason of a container that waits.
func podState(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			return w.Reason
		}
	}
	return string(p.Status.Phase)
}

// checkRestrictedEnforced proves that what became Ready ran under the
// "restricted" Pod Security Standard: the namespace enforces it, and a pod
// that breaks it is refused there.
func checkRestrictedEnforced(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	ns, err := c.CoreV1().Namespaces().Get(ctx, "opswire", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Fatalf("namespace opswire enforces %q, want restricted", got)
	}
	privileged := true
	pod := harness.Pod("opswire", "psa-probe", harness.RealNodeName)
	pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &privileged}
	_, err = c.CoreV1().Pods("opswire").Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "restricted") {
		t.Fatalf("a privileged pod in namespace opswire: %v; want refused by Pod Security restricted", err)
	}
}

// cordonedWithCard fills a fake node to the deployed maxPods (100) and waits
// for the deployed cordon to cordon it and the card to reach Feishu.
func cordonedWithCard(t *testing.T, c kubernetes.Interface, bot *feishutest.Server, botToken, node string) {
	t.Helper()
	ctx := context.Background()
	harness.CreateNode(t, c, harness.Node(node, nil))
	ns := node + "-pods"
	harness.CreateNamespace(t, c, ns)
	start := time.Now()
	for i := 0; i < 100; i++ {
		harness.CreatePod(t, c, harness.Pod(ns, fmt.Sprintf("web-%d", i), node))
	}
	harness.Eventually(t, 60*time.Second, node+" cordoned by the deployed cordon", func() bool {
		n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return err == nil && n.Spec.Unschedulable && n.Annotations["opswire.io/autocordon"] != ""
	})
	t.Logf("%s cordoned %s after its 100th pod", node, time.Since(start).Round(100*time.Millisecond))
	harness.Eventually(t, 60*time.Second, "a card naming "+node, func() bool {
		for _, card := range bot.Cards(botToken) {
			if strings.Contains(card.Text(), node) {
				return true
			}
		}
		return false
	})
	if v := bot.Count(feishutest.CodeSignMismatch); v != 0 {
		t.Errorf("%d cards were refused for a bad signature", v)
	}
}

// removeFakeNode deletes a fake node and its pods (no kubelet confirms their
// end: grace period 0), so that it counts in no later cap.
func removeFakeNode(t *testing.T, c kubernetes.Interface, node string) {
	t.Helper()
	ctx := context.Background()
	zero := int64(0)
	ns := node + "-pods"
	if err := c.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// seedConfigSaysWhyNoLeader pastes the seed's config.yml into the deployed
// ConfigMap. Its Lease (ops-resource-controller-<service> in kube-system) is
// outside what deploy/'s RBAC grants, so no replica can lead: --check-config
// with the service's own credentials names it before the rollout, and after
// it every new replica's /readyz and an Event on its pod say why.
func seedConfigSaysWhyNoLeader(t *testing.T, rn *harness.RealNode, bins string) {
	t.Helper()
	ctx := context.Background()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	seed := filepath.Join(root, "shared", "config", "testdata", "seed.yml")
	leased := []string{"watcher", "cordon", "cleanup", "report"}
	for _, svc := range leased {
		cmd := exec.Command(filepath.Join(bins, "opswire-"+svc), "--check-config", "--config", seed,
			"--kubeconfig", rn.ServiceAccountKubeconfig(t, "opswire", "opswire-"+svc))
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), "controller.leaseLockNamespace") ||
			!strings.Contains(string(out), "kube-system/ops-resource-controller-"+svc) {
			t.Fatalf("opswire-%s --check-config with the seed's config and its deployed credentials: exit %d (%v), want 2 naming the Lease:\n%s",
				svc, code, err, out)
		}
	}

	cms, err := rn.Client.CoreV1().ConfigMaps("opswire").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var name string
	for _, cm := range cms.Items {
		if strings.HasPrefix(cm.Name, "opswire-config-") {
			name = cm.Name
		}
	}
	if name == "" {
		t.Fatal("no opswire-config ConfigMap deployed")
	}
	rollout := time.Now()
	shell(t, rn, root, "kubectl -n opswire create configmap "+name+" --from-file=config.yml="+seed+
		" --dry-run=client -o yaml | kubectl apply -f -")
	shell(t, rn, root, "kubectl -n opswire rollout restart deployment")

	for _, svc := range leased {
		want := "kube-system/ops-resource-controller-" + svc
		var pod corev1.Pod
		harness.Eventually(t, 2*time.Minute, "a new opswire-"+svc+" replica whose /readyz names "+want, func() bool {
			pods, err := rn.Client.CoreV1().Pods("opswire").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=opswire-" + svc})
			if err != nil {
				return false
			}
			for _, p := range pods.Items {
				if p.CreationTimestamp.Time.Before(rollout.Add(-time.Second)) || p.Status.PodIP == "" {
					continue
				}
				code, body := httpGet("http://" + p.Status.PodIP + ":8080/readyz")
				if code == 503 && strings.Contains(body, "cannot lead") && strings.Contains(body, want) {
					pod = p
					return true
				}
			}
			return false
		})
		harness.Eventually(t, 30*time.Second, "an OpswireLeaseRefused Event on "+pod.Name, func() bool {
			evs, err := rn.Client.CoreV1().Events("opswire").List(ctx, metav1.ListOptions{
				FieldSelector: "involvedObject.name=" + pod.Name + ",reason=OpswireLeaseRefused"})
			return err == nil && len(evs.Items) > 0 && strings.Contains(evs.Items[0].Message, want)
		})
	}
	t.Logf("the seed's config: no leader, and every leased service says why on /readyz and in an Event (%s after the rollout)",
		time.Since(rollout).Round(100*time.Millisecond))
}
