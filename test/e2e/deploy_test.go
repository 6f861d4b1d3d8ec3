package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/test/harness"
)

// rule is one RBAC rule in a comparable form.
type rule struct{ group, resources, verbs, names string }

func rulesOf(t *testing.T, o *unstructured.Unstructured) []rule {
	t.Helper()
	var role rbacv1.ClusterRole // Role and ClusterRole share the rules field
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
		t.Fatal(err)
	}
	var out []rule
	for _, r := range role.Rules {
		out = append(out, rule{strings.Join(r.APIGroups, ","), strings.Join(r.Resources, ","),
			strings.Join(r.Verbs, ","), strings.Join(r.ResourceNames, ",")})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].resources+out[i].verbs < out[j].resources+out[j].verbs })
	return out
}

// TestDeployManifests renders every overlay with the kustomize Go API and
// checks what a reviewer would: least-privilege RBAC rule by rule, never
// cluster-admin, hardened pods with probes and disruption budgets, and a
// config.yml and NATS configuration that load. Applying them to a real API
// server is TestDeployOnRealCluster.
func TestDeployManifests(t *testing.T) {
	lease := func(svc string) []rule {
		names := "opswire-" + svc
		if svc == "cordon" || svc == "cleanup" {
			names += ",opswire-" + svc + "-dryrun" // a dry-run replica's own Lease (docs/actuate.md)
		}
		// events: a replica refused its Lease says why on its own pod.
		return []rule{{"", "events", "create", ""}, {"coordination.k8s.io", "leases", "create", ""}, {"coordination.k8s.io", "leases", "get,update", names}}
	}
	events := rule{"", "events", "create,list,patch", ""}
	cleanupRules := []rule{events, {"", "nodes", "get", ""}, {"", "pods", "get,delete", ""}}
	overlays := []struct {
		name         string
		dir          func(t *testing.T) string
		replicas     int64
		natsReplicas int64
		streams      int
		cleanupRules []rule
	}{
		{"dev", func(t *testing.T) string { return deployPath(t, "overlays", "dev") }, 1, 1, 1, cleanupRules},
		{"production", func(t *testing.T) string { return deployPath(t, "overlays", "production") }, 2, 3, 3, cleanupRules},
		{"dev+cleanup-remove-finalizers", finalizerOverlay, 1, 1, 1,
			[]rule{events, {"", "nodes", "get", ""}, {"", "pods", "get,delete", ""}, {"", "pods", "patch", ""}}},
	}
	for _, ov := range overlays {
		t.Run(ov.name, func(t *testing.T) {
			objs := harness.KustomizeBuild(t, ov.dir(t))
			wantCluster := map[string][]rule{
				"opswire-watcher": {{"", "pods,nodes", "list,watch", ""}},
				"opswire-cordon":  {{"", "events", "create,list,patch", ""}, {"", "nodes", "get,list,patch", ""}, {"", "pods", "list", ""}},
				"opswire-cleanup": ov.cleanupRules,
			}
			wantRoles := map[string][]rule{}
			for _, svc := range []string{"watcher", "cordon", "cleanup", "report"} {
				wantRoles["opswire-"+svc+"-lease"] = lease(svc)
			}
			checkRBAC(t, objs, wantCluster, wantRoles)
			checkWorkloads(t, objs, ov.replicas, ov.natsReplicas)
			checkConfigs(t, objs, ov.streams)
		})
	}
}

