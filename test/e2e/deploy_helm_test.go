package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/test/harness"
)

// The chart deploy/helm/opswire is tested against the kustomize install it
// mirrors: helm lint, helm template in every NATS mode, the same checks
// TestDeployManifests makes of the overlays, object-for-object equality with
// the overlays (RBAC exactly, workloads spec for spec), the NATS users and
// permissions byte for byte, and a server-side apply to a real API server.
// helm itself is built from the Go module proxy by hack/build-controlplane.sh
// (make controlplane) into the bin cache.

// helmFeishu is the webhook URL every render that creates the Secret gives.
const helmFeishu = "secrets.feishuURL=https://feishu.invalid/hook"

// helmBin is the cached helm binary, at the version hack/helm/go.mod pins.
func helmBin(t *testing.T) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	mod := mustRead(t, filepath.Join(root, "hack", "helm", "go.mod"))
	m := regexp.MustCompile(`(?m)^require helm\.sh/helm/v3 (v\S+)$`).FindStringSubmatch(mod)
	if m == nil {
		t.Fatal("hack/helm/go.mod does not require helm.sh/helm/v3")
	}
	dir, err := harness.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "helm-"+m[1])
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s missing: run make controlplane (hack/build-controlplane.sh builds it)", bin)
	}
	return bin
}

// runHelm runs helm with its own empty home (no repositories, no plugins,
// nothing of the user's) and returns stdout; stderr goes into the failure.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helmBin(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"), "KUBECONFIG=/dev/null")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

func chartPath(t *testing.T) string { return deployPath(t, "helm", "opswire") }

// helmTemplate renders the chart as release "opswire" in namespace opswire
// with the given --set values (and -f files, given as "-f=<path>").
func helmTemplate(t *testing.T, values ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", "opswire", chartPath(t), "--namespace", "opswire"}
	for _, v := range values {
		if f, ok := strings.CutPrefix(v, "-f="); ok {
			args = append(args, "-f", f)
		} else if f, ok := strings.CutPrefix(v, "--set-file="); ok {
			args = append(args, "--set-file", f)
		} else {
			args = append(args, "--set", v)
		}
	}
	out, err := runHelm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return parseManifests(t, out)
}

// parseManifests splits a multi-document YAML stream into objects.
func parseManifests(t *testing.T, manifests string) []*unstructured.Unstructured {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifests)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return objs
		}
		if err != nil {
			t.Fatalf("rendered YAML: %v", err)
		}
		data, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("rendered YAML: %v\n%s", err, doc)
		}
		if string(data) == "null" {
			continue // a document holding only comments
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			t.Fatalf("rendered object: %v\n%s", err, doc)
		}
		objs = append(objs, u)
	}
}

func productionValues(t *testing.T) string {
	return "-f=" + filepath.Join(chartPath(t), "values-production.yaml")
}

// wantRBAC is the RBAC TestDeployManifests expects of the overlays.
func wantRBAC(removeFinalizers bool) (cluster, roles map[string][]rule) {
	events := rule{"", "events", "create,list,patch", ""}
	cleanup := []rule{events, {"", "nodes", "get", ""}, {"", "pods", "get,delete", ""}}
	if removeFinalizers {
		cleanup = append(cleanup, rule{"", "pods", "patch", ""})
	}
	cluster = map[string][]rule{
		"opswire-watcher": {{"", "pods,nodes", "list,watch", ""}},
		"opswire-cordon":  {{"", "events", "create,list,patch", ""}, {"", "nodes", "get,list,patch", ""}, {"", "pods", "list", ""}},
		"opswire-cleanup": cleanup,
	}
	roles = map[string][]rule{}
	for _, svc := range []string{"watcher", "cordon", "cleanup", "report"} {
		names := "opswire-" + svc
		if svc == "cordon" || svc == "cleanup" {
			names += ",opswire-" + svc + "-dryrun"
		}
		roles["opswire-"+svc+"-lease"] = []rule{{"", "events", "create", ""}, {"coordination.k8s.io", "leases", "create", ""},
			{"coordination.k8s.io", "leases", "get,update", names}}
	}
	return cluster, roles
}

