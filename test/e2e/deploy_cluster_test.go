package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/test/harness"
)

// TestDeployOnRealCluster is issue 7's acceptance test. Every overlay is
// rendered and server-side applied to a real kube-apiserver (every object
// must pass the real schemas with strict field validation). Then the five
// service binaries run as processes, each with a token of its own
// ServiceAccount from deploy/ (TokenRequest API) and its own NATS user from
// deploy/'s nats-server configuration, and the whole pipeline has to work:
// cordon, uncordon, cleanup (evicted and stuck pods), restart report, image
// alert and Feishu cards. Finally each identity is refused what it must not do.
func TestDeployOnRealCluster(t *testing.T) {
	cp := harness.StartControlPlane(t)
	d := harness.StartDeployed(t, cp)
	n, pw := d.NATS, d.Passwords

	secret := map[string]string{"feishu-url": "https://feishu.invalid/hook", "feishu-secret": ""}
	for u, p := range pw {
		secret["nats-"+u+"-password"] = p
	}
	dev := harness.KustomizeBuild(t, deployPath(t, "overlays", "dev"))
	for _, ov := range []struct {
		name string
		objs []*unstructured.Unstructured
	}{
		// production first; dev last, so dev is what the pipeline runs on.
		{"production", harness.KustomizeBuild(t, deployPath(t, "overlays", "production"))},
		{"dev+cleanup-remove-finalizers", harness.KustomizeBuild(t, finalizerOverlay(t))},
		{"dev", dev},
	} {
		// volumeClaimTemplates are immutable: switching overlays means
		// recreating the NATS StatefulSet (docs/deploy.md says so).
		if err := cp.Client.AppsV1().StatefulSets("opswire").Delete(context.Background(), "nats", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		start := time.Now()
		harness.ServerSideApply(t, cp.Config, append(ov.objs, secretFromTemplate(t, secret)))
		t.Logf("applied %s: %d objects in %v", ov.name, len(ov.objs)+1, time.Since(start).Round(time.Millisecond))
	}
	cr, err := cp.Client.RbacV1().ClusterRoles().Get(context.Background(), "opswire-cleanup", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range cr.Rules {
		for _, v := range r.Verbs {
			if v == "patch" && strings.Join(r.Resources, ",") == "pods" {
				t.Fatalf("re-applying dev did not take back the component's pod patch rule: %+v", cr.Rules)
			}
		}
	}

	// The deployed config.yml, with intervals shortened for the test.
	cm := harness.FindByPrefix(dev, "ConfigMap", "opswire-config-")
	deployed, _, _ := unstructured.NestedString(cm.Object, "data", "config.yml")
	cfgPath := harness.WriteConfig(t, testConfigFrom(t, deployed))

	bot := feishutest.NewServer()
	t.Cleanup(bot.Close)
	botSecret := "deploy-bot-secret-9a1c"
	botURL := bot.AddBot("deploy-bot-3e7f", feishutest.Bot{Secret: botSecret})

	kubeconfigs := map[string]string{}
	procs := map[string]*harness.Process{}
	for _, svc := range harness.Services {
		o := d.Service(t, svc, cfgPath)
		kubeconfigs[svc] = o.Kubeconfig
		if svc == "notifier" {
			o.Env = append(o.Env, "OPSWIRE_FEISHU_URL="+botURL, "OPSWIRE_FEISHU_SECRET="+botSecret)
			// It runs without one; the refusals below check its ServiceAccount anyway.
			kubeconfigs[svc] = cp.ServiceAccountKubeconfig(t, "opswire", "opswire-"+svc)
		}
		procs[svc] = harness.StartService(t, svc, o)
	}
	for _, svc := range harness.Services {
		procs[svc].WaitReady(t, 60*time.Second)
	}

	// The audit user watches OPS live (it may not create consumers).
	audit := connectAs(t, n, "audit", pw["audit"])
	ops := subscribeLive(t, audit.nc, "ops.>")

	c := cp.Client
	ctx := context.Background()
	harness.CreateNamespace(t, c, "shop")
	harness.CreateNode(t, c, harness.Node("deploy-node-a", nil))
	for i := 0; i < 3; i++ { // maxPods 3
		harness.CreatePod(t, c, harness.Pod("shop", fmt.Sprintf("web-%d", i), "deploy-node-a"))
	}
	ops.WaitFor(t, 30*time.Second, "cordon", harness.Subject("ops.default.cordon.cordoned.deploy-node-a"))
	// Journaled first, under the cordon user's own subjects (ops.*.cordon.>).
	ops.WaitFor(t, 5*time.Second, "the cordon's intent", harness.Subject("ops.default.cordon.intent.deploy-node-a"))
	zero := int64(0)
	for i := 0; i < 2; i++ { // down to minPods 1
		if err := c.CoreV1().Pods("shop").Delete(ctx, fmt.Sprintf("web-%d", i), metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
	}
	ops.WaitFor(t, 30*time.Second, "uncordon", harness.Subject("ops.default.cordon.uncordoned.deploy-node-a"))

	evicted := harness.CreatePod(t, c, harness.Pod("shop", "evicted-0", "deploy-node-a"))
	harness.SetPodStatus(t, c, evicted, func(s *corev1.PodStatus) {
		s.Phase, s.Reason, s.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
	})
	ops.WaitFor(t, 30*time.Second, "evicted pod deleted", harness.Subject("ops.default.cleanup.deleted.shop.evicted-0"))
	// Journaled first, under the cleanup user's own subjects (ops.*.cleanup.>).
	ops.WaitFor(t, 5*time.Second, "the deletion's intent", harness.Subject("ops.default.cleanup.intent.shop.evicted-0"))

	harness.CreatePod(t, c, harness.Pod("shop", "stuck-0", "deploy-node-a"))
	one := int64(1)
	if err := c.CoreV1().Pods("shop").Delete(ctx, "stuck-0", metav1.DeleteOptions{GracePeriodSeconds: &one}); err != nil {
		t.Fatal(err)
	}
	ops.WaitFor(t, 30*time.Second, "stuck pod force-deleted", harness.Subject("ops.default.cleanup.forcedeleted.shop.stuck-0"))

	crashy := harness.CreatePod(t, c, harness.Pod("shop", "crashy-0", "deploy-node-a"))
	harness.SetPodStatus(t, c, crashy, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: "registry.invalid/app:1", RestartCount: 12,
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}
	})
	ops.WaitFor(t, 30*time.Second, "restart report listing crashy-0", func(m harness.Msg) bool {
		return m.Subject == "ops.default.report.restarts" && strings.Contains(string(m.Data), `"crashy-0"`)
	})

	harness.SetNodeStatus(t, c, "deploy-node-a", func(s *corev1.NodeStatus) {
		s.Images = []corev1.ContainerImage{{Names: []string{"registry.invalid/big:1"}, SizeBytes: 3 << 30}}
	})
	ops.WaitFor(t, 30*time.Second, "image alert", harness.Subject("ops.default.report.images.deploy-node-a"))

	// Every situation reached Feishu as a signed card.
	for _, want := range []string{"deploy-node-a", "evicted-0", "stuck-0", "crashy-0"} {
		harness.Eventually(t, 30*time.Second, "a card naming "+want, func() bool {
			for _, card := range bot.Cards("deploy-bot-3e7f") {
				if strings.Contains(card.Text(), want) {
					return true
				}
			}
			return false
		})
	}
	if v := bot.Count(feishutest.CodeSignMismatch); v != 0 {
		t.Errorf("%d cards were refused for a bad signature", v)
	}

	t.Run("RBAC refusals", func(t *testing.T) {
		deployRBACRefusals(t, cp, kubeconfigs)
	})
	t.Run("NATS refusals", func(t *testing.T) {
		deployNATSRefusals(t, n, pw)
	})
	t.Run("KUBE consumers", func(t *testing.T) {
		deployKubeConsumerIsolation(t, n, pw)
	})
	// No service hit a permission it lacks while doing its job.
	for svc, p := range procs {
		if logs := p.Logs(); strings.Contains(strings.ToLower(logs), "permissions violation") || strings.Contains(logs, "forbidden") {
			t.Errorf("%s logged a refused permission:\n%s", svc, grepLines(logs, "ermission", "forbidden"))
		}
	}
	for svc, p := range procs {
		if code := p.Stop(); code != 0 {
			t.Errorf("%s exited %d on SIGTERM", svc, code)
		}
	}
}

// testConfigFrom is the deployed config.yml with the intervals and
// thresholds of a test (the controller section, and with it the Lease names
// the RBAC grants, stays as deployed).
func testConfigFrom(t *testing.T, deployed string) string {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(deployed), &doc); err != nil {
		t.Fatal(err)
	}
	var over map[string]any
	err := yaml.Unmarshal([]byte(`
controller: {leaseDuration: 3s, renewDeadline: 2s, retryPeriod: 200ms}
autoCordon: {interval: 2s, maxPods: 3, minPods: 1, maxCordonedPercent: 100}
delException: {interval: 2s, terminatingTimeout: 1s}
sendReport: {schedule: "@every 2s", total: 5}
imageAlert: {maxBytes: 1073741824, cooldown: 1m}
notifier: {groupWait: 200ms, groupInterval: 1s, retryInitial: 100ms, ackWait: 5s, requestTimeout: 3s}
`), &over)
	if err != nil {
		t.Fatal(err)
	}
	deepMerge(doc, over)
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// deployRBACRefusals: each ServiceAccount token is refused what its service
// must not do, by the real authorizer.
func deployRBACRefusals(t *testing.T, cp *harness.ControlPlane, kubeconfigs map[string]string) {
	ctx := context.Background()
	victim := harness.CreatePod(t, cp.Client, harness.Pod("shop", "victim-0", "deploy-node-a"))
	patch := []byte(`{"metadata":{"labels":{"opswire-e2e":"x"}}}`)
	cases := []struct {
		svc, what string
		call      func(kc string) error
	}{
		{"report", "delete a pod", func(kc string) error {
			return kubeClient(t, kc).CoreV1().Pods("shop").Delete(ctx, victim.Name, metav1.DeleteOptions{})
		}},
		{"report", "list pods", func(kc string) error {
			_, err := kubeClient(t, kc).CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"watcher", "patch a node", func(kc string) error {
			_, err := kubeClient(t, kc).CoreV1().Nodes().Patch(ctx, "deploy-node-a", types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}},
		{"watcher", "delete a pod", func(kc string) error {
			return kubeClient(t, kc).CoreV1().Pods("shop").Delete(ctx, victim.Name, metav1.DeleteOptions{})
		}},
		{"cordon", "delete a pod", func(kc string) error {
			return kubeClient(t, kc).CoreV1().Pods("shop").Delete(ctx, victim.Name, metav1.DeleteOptions{})
		}},
		{"cordon", "delete a node", func(kc string) error {
			return kubeClient(t, kc).CoreV1().Nodes().Delete(ctx, "deploy-node-a", metav1.DeleteOptions{})
		}},
		{"cleanup", "patch a node", func(kc string) error {
			_, err := kubeClient(t, kc).CoreV1().Nodes().Patch(ctx, "deploy-node-a", types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}},
		{"cleanup", "patch a pod (finalizer removal is off)", func(kc string) error {
			_, err := kubeClient(t, kc).CoreV1().Pods("shop").Patch(ctx, victim.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}},
		{"cleanup", "read a Secret", func(kc string) error {
			_, err := kubeClient(t, kc).CoreV1().Secrets("opswire").Get(ctx, "opswire-secrets", metav1.GetOptions{})
			return err
		}},
		{"cordon", "read the cleanup Lease", func(kc string) error {
			_, err := kubeClient(t, kc).CoordinationV1().Leases("opswire").Get(ctx, "opswire-cleanup", metav1.GetOptions{})
			return err
		}},
		{"notifier", "list pods", func(kc string) error {
			_, err := kubeClient(t, kc).CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"notifier", "read a Lease", func(kc string) error {
			_, err := kubeClient(t, kc).CoordinationV1().Leases("opswire").Get(ctx, "opswire-notifier", metav1.GetOptions{})
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.svc+" cannot "+tc.what, func(t *testing.T) {
			forbidden(t, tc.svc+": "+tc.what, tc.call(kubeconfigs[tc.svc]))
		})
	}
	if _, err := cp.Client.CoreV1().Pods("shop").Get(ctx, victim.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the victim pod is gone: %v", err)
	}
}

// deployNATSRefusals: each NATS user is refused the subjects it must not
// publish or read; what is refused is never stored, and the notifier's
// durable consumer of another cluster name is left untouched.
func deployNATSRefusals(t *testing.T, n *harness.NATS, pw map[string]string) {
	// A durable consumer as the notifier makes it for a cluster named
	// prod-eu: the audit user's and actors' refusals below must not depend on
	// the cluster or receiver name.
	notifier := connectAs(t, n, "notifier", pw["notifier"])
	njs, err := jetstream.New(notifier.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const durable = "opswire-notifier-prod-eu-feishu"
	if _, err := njs.CreateConsumer(ctx, "OPS", jetstream.ConsumerConfig{
		Durable: durable, FilterSubject: "ops.prod-eu.>", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 20,
	}); err != nil {
		t.Fatalf("the notifier creates its consumer: %v", err)
	}
	// Its batched read of delivered records (one direct get for many keys,
	// on the stream's subject without a key) is answered, not refused.
	if _, err := njs.KeyValue(ctx, "opswire-notifier-delivered"); errors.Is(err, jetstream.ErrBucketNotFound) {
		_, err = njs.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "opswire-notifier-delivered"})
		if err != nil {
			t.Fatalf("the notifier's delivered-record bucket: %v", err)
		}
	} else if err != nil {
		t.Fatalf("the notifier's delivered-record bucket: %v", err)
	}
	batch := `{"multi_last":["$KV.opswire-notifier-delivered.feishu.a","$KV.opswire-notifier-delivered.feishu.b"],"batch":2}`
	if m, err := notifier.nc.Request("$JS.API.DIRECT.GET.KV_opswire-notifier-delivered", []byte(batch), 5*time.Second); err != nil {
		t.Errorf("the notifier's batched read of delivered records: %v", err)
	} else if st := m.Header.Get("Status"); st != "404" && st != "204" && m.Header.Get("Nats-Subject") == "" {
		t.Errorf("the notifier's batched read of delivered records answered status %s %s", st, m.Header.Get("Description"))
	}
	for _, tc := range deployNATSRefusalCases(durable) {
		verb := "publish"
		if tc.subscribe {
			verb = "subscribe"
		}
		t.Run(tc.user+" cannot "+verb+" "+tc.subject, func(t *testing.T) {
			u := connectAs(t, n, tc.user, pw[tc.user])
			var err error
			if tc.subscribe {
				_, err = u.nc.SubscribeSync(tc.subject)
			} else {
				// With a reply subject, as a JetStream API request: the
				// server answers nothing, it refuses the publish.
				err = u.nc.PublishRequest(tc.subject, u.nc.NewInbox(), []byte(`{"forged":true}`))
			}
			if err == nil {
				err = u.nc.Flush()
			}
			if err != nil {
				t.Fatal(err)
			}
			u.violation(t, tc.subject)
		})
	}
	// Nothing forged reached the streams (read as the audit user, by direct get).
	audit := connectAs(t, n, "audit", pw["audit"])
	js, err := jetstream.New(audit.nc)
	if err != nil {
		t.Fatal(err)
	}
	for stream, subj := range map[string]string{"KUBE": "kube.default.node.forged", "OPS": "ops.default.cordon.cordoned.forged"} {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatalf("audit reads stream %s: %v", stream, err)
		}
		if _, err := s.GetLastMsgForSubject(ctx, subj); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Errorf("a forged message on %s in %s: want not found, got %v", subj, stream, err)
		}
	}
	// The audit user does read what is stored (its read path).
	if s, err := js.Stream(ctx, "OPS"); err != nil {
		t.Fatal(err)
	} else if _, err := s.GetLastMsgForSubject(ctx, "ops.default.cordon.cordoned.deploy-node-a"); err != nil {
		t.Errorf("audit cannot read a stored OPS message: %v", err)
	}
	// The durable consumer is untouched: same filter, nothing delivered.
	c, err := njs.Consumer(ctx, "OPS", durable)
	if err != nil {
		t.Fatalf("consumer %s after the refusals: %v", durable, err)
	}
	if info := c.CachedInfo(); info.Config.FilterSubject != "ops.prod-eu.>" || info.Delivered.Consumer != 0 || info.NumWaiting != 0 {
		t.Errorf("consumer %s was changed or pulled from: filter %q, delivered %d, waiting %d",
			durable, info.Config.FilterSubject, info.Delivered.Consumer, info.NumWaiting)
	}
	for _, stream := range []string{"KUBE", "OPS"} {
		if _, err := js.Stream(ctx, stream); err != nil {
			t.Errorf("stream %s after the refusals: %v", stream, err)
		}
	}
}

type natsRefusal struct {
	user, subject string
	subscribe     bool
}

// deployNATSRefusalCases: what each user must be refused; durable is a
// notifier consumer of another cluster name.
func deployNATSRefusalCases(durable string) []natsRefusal {
	pub := func(user string, subjects ...string) []natsRefusal {
		var out []natsRefusal
		for _, s := range subjects {
			out = append(out, natsRefusal{user: user, subject: s})
		}
		return out
	}
	sub := func(user string, subjects ...string) []natsRefusal {
		out := pub(user, subjects...)
		for i := range out {
			out[i].subscribe = true
		}
		return out
	}
	var cases []natsRefusal
	// Data subjects: each service publishes only its own.
	cases = append(cases, pub("cleanup", "kube.default.node.forged")...)
	cases = append(cases, pub("cordon", "kube.default.pod.shop.forged", "ops.default.cleanup.deleted.shop.forged")...)
	cases = append(cases, pub("report", "ops.default.cordon.cordoned.forged")...)
	cases = append(cases, pub("watcher", "ops.default.cordon.cordoned.forged")...)
	cases = append(cases, pub("notifier", "ops.default.report.restarts", "kube.default.node.forged")...)
	cases = append(cases, sub("cleanup", "ops.>")...)
	cases = append(cases, sub("notifier", "kube.>")...)
	// Streams: only the watcher creates and updates KUBE and OPS; nobody deletes or purges them.
	cases = append(cases, pub("cordon", "$JS.API.STREAM.DELETE.OPS", "$JS.API.STREAM.UPDATE.OPS", "$JS.API.STREAM.DELETE.KUBE")...)
	cases = append(cases, pub("cleanup", "$JS.API.STREAM.UPDATE.KUBE", "$JS.API.STREAM.DELETE.KUBE")...)
	cases = append(cases, pub("report", "$JS.API.STREAM.CREATE.OPS", "$JS.API.STREAM.DELETE.KUBE")...)
	cases = append(cases, pub("watcher", "$JS.API.STREAM.DELETE.KUBE", "$JS.API.STREAM.PURGE.OPS")...)
	cases = append(cases, pub("notifier", "$JS.API.STREAM.UPDATE.OPS", "$JS.API.STREAM.DELETE.KUBE")...)
	// Consumers: no actor touches OPS consumers (the notifier's), none
	// deletes or lists a KUBE consumer.
	for _, actor := range []string{"watcher", "cordon", "cleanup", "report"} {
		cases = append(cases, pub(actor,
			"$JS.API.CONSUMER.DELETE.KUBE.someone-else",
			"$JS.API.CONSUMER.NAMES.KUBE",
			"$JS.API.CONSUMER.LIST.KUBE",
			"$JS.API.CONSUMER.DELETE.OPS."+durable,
			"$JS.API.CONSUMER.DELETE.OPS.opswire-notifier-default-feishu",
			"$JS.API.CONSUMER.MSG.NEXT.OPS."+durable,
			"$JS.API.CONSUMER.CREATE.OPS."+durable,
			"$JS.API.CONSUMER.CREATE.OPS."+durable+".ops.prod-eu.cordon",
			"$JS.API.CONSUMER.DURABLE.CREATE.OPS."+durable,
			"$JS.API.CONSUMER.CREATE.OPS",
			// KUBE: only nats.go's named create forms (no server-named
			// legacy ephemeral, no legacy durable that never expires).
			"$JS.API.CONSUMER.CREATE.KUBE",
			"$JS.API.CONSUMER.DURABLE.CREATE.KUBE.forever",
		)...)
	}
	// The create subject pins the filter: cordon only on nodes, the
	// watcher, cleanup and report only under kube.* (one filter: their
	// mirrors read every kind). cleanup and report keep the form without a
	// filter for one release (what their previous build uses: a rolling
	// upgrade); the watcher and cordon never had it.
	cases = append(cases, pub("cordon", "$JS.API.CONSUMER.CREATE.KUBE.c1", "$JS.API.CONSUMER.CREATE.KUBE.c1.kube.default.pod.>",
		"$JS.API.CONSUMER.CREATE.KUBE.c1.kube.>")...)
	cases = append(cases, pub("watcher", "$JS.API.CONSUMER.CREATE.KUBE.w1")...)
	for _, actor := range []string{"watcher", "cleanup", "report"} {
		cases = append(cases, pub(actor, "$JS.API.CONSUMER.CREATE.KUBE.w1.kube.>")...)
	}
	// audit: publishes nothing but read-only API requests.
	cases = append(cases, pub("audit",
		"ops.default.cordon.cordoned.forged", "kube.default.node.forged", "ctl.default.report.run",
		"notify.default.feishu.forged", "dlq.default.forged",
		"$JS.API.STREAM.PURGE.OPS", "$JS.API.STREAM.DELETE.KUBE", "$JS.API.STREAM.UPDATE.OPS",
		"$JS.API.STREAM.MSG.DELETE.OPS",
		"$JS.API.CONSUMER.CREATE.OPS",
		"$JS.API.CONSUMER.CREATE.OPS.audit-view",
		"$JS.API.CONSUMER.CREATE.KUBE.audit-view.kube.default",
		"$JS.API.CONSUMER.CREATE.OPS."+durable,
		"$JS.API.CONSUMER.CREATE.OPS."+durable+".ops.prod-eu.cordon",
		"$JS.API.CONSUMER.DURABLE.CREATE.OPS."+durable,
		"$JS.API.CONSUMER.MSG.NEXT.OPS."+durable,
		"$JS.API.CONSUMER.MSG.NEXT.OPS.opswire-notifier-default-feishu",
		"$JS.API.CONSUMER.DELETE.OPS."+durable,
		"$JS.API.CONSUMER.DELETE.KUBE.someone-else",
		"$JS.API.CONSUMER.PAUSE.OPS."+durable,
		"$JS.API.CONSUMER.UNPIN.OPS."+durable,
		"$JS.ACK.OPS."+durable+".1.1.1.1700000000000000000.0",
		"$JS.FC.OPS.forged",
	)...)
	// Inboxes: each user reads only its own replies.
	for _, u := range []string{"watcher", "cordon", "cleanup", "report", "notifier", "audit"} {
		other := "notifier"
		if u == "notifier" {
			other = "watcher"
		}
		cases = append(cases, sub(u, "_INBOX.>", "_INBOX_"+other+".>", "_INBOX_"+other+".reply1")...)
	}
	return cases
}

// grepLines returns the lines of s containing any of words.
func grepLines(s string, words ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