// TestDeployCertManager: the cert-manager component renders on top of the
// production overlay and asks for the Secret nats-tls with the names
// deploy/make-certs.sh puts in its certificate (either source fits the
// StatefulSet and the services).
func TestDeployCertManager(t *testing.T) {
	dir := t.TempDir()
	rel := func(p string) string {
		r, err := filepath.Rel(dir, p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- " +
		rel(deployPath(t, "overlays", "production")) + "\ncomponents:\n- " + rel(deployPath(t, "components", "nats-tls-cert-manager")) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	objs := harness.KustomizeBuild(t, dir)
	cert := harness.FindObj(objs, "Certificate", "nats-tls")
	if cert == nil {
		t.Fatal("no Certificate nats-tls rendered")
	}
	if cert.GetNamespace() != "opswire" {
		t.Errorf("Certificate nats-tls in namespace %q", cert.GetNamespace())
	}
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	usages, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "usages")
	pemBytes, err := os.ReadFile(filepath.Join(makeCerts(t, ""), "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		t.Fatal("make-certs.sh: tls.crt is not PEM")
	}
	x, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(dnsNames)
	script := append([]string(nil), x.DNSNames...)
	sort.Strings(script)
	if secretName != "nats-tls" || !reflect.DeepEqual(dnsNames, script) {
		t.Errorf("Certificate: secret %q, names %v; want nats-tls and make-certs.sh's names %v", secretName, dnsNames, script)
	}
	if !strings.Contains(strings.Join(usages, ","), "server auth") || !strings.Contains(strings.Join(usages, ","), "client auth") {
		t.Errorf("Certificate usages %v: routes need server auth and client auth", usages)
	}
	for _, kind := range []string{"Issuer", "Certificate"} {
		n := 0
		for _, o := range objs {
			if o.GetKind() == kind {
				n++
			}
		}
		if n != 2 {
			t.Errorf("%d %s objects, want 2 (self-signed root and CA)", n, kind)
		}
	}
}

// finalizerOverlay is the dev overlay plus the cleanup-remove-finalizers
// component, as a user would compose it.
func finalizerOverlay(t *testing.T) string {
	dir := t.TempDir()
	rel := func(p string) string { // kustomize refuses absolute paths
		r, err := filepath.Rel(dir, p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- " +
		rel(deployPath(t, "overlays", "dev")) + "\ncomponents:\n- " + rel(deployPath(t, "components", "cleanup-remove-finalizers")) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func checkRBAC(t *testing.T, objs []*unstructured.Unstructured, wantCluster, wantRoles map[string][]rule) {
	t.Helper()
	gotCluster, gotRoles := map[string][]rule{}, map[string][]rule{}
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole":
			gotCluster[o.GetName()] = rulesOf(t, o)
		case "Role":
			if o.GetNamespace() != "opswire" {
				t.Errorf("Role %s is in %q, want opswire (controller.leaseLockNamespace)", o.GetName(), o.GetNamespace())
			}
			gotRoles[o.GetName()] = rulesOf(t, o)
		case "ClusterRoleBinding", "RoleBinding":
			var b rbacv1.RoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
				t.Fatal(err)
			}
			if b.RoleRef.Name == "cluster-admin" || b.RoleRef.Name == "admin" || b.RoleRef.Name == "edit" {
				t.Errorf("%s %s binds %s", o.GetKind(), o.GetName(), b.RoleRef.Name)
			}
			if b.RoleRef.Name != b.Name {
				t.Errorf("%s %s binds %s (each binding binds its own role)", o.GetKind(), o.GetName(), b.RoleRef.Name)
			}
			if len(b.Subjects) != 1 || b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Namespace != "opswire" ||
				!strings.HasPrefix(b.Name, b.Subjects[0].Name) {
				t.Errorf("%s %s binds %+v, want only its own ServiceAccount", o.GetKind(), o.GetName(), b.Subjects)
			}
			if b.Subjects[0].Name == "opswire-notifier" {
				t.Errorf("the notifier must have no RBAC at all, but %s %s binds it", o.GetKind(), o.GetName())
			}
		}
	}
	for _, c := range []struct {
		kind      string
		got, want map[string][]rule
	}{{"ClusterRole", gotCluster, wantCluster}, {"Role", gotRoles, wantRoles}} {
		for name, want := range c.want {
			sort.Slice(want, func(i, j int) bool { return want[i].resources+want[i].verbs < want[j].resources+want[j].verbs })
			if !reflect.DeepEqual(c.got[name], want) {
				t.Errorf("%s %s rules:\n got %+v\nwant %+v", c.kind, name, c.got[name], want)
			}
		}
		for name := range c.got {
			if _, ok := c.want[name]; !ok {
				t.Errorf("unexpected %s %s", c.kind, name)
			}
		}
	}
}

func checkWorkloads(t *testing.T, objs []*unstructured.Unstructured, replicas, natsReplicas int64) {
	t.Helper()
	pdbs := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() == "PodDisruptionBudget" {
			sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
			pdbs[sel["app.kubernetes.io/name"]] = true
		}
	}
	for _, name := range append([]string{"nats"}, prefixed(harness.Services)...) {
		kind, want := "Deployment", replicas
		if name == "nats" {
			kind, want = "StatefulSet", natsReplicas
		}
		o := harness.FindObj(objs, kind, name)
		if o == nil {
			t.Errorf("%s %s missing", kind, name)
			continue
		}
		if got, _, _ := unstructured.NestedInt64(o.Object, "spec", "replicas"); got != want {
			t.Errorf("%s replicas = %d, want %d", name, got, want)
		}
		if !pdbs[name] {
			t.Errorf("%s has no PodDisruptionBudget", name)
		}
		var spec corev1.PodTemplateSpec
		tmpl, _, _ := unstructured.NestedMap(o.Object, "spec", "template")
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &spec); err != nil {
			t.Fatal(err)
		}
		checkPod(t, name, spec)
	}
}