// TestHelmLint: helm lint --strict passes with the default, production and
// external-NATS values, and with every knob of allKnobs set.
func TestHelmLint(t *testing.T) {
	for name, args := range map[string][]string{
		"all knobs":  {strings.Replace(writeValues(t, allKnobs), "-f=", "--values=", 1)},
		"single":     {"--set", helmFeishu},
		"production": {"--set", helmFeishu, "-f", filepath.Join(chartPath(t), "values-production.yaml")},
		"external":   {"--set", "secrets.existingSecret=my-secrets,nats.mode=external,nats.external.url=tls://nats.messaging.svc:4222,nats.tls.enabled=true"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := runHelm(t, append([]string{"lint", "--strict", chartPath(t)}, args...)...)
			if err != nil || !strings.Contains(out, "0 chart(s) failed") {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
		})
	}
}

// TestHelmTemplate renders the chart in each NATS mode and makes the checks
// TestDeployManifests makes of the overlays: least-privilege RBAC rule by
// rule, hardened pods with probes and PDBs, a config.yml the services load,
// and a nats.conf nats-server loads (TLS and routes where they belong).
func TestHelmTemplate(t *testing.T) {
	cluster, roles := wantRBAC(false)
	t.Run("single", func(t *testing.T) {
		objs := helmTemplate(t, helmFeishu)
		checkRBAC(t, objs, cluster, roles)
		checkWorkloads(t, objs, 2, 1)
		checkConfigs(t, objs, 1)
	})
	t.Run("cluster+tls", func(t *testing.T) {
		objs := helmTemplate(t, helmFeishu, productionValues(t))
		checkRBAC(t, objs, cluster, roles)
		checkWorkloads(t, objs, 2, 3)
		checkConfigs(t, objs, 3)
		if harness.FindObj(objs, "NetworkPolicy", "nats") == nil || harness.FindObj(objs, "NetworkPolicy", "opswire-services") == nil {
			t.Error("production values: NetworkPolicies nats and opswire-services missing")
		}
	})
	t.Run("single+tls", func(t *testing.T) {
		objs := helmTemplate(t, helmFeishu, "nats.tls.enabled=true")
		o := loadChartNATSConf(t, objs)
		if o.TLSConfig == nil || o.AllowNonTLS || len(o.Routes) != 0 {
			t.Errorf("single+tls nats.conf: TLS %v, allow non-TLS %v, %d routes; want TLS required, no routes", o.TLSConfig != nil, o.AllowNonTLS, len(o.Routes))
		}
		for _, svc := range harness.Services {
			if env := strings.Join(harness.DeploymentEnv(t, objs, "opswire-"+svc), " "); !strings.Contains(env, "OPSWIRE_NATS_TLS_CA=/etc/opswire-tls/ca.crt") {
				t.Errorf("opswire-%s: no OPSWIRE_NATS_TLS_CA (%s)", svc, env)
			}
		}
	})
	t.Run("external", func(t *testing.T) {
		url := "tls://nats.messaging.svc:4222"
		objs := helmTemplate(t, "secrets.existingSecret=my-secrets", "nats.mode=external", "nats.external.url="+url, "nats.tls.enabled=true", "networkPolicy.enabled=true")
		checkRBAC(t, objs, cluster, roles)
		for _, o := range objs {
			if o.GetLabels()["app.kubernetes.io/name"] == "nats" || strings.HasPrefix(o.GetName(), "nats") || o.GetKind() == "Secret" {
				t.Errorf("external NATS with an existing Secret: %s %s rendered", o.GetKind(), o.GetName())
			}
		}
		for _, svc := range harness.Services {
			env := strings.Join(harness.DeploymentEnv(t, objs, "opswire-"+svc), " ")
			if !strings.Contains(env, "OPSWIRE_NATS_URL="+url) || !strings.Contains(env, "OPSWIRE_NATS_TLS_CA=") {
				t.Errorf("opswire-%s env %q: want the external URL and its CA", svc, env)
			}
			d, _ := json.Marshal(harness.FindObj(objs, "Deployment", "opswire-"+svc).Object)
			if strings.Contains(string(d), "opswire-secrets") || !strings.Contains(string(d), `"name":"my-secrets"`) {
				t.Errorf("opswire-%s does not read the existing Secret my-secrets only", svc)
			}
		}
	})
	t.Run("values", func(t *testing.T) {
		objs := helmTemplate(t, helmFeishu, "image.registry=registry.example.com/team", "image.tag=v1.2.3",
			"cordon.replicas=3", "cleanup.resources.limits.memory=300Mi", "cleanup.removeFinalizers=true",
			"nats.storage=2Gi", "secrets.natsPasswords.watcher=pw4tch3r")
		d := harness.FindObj(objs, "Deployment", "opswire-cordon")
		img, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		if got := img[0].(map[string]any)["image"]; got != "registry.example.com/team/opswire/opswire-cordon:v1.2.3" {
			t.Errorf("image %v", got)
		}
		if n, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); n != 3 {
			t.Errorf("cordon replicas %d, want 3", n)
		}
		c, _, _ := unstructured.NestedSlice(harness.FindObj(objs, "Deployment", "opswire-cleanup").Object, "spec", "template", "spec", "containers")
		if mem, _, _ := unstructured.NestedString(c[0].(map[string]any), "resources", "limits", "memory"); mem != "300Mi" {
			t.Errorf("cleanup memory limit %q, want 300Mi", mem)
		}
		fc, fr := wantRBAC(true)
		checkRBAC(t, objs, fc, fr)
		s := harness.FindObj(objs, "Secret", "opswire-secrets")
		data, _, _ := unstructured.NestedStringMap(s.Object, "stringData")
		if data["nats-watcher-password"] != "pw4tch3r" || !regexp.MustCompile(`^p[A-Za-z0-9]{40}$`).MatchString(data["nats-cordon-password"]) ||
			data["feishu-url"] != "https://feishu.invalid/hook" || len(data) != 10 {
			t.Errorf("Secret: given password kept, others generated, the keys of secret.example.yaml; got %d keys", len(data))
		}
		for k := range secretFromTemplate(t, map[string]string{"nats-watcher-password": "", "nats-cordon-password": "", "nats-cleanup-password": "",
			"nats-report-password": "", "nats-notifier-password": "", "nats-audit-password": "", "nats-operator-password": "", "nats-route-password": "",
			"feishu-url": "", "feishu-secret": ""}).Object["stringData"].(map[string]any) {
			if _, ok := data[k]; !ok {
				t.Errorf("Secret lacks key %s of secret.example.yaml", k)
			}
		}
	})
	t.Run("config file", func(t *testing.T) {
		// A whole config.yml given as a value is mounted as is.
		custom := strings.Replace(mustRead(t, deployPath(t, "base", "config.yml")), "  maxPods: 100\n", "  maxPods: 177\n", 1)
		path := filepath.Join(t.TempDir(), "config.yml")
		if err := os.WriteFile(path, []byte(custom), 0o600); err != nil {
			t.Fatal(err)
		}
		objs := helmTemplate(t, helmFeishu, "--set-file=config="+path, "imagePullSecrets[0].name=regcred")
		got, _, _ := unstructured.NestedString(harness.FindByPrefix(objs, "ConfigMap", "opswire-config-").Object, "data", "config.yml")
		cfg, err := config.Parse([]byte(got))
		if err != nil || cfg.AutoCordon.MaxPods != 177 {
			t.Fatalf("config from --set-file: %v, %+v", err, cfg)
		}
		if got != custom {
			t.Error("the given config.yml was not mounted byte for byte")
		}
		for _, o := range objs {
			if o.GetKind() == "Deployment" || o.GetKind() == "StatefulSet" {
				ps, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "imagePullSecrets")
				if len(ps) != 1 {
					t.Errorf("%s %s: imagePullSecrets %v", o.GetKind(), o.GetName(), ps)
				}
			}
		}
	})
	t.Run("cert-manager", func(t *testing.T) {
		objs := helmTemplate(t, helmFeishu, productionValues(t), "nats.tls.certManager=true")
		kust := harness.KustomizeBuild(t, certManagerOverlay(t))
		for _, kind := range []string{"Issuer", "Certificate"} {
			for _, k := range kust {
				if k.GetKind() != kind {
					continue
				}
				h := harness.FindObj(objs, kind, k.GetName())
				if h == nil || !reflect.DeepEqual(h.Object["spec"], k.Object["spec"]) {
					t.Errorf("%s %s differs from the kustomize component", kind, k.GetName())
				}
			}
		}
	})
	t.Run("refusals", func(t *testing.T) {
		for _, c := range []struct{ set, want string }{
			{"nats.mode=nope", "nats.mode must be single, cluster or external"},
			{"nats.mode=external", "nats.mode external needs nats.external.url"},
			{"nats.mode=single", "secrets.feishuURL"},
		} {
			set := c.set
			if !strings.Contains(c.want, "feishu") {
				set += "," + helmFeishu
			}
			out, err := runHelm(t, "template", "opswire", chartPath(t), "--set", set)
			if err == nil || !strings.Contains(out, c.want) {
				t.Errorf("--set %s: err %v, output %q; want a refusal naming %q", c.set, err, out, c.want)
			}
		}
	})
}

func certManagerOverlay(t *testing.T) string {
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
	return dir
}

// TestHelmEqualsKustomize: the chart installs what the overlays install.
// RBAC (ServiceAccounts, Roles, ClusterRoles and their bindings) must be
// identical object for object; Deployments, the StatefulSet, Services, PDBs
// and NetworkPolicies identical spec for spec (the generated ConfigMaps'
// hash suffixes aside; the chart adds Helm's labels to metadata only). The
// NATS users and permissions are deploy/base/nats/auth.conf byte for byte,
// the default config.yml is deploy/base/config.yml, and nats.conf loads into
// the same server options as deploy's.
func TestHelmEqualsKustomize(t *testing.T) {
	cases := []struct {
		name string
		helm []string
		kust func(t *testing.T) string
	}{
		{"dev", []string{helmFeishu, "watcher.replicas=1", "cordon.replicas=1", "cleanup.replicas=1", "report.replicas=1", "notifier.replicas=1", "nats.storage=1Gi"},
			func(t *testing.T) string { return deployPath(t, "overlays", "dev") }},
		{"production", []string{helmFeishu, productionValues(t)}, func(t *testing.T) string { return deployPath(t, "overlays", "production") }},
		{"dev+cleanup-remove-finalizers", []string{helmFeishu, "watcher.replicas=1", "cordon.replicas=1", "cleanup.replicas=1", "report.replicas=1",
			"notifier.replicas=1", "nats.storage=1Gi", "cleanup.removeFinalizers=true"}, finalizerOverlay},
	}
	rbacKinds := map[string]bool{"ServiceAccount": true, "Role": true, "ClusterRole": true, "RoleBinding": true, "ClusterRoleBinding": true}
	specKinds := map[string]bool{"Deployment": true, "StatefulSet": true, "Service": true, "PodDisruptionBudget": true, "NetworkPolicy": true}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			chart, kust := helmTemplate(t, c.helm...), harness.KustomizeBuild(t, c.kust(t))
			for kind := range rbacKinds {
				if h, k := names(chart, kind), names(kust, kind); !reflect.DeepEqual(h, k) {
					t.Errorf("%s: chart has %v, kustomize %v", kind, h, k)
				}
			}
			for kind := range specKinds {
				if h, k := names(chart, kind), names(kust, kind); !reflect.DeepEqual(h, k) {
					t.Errorf("%s: chart has %v, kustomize %v", kind, h, k)
				}
			}
			for _, k := range kust {
				h := harness.FindObj(chart, k.GetKind(), k.GetName())
				if h == nil {
					continue // reported above
				}
				switch {
				case rbacKinds[k.GetKind()]:
					if hn, kn := comparableObj(h, false), comparableObj(k, false); !reflect.DeepEqual(hn, kn) {
						t.Errorf("%s %s differs at %s", k.GetKind(), k.GetName(), firstDiff("", hn, kn))
					}
				case specKinds[k.GetKind()]:
					if h.GetNamespace() != k.GetNamespace() {
						t.Errorf("%s %s in namespace %q, kustomize %q", k.GetKind(), k.GetName(), h.GetNamespace(), k.GetNamespace())
					}
					if hn, kn := comparableObj(h, true), comparableObj(k, true); !reflect.DeepEqual(hn, kn) {
						t.Errorf("%s %s differs at %s", k.GetKind(), k.GetName(), firstDiff("", hn, kn))
					}
				}
			}
			// The configurations: config.yml loads to the same config, the
			// NATS users and permissions are the same file, nats.conf gives
			// the same server.
			hc, _, _ := unstructured.NestedString(harness.FindByPrefix(chart, "ConfigMap", "opswire-config-").Object, "data", "config.yml")
			kc, _, _ := unstructured.NestedString(harness.FindByPrefix(kust, "ConfigMap", "opswire-config-").Object, "data", "config.yml")
			hcfg, err1 := config.Parse([]byte(hc))
			kcfg, err2 := config.Parse([]byte(kc))
			if err1 != nil || err2 != nil || !reflect.DeepEqual(hcfg, kcfg) {
				t.Errorf("config.yml: chart and kustomize load differently (%v, %v)", err1, err2)
			}
			ha, _, _ := unstructured.NestedString(harness.FindByPrefix(chart, "ConfigMap", "nats-config-").Object, "data", "auth.conf")
			if want := mustRead(t, deployPath(t, "base", "nats", "auth.conf")); ha != want {
				t.Errorf("the chart's auth.conf is not deploy/base/nats/auth.conf (%d vs %d bytes): copy it to deploy/helm/opswire/files/", len(ha), len(want))
			}
			compareNATSOptions(t, loadChartNATSConf(t, chart), loadChartNATSConf(t, kust))
		})
	}
	// The chart's copies are the files of deploy/ (so a change to deploy/
	// that is not copied fails here, not in a user's cluster).
	for chartFile, deployFile := range map[string]string{"auth.conf": "base/nats/auth.conf", "config.yml": "base/config.yml",
		"opswire-rules.yaml": "prometheus/opswire-rules.yaml"} {
		if mustRead(t, filepath.Join(chartPath(t), "files", chartFile)) != mustRead(t, deployPath(t, deployFile)) {
			t.Errorf("deploy/helm/opswire/files/%s differs from deploy/%s", chartFile, deployFile)
		}
	}
}