// checkPod is the hardening checklist of one pod template.
func checkPod(t *testing.T, name string, spec corev1.PodTemplateSpec) {
	t.Helper()
	ps := spec.Spec
	if ps.SecurityContext == nil || ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot ||
		ps.SecurityContext.SeccompProfile == nil || ps.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod must run as non-root with seccomp RuntimeDefault", name)
	}
	wantSA := name != "nats" && name != "opswire-notifier"
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken != wantSA {
		t.Errorf("%s: automountServiceAccountToken = %v, want %v", name, ps.AutomountServiceAccountToken, wantSA)
	}
	if spec.Labels["app.kubernetes.io/part-of"] != "opswire" {
		t.Errorf("%s: pods lack app.kubernetes.io/part-of=opswire (the network policies select it)", name)
	}
	for _, c := range ps.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("%s/%s: want read-only root, no privilege escalation, all capabilities dropped", name, c.Name)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s/%s: want cpu/memory requests and a memory limit", name, c.Name)
		}
		if name == "nats" {
			checkNATSProbes(t, c)
			continue
		}
		if c.LivenessProbe == nil || c.ReadinessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet == nil {
			t.Errorf("%s/%s: want HTTP liveness and readiness probes", name, c.Name)
			continue
		}
		if c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Errorf("%s: probes on %s and %s, want /healthz and /readyz", name, c.LivenessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path)
		}
		if spec.Annotations["prometheus.io/scrape"] != "true" || spec.Annotations["prometheus.io/port"] != "8080" {
			t.Errorf("%s: no Prometheus scrape annotations", name)
		}
	}
}

// checkNATSProbes: NATS monitoring listens on the loopback only, so its
// probes run in the container against 127.0.0.1:8222, and no port of the pod
// or Service exposes it.
func checkNATSProbes(t *testing.T, c corev1.Container) {
	t.Helper()
	for what, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.Exec == nil || !strings.Contains(strings.Join(p.Exec.Command, " "), "http://127.0.0.1:8222/healthz") {
			t.Errorf("nats: %s probe %+v, want an exec probe of http://127.0.0.1:8222/healthz", what, p)
		}
	}
	for _, p := range c.Ports {
		if p.ContainerPort == 8222 {
			t.Errorf("nats: container port 8222 exposed (%s)", p.Name)
		}
	}
}