func names(objs []*unstructured.Unstructured, kind string) []string {
	var out []string
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o.GetNamespace()+"/"+o.GetName())
		}
	}
	sort.Strings(out)
	return out
}

// generatedSuffix is the hash suffix of a generated ConfigMap's name.
var generatedSuffix = regexp.MustCompile(`^((?:opswire|nats)-config|opswire-fleet)-[a-z0-9]+$`)

// comparable is an object without what legitimately differs between the
// chart and kustomize: metadata other than name and namespace (Helm's
// labels) and, with specOnly, everything but the spec (ConfigMap names, in
// volumes and configMapKeyRefs, lose their hash suffix).
func comparableObj(o *unstructured.Unstructured, specOnly bool) map[string]any {
	c := o.DeepCopy().Object
	if specOnly {
		c = map[string]any{"spec": c["spec"]}
	} else {
		c["metadata"] = map[string]any{"name": o.GetName(), "namespace": o.GetNamespace()}
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if cm, ok := e.(map[string]any); ok && (k == "configMap" || k == "configMapKeyRef") {
					if n, ok := cm["name"].(string); ok {
						cm["name"] = generatedSuffix.ReplaceAllString(n, "$1")
					}
				}
				x[k] = walk(e)
			}
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
		}
		return v
	}
	return walk(c).(map[string]any)
}