// checkConfigs loads the rendered config.yml with the services' own loader
// and the NATS configuration with nats-server's.
func checkConfigs(t *testing.T, objs []*unstructured.Unstructured, streamReplicas int) {
	t.Helper()
	cm := harness.FindByPrefix(objs, "ConfigMap", "opswire-config-")
	if cm == nil {
		t.Fatal("ConfigMap opswire-config missing")
	}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	cfg, err := config.Parse([]byte(data["config.yml"]))
	if err != nil {
		t.Fatalf("config.yml does not load: %v", err)
	}
	if cfg.Controller.LeaseLockNamespace != "opswire" || cfg.Controller.LeaseLockName != "opswire" || !cfg.Controller.LeaderElect {
		t.Errorf("controller = %+v; the lease RBAC expects leaseLockName opswire in namespace opswire", cfg.Controller)
	}
	if cfg.NATS.Replicas != streamReplicas {
		t.Errorf("nats.replicas = %d, want %d", cfg.NATS.Replicas, streamReplicas)
	}
	recv := cfg.NotifierReceivers()
	if len(recv) != 1 || recv[0].URLEnv != "OPSWIRE_FEISHU_URL" || recv[0].SecretEnv != "OPSWIRE_FEISHU_SECRET" {
		t.Errorf("notifier receivers = %+v, want one feishu receiver from the Secret", recv)
	}
	nc := harness.FindByPrefix(objs, "ConfigMap", "nats-config-")
	if nc == nil {
		t.Fatal("ConfigMap nats-config missing")
	}
	dir := t.TempDir()
	files, _, _ := unstructured.NestedStringMap(nc.Object, "data")
	certs := makeCerts(t, "")
	for name, body := range files {
		// The certificates the StatefulSet mounts at /etc/nats/tls, made by deploy/make-certs.sh.
		body = strings.ReplaceAll(body, "/etc/nats/tls/", certs+"/")
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for u, p := range harness.DeployPasswords() {
		t.Setenv("NATS_"+strings.ToUpper(u)+"_PASSWORD", p)
	}
	t.Setenv("POD_NAME", "nats-0")
	for i := 0; i < 3; i++ {
		t.Setenv("NATS_ROUTE_"+string(rune('0'+i)), "nats://route:x@nats-"+string(rune('0'+i))+".nats-headless.opswire.svc:6222")
	}
	o, err := natsserver.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
	if err != nil {
		t.Fatalf("nats.conf does not load: %v", err)
	}
	if !o.JetStream || o.StoreDir != "/data" || len(o.Users) != 7 {
		t.Errorf("nats.conf: jetstream %v, store %q, %d users; want JetStream on /data with 7 users (the five services, audit, operator)", o.JetStream, o.StoreDir, len(o.Users))
	}
	if clustered := len(o.Routes) == 3 && o.Cluster.Name == "opswire"; clustered != (streamReplicas == 3) {
		t.Errorf("nats.conf: %d routes, cluster %q; want a 3-node cluster exactly when streams have 3 replicas", len(o.Routes), o.Cluster.Name)
	}
	if o.HTTPHost != "127.0.0.1" || o.HTTPPort != 8222 {
		t.Errorf("nats.conf: monitoring on %s:%d, want 127.0.0.1:8222 (no authentication there)", o.HTTPHost, o.HTTPPort)
	}
	// Production: TLS for clients (required, no plain connections) and
	// mutual TLS on routes.
	production := streamReplicas == 3
	if (o.TLSConfig != nil) != production || o.AllowNonTLS {
		t.Errorf("nats.conf: client TLS %v (allow non-TLS %v), want TLS exactly in production", o.TLSConfig != nil, o.AllowNonTLS)
	}
	if production && (o.Cluster.TLSConfig == nil || o.Cluster.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert) {
		t.Errorf("nats.conf: routes without mutual TLS")
	}
	for _, svc := range harness.Services {
		env := strings.Join(harness.DeploymentEnv(t, objs, "opswire-"+svc), " ")
		if strings.Contains(env, "OPSWIRE_NATS_TLS_CA=/etc/opswire-tls/ca.crt") != production {
			t.Errorf("opswire-%s: OPSWIRE_NATS_TLS_CA in %q, want it exactly in production", svc, env)
		}
	}
}

// makeCerts runs deploy/make-certs.sh and returns the directory with ca.crt,
// tls.crt and tls.key; extraSANs are added to the server certificate.
func makeCerts(t *testing.T, extraSANs string) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("sh", deployPath(t, "make-certs.sh"))
	cmd.Env = append(os.Environ(), "OUT_DIR="+dir, "EXTRA_SANS="+extraSANs)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil { // stderr holds openssl's complaints, never a key
		t.Fatalf("make-certs.sh: %v\n%s", err, stderr.String())
	}
	var secret corev1.Secret
	if err := yaml.Unmarshal(out, &secret); err != nil || secret.Name != "nats-tls" || len(secret.Data["tls.crt"]) == 0 ||
		len(secret.Data["tls.key"]) == 0 || len(secret.Data["ca.crt"]) == 0 || len(secret.Data) != 3 {
		t.Fatalf("make-certs.sh printed no Secret nats-tls with exactly tls.crt, tls.key and ca.crt (%v, %d bytes)", err, len(out))
	}
	return dir
}

func prefixed(services []string) []string {
	out := make([]string, len(services))
	for i, s := range services {
		out[i] = "opswire-" + s
	}
	return out
}