// firstDiff names the first path where the chart's value (a) and
// kustomize's (b) differ, with both values.
func firstDiff(path string, a, b any) string {
	if am, ok := a.(map[string]any); ok {
		if bm, ok := b.(map[string]any); ok {
			keys := map[string]bool{}
			for k := range am {
				keys[k] = true
			}
			for k := range bm {
				keys[k] = true
			}
			sorted := make([]string, 0, len(keys))
			for k := range keys {
				sorted = append(sorted, k)
			}
			sort.Strings(sorted)
			for _, k := range sorted {
				if !reflect.DeepEqual(am[k], bm[k]) {
					return firstDiff(path+"."+k, am[k], bm[k])
				}
			}
		}
	}
	if as, ok := a.([]any); ok {
		if bs, ok := b.([]any); ok && len(as) == len(bs) {
			for i := range as {
				if !reflect.DeepEqual(as[i], bs[i]) {
					return firstDiff(path+"["+strconv.Itoa(i)+"]", as[i], bs[i])
				}
			}
		}
	}
	return path + ": chart " + jsonOf(a) + ", kustomize " + jsonOf(b)
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// loadChartNATSConf loads the rendered nats-config ConfigMap with
// nats-server's own parser (certificates from make-certs.sh in place of the
// mounted Secret, the passwords and route URLs the StatefulSet sets).
func loadChartNATSConf(t *testing.T, objs []*unstructured.Unstructured) *natsserver.Options {
	t.Helper()
	nc := harness.FindByPrefix(objs, "ConfigMap", "nats-config-")
	if nc == nil {
		t.Fatal("ConfigMap nats-config missing")
	}
	dir, certs := t.TempDir(), makeCerts(t, "")
	files, _, _ := unstructured.NestedStringMap(nc.Object, "data")
	for name, body := range files {
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
	return o
}

// compareNATSOptions compares what nats.conf decides: users and their
// permissions, JetStream limits, monitoring, TLS, cluster and lame duck.
func compareNATSOptions(t *testing.T, h, k *natsserver.Options) {
	t.Helper()
	perms := func(o *natsserver.Options) map[string]string {
		m := map[string]string{}
		for _, u := range o.Users {
			m[u.Username] = jsonOf(u.Permissions) + " account " + u.Account.Name
		}
		return m
	}
	if hp, kp := perms(h), perms(k); !reflect.DeepEqual(hp, kp) {
		t.Errorf("NATS users and permissions differ:\n chart     %v\n kustomize %v", hp, kp)
	}
	type view struct {
		ServerName, Host, HTTPHost string
		Port, HTTPPort             int
		JetStream                  bool
		StoreDir                   string
		MaxMem, MaxStore           int64
		MaxPayload                 int32
		LameDuck, LameDuckGrace    time.Duration
		TLS, AllowNonTLS, RouteTLS bool
		RouteVerify                bool
		Cluster, ClusterUser       string
		ClusterPort, Routes        int
	}
	v := func(o *natsserver.Options) view {
		return view{o.ServerName, o.Host, o.HTTPHost, o.Port, o.HTTPPort, o.JetStream, o.StoreDir, o.JetStreamMaxMemory, o.JetStreamMaxStore,
			o.MaxPayload, o.LameDuckDuration, o.LameDuckGracePeriod, o.TLSConfig != nil, o.AllowNonTLS, o.Cluster.TLSConfig != nil,
			o.Cluster.TLSConfig != nil && o.Cluster.TLSConfig.ClientAuth != 0, o.Cluster.Name, o.Cluster.Username, o.Cluster.Port, len(o.Routes)}
	}
	if hv, kv := v(h), v(k); hv != kv {
		t.Errorf("nats.conf differs:\n chart     %+v\n kustomize %+v", hv, kv)
	}
}

// TestHelmOnRealCluster server-side applies the rendered chart (strict field
// validation against the real schemas) in every mode to a real kube-apiserver:
// the production values, external NATS, the finalizer option, then the
// defaults; switching modes recreates the NATS StatefulSet (its
// volumeClaimTemplates are immutable), as with the overlays.
func TestHelmOnRealCluster(t *testing.T) {
	cp := harness.StartControlPlane(t)
	ctx := context.Background()
	for _, m := range []struct {
		name string
		set  []string
	}{
		{"cluster+tls", []string{helmFeishu, productionValues(t), "namespace.create=true"}},
		{"external", []string{"secrets.existingSecret=opswire-secrets", "nats.mode=external", "nats.external.url=nats://nats.messaging.svc:4222"}},
		{"single+removeFinalizers", []string{helmFeishu, "cleanup.removeFinalizers=true", "nats.tls.enabled=true"}},
		// Every knob of issue 39, against the real schemas (strict field
		// validation); the prometheus-operator objects need its CRDs, absent here.
		{"all knobs", []string{writeValues(t, allKnobs)}},
		{"single", []string{helmFeishu, "namespace.create=true"}},
	} {
		var objs []*unstructured.Unstructured
		for _, o := range helmTemplate(t, m.set...) {
			if !strings.HasPrefix(o.GetAPIVersion(), "monitoring.coreos.com/") {
				objs = append(objs, o)
			}
		}
		if err := cp.Client.AppsV1().StatefulSets("opswire").Delete(ctx, "nats", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		start := time.Now()
		harness.ServerSideApply(t, cp.Config, objs)
		t.Logf("applied %s: %d objects in %v", m.name, len(objs), time.Since(start).Round(time.Millisecond))
	}
	ns, err := cp.Client.CoreV1().Namespaces().Get(ctx, "opswire", metav1.GetOptions{})
	if err != nil || ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Fatalf("namespace opswire: %v, labels %v; want restricted Pod Security enforced", err, ns.Labels)
	}
	cr, err := cp.Client.RbacV1().ClusterRoles().Get(ctx, "opswire-cleanup", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cr.Rules) != 3 {
		t.Errorf("re-applying the defaults did not take back the finalizer rule: %+v", cr.Rules)
	}
	sts, err := cp.Client.AppsV1().StatefulSets("opswire").Get(ctx, "nats", metav1.GetOptions{})
	if err != nil || *sts.Spec.Replicas != 1 {
		t.Fatalf("StatefulSet nats after the defaults: %v", err)
	}
	for _, svc := range harness.Services {
		d, err := cp.Client.AppsV1().Deployments("opswire").Get(ctx, "opswire-"+svc, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm := d.Spec.Template.Spec.Volumes[0].ConfigMap.Name
		if _, err := cp.Client.CoreV1().ConfigMaps("opswire").Get(ctx, cm, metav1.GetOptions{}); err != nil {
			t.Errorf("opswire-%s mounts ConfigMap %s: %v", svc, cm, err)
		}
	}
}

// TestHelmInstall runs helm itself against a real kube-apiserver: helm
// install (the Secret created with generated passwords), helm upgrade (the
// passwords kept, a changed value rolled out), then the services run on what
// the release installed: each with a token of the chart's ServiceAccount and
// its NATS user from the chart's auth.conf with the release's passwords, on
// the release's config.yml (intervals shortened). They must cordon a full
// node and delete an Evicted pod. helm uninstall removes the cluster-wide RBAC.
func TestHelmInstall(t *testing.T) {
	cp := harness.StartControlPlane(t)
	ctx := context.Background()
	helm := func(args ...string) string {
		t.Helper()
		args = append(args, "--kubeconfig", cp.Kubeconfig)
		start := time.Now()
		out, err := runHelm(t, args...)
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("helm %s: %v", args[0], time.Since(start).Round(time.Millisecond))
		return out
	}
	helm("install", "opswire", chartPath(t), "--namespace", "opswire", "--create-namespace", "--set", helmFeishu)
	secret := func() map[string]string {
		s, err := cp.Client.CoreV1().Secrets("opswire").Get(ctx, "opswire-secrets", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out
	}
	first := secret()
	if len(first) != 10 || !regexp.MustCompile(`^p[A-Za-z0-9]{40}$`).MatchString(first["nats-watcher-password"]) {
		t.Fatalf("installed Secret has %d keys, watcher password %q", len(first), first["nats-watcher-password"])
	}
	helm("upgrade", "opswire", chartPath(t), "--namespace", "opswire", "--set", helmFeishu, "--set", "cordon.replicas=1")
	if again := secret(); !reflect.DeepEqual(again, first) {
		t.Fatal("helm upgrade changed the generated passwords (lookup must keep them)")
	}
	if d, err := cp.Client.AppsV1().Deployments("opswire").Get(ctx, "opswire-cordon", metav1.GetOptions{}); err != nil || *d.Spec.Replicas != 1 {
		t.Fatalf("upgrade to cordon.replicas=1: %v", err)
	}

	// NATS with the release's auth.conf and passwords.
	cms, err := cp.Client.CoreV1().ConfigMaps("opswire").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var authConf, configYML string
	for _, cm := range cms.Items {
		if strings.HasPrefix(cm.Name, "nats-config-") {
			authConf = cm.Data["auth.conf"]
		}
		if strings.HasPrefix(cm.Name, "opswire-config-") {
			configYML = cm.Data["config.yml"]
		}
	}
	if authConf == "" || configYML == "" {
		t.Fatal("the release has no nats-config or opswire-config ConfigMap")
	}
	authPath := filepath.Join(t.TempDir(), "auth.conf")
	if err := os.WriteFile(authPath, []byte(authConf), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"watcher", "cordon", "cleanup", "report", "notifier", "audit", "operator"} {
		t.Setenv("NATS_"+strings.ToUpper(u)+"_PASSWORD", first["nats-"+u+"-password"])
	}
	n := harness.StartNATS(t, harness.WithConfigFile(authPath))

	rendered := helmTemplate(t, helmFeishu) // the Deployments' literal env, as installed
	cfgPath := harness.WriteConfig(t, testConfigFrom(t, configYML))
	procs := map[string]*harness.Process{}
	for _, svc := range []string{"watcher", "cordon", "cleanup"} {
		env := append(harness.DeploymentEnv(t, rendered, "opswire-"+svc), "OPSWIRE_NATS_PASSWORD="+first["nats-"+svc+"-password"])
		procs[svc] = harness.StartService(t, svc, harness.ServiceOptions{Config: cfgPath, NATSURL: n.URL, Env: env,
			Kubeconfig: cp.ServiceAccountKubeconfig(t, "opswire", "opswire-"+svc)})
	}
	for _, p := range procs {
		p.WaitReady(t, 60*time.Second)
	}
	audit := connectAs(t, n, "audit", first["nats-audit-password"])
	ops := subscribeLive(t, audit.nc, "ops.>")
	c := cp.Client
	harness.CreateNamespace(t, c, "shop")
	harness.CreateNode(t, c, harness.Node("helm-node-a", nil))
	for i := 0; i < 3; i++ { // maxPods 3 (testConfigFrom)
		harness.CreatePod(t, c, harness.Pod("shop", "web-"+strconv.Itoa(i), "helm-node-a"))
	}
	ops.WaitFor(t, 30*time.Second, "cordon", harness.Subject("ops.default.cordon.cordoned.helm-node-a"))
	harness.Eventually(t, 10*time.Second, "helm-node-a unschedulable", func() bool {
		node, err := c.CoreV1().Nodes().Get(ctx, "helm-node-a", metav1.GetOptions{})
		return err == nil && node.Spec.Unschedulable
	})
	evicted := harness.CreatePod(t, c, harness.Pod("shop", "evicted-0", "helm-node-a"))
	harness.SetPodStatus(t, c, evicted, func(s *corev1.PodStatus) {
		s.Phase, s.Reason, s.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
	})
	ops.WaitFor(t, 30*time.Second, "evicted pod deleted", harness.Subject("ops.default.cleanup.deleted.shop.evicted-0"))
	for svc, p := range procs {
		if logs := p.Logs(); strings.Contains(strings.ToLower(logs), "permissions violation") || strings.Contains(logs, "forbidden") {
			t.Errorf("%s logged a refused permission:\n%s", svc, grepLines(logs, "ermission", "forbidden"))
		}
		if code := p.Stop(); code != 0 {
			t.Errorf("%s exited %d on SIGTERM", svc, code)
		}
	}

	helm("uninstall", "opswire", "--namespace", "opswire")
	harness.Eventually(t, 30*time.Second, "ClusterRoles removed by helm uninstall", func() bool {
		_, err := c.RbacV1().ClusterRoles().Get(ctx, "opswire-cleanup", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}
