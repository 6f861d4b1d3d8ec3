package e2e

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/test/harness"
)

// TestFleetManifests renders the fleet overlays and checks what
// TestFleetTwoClusters cannot run: the hub has the notifier (managing the
// fleet OPS) and NATS only, no RBAC; an edge has everything but the
// notifier, each service named after the cluster of the ConfigMap
// opswire-fleet; the hub's auth.conf has a leaf-only user for exactly the
// clusters config.yml sources, each with its password from opswire-fleet;
// both nats.conf load with nats-server's loader (domains, leaf listener and
// remote over TLS); a per-cluster kustomization of fleet-edge names its own
// cluster; and every pod passes the deploy's hardening checklist.
func TestFleetManifests(t *testing.T) {
	hub := harness.KustomizeBuild(t, deployPath(t, "overlays", "fleet-hub"))
	edge := harness.KustomizeBuild(t, deployPath(t, "overlays", "fleet-edge"))
	kinds := func(objs []*unstructured.Unstructured, kind string) []string {
		var out []string
		for _, o := range objs {
			if o.GetKind() == kind {
				out = append(out, o.GetName())
			}
		}
		sort.Strings(out)
		return out
	}

	// The hub: NATS and the notifier, which creates the fleet OPS.
	if got := kinds(hub, "Deployment"); !reflect.DeepEqual(got, []string{"opswire-notifier"}) {
		t.Errorf("hub Deployments %v, want only opswire-notifier", got)
	}
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
		if got := kinds(hub, kind); len(got) != 0 {
			t.Errorf("hub %ss %v, want none (the notifier has no Kubernetes access)", kind, got)
		}
	}
	if got := kinds(hub, "ServiceAccount"); !reflect.DeepEqual(got, []string{"opswire-notifier"}) {
		t.Errorf("hub ServiceAccounts %v", got)
	}
	if env := strings.Join(harness.DeploymentEnv(t, hub, "opswire-notifier"), " "); !strings.Contains(env, "OPSWIRE_MANAGE_STREAMS=true") ||
		!strings.Contains(env, "OPSWIRE_NATS_TLS_CA=/etc/opswire-tls/ca.crt") {
		t.Errorf("hub notifier env %q: want it to manage the streams, over TLS", env)
	}
	svc := harness.FindObj(hub, "Service", "nats-leaf")
	if svc == nil {
		t.Fatal("hub: no Service nats-leaf")
	}
	if ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports"); len(ports) != 1 || ports[0].(map[string]any)["port"] != int64(7422) {
		t.Errorf("Service nats-leaf ports %v, want 7422", ports)
	}
	hubCfg, err := config.Parse([]byte(renderedConfig(t, hub)))
	if err != nil {
		t.Fatalf("hub config.yml: %v", err)
	}
	if !reflect.DeepEqual(hubCfg.NATS.OpsSources, fleetClusters) || hubCfg.NATS.Replicas != 3 {
		t.Errorf("hub nats = %+v, want opsSources %v and 3 replicas", hubCfg.NATS, fleetClusters)
	}
	hubEnv := map[string]corev1.EnvVar{}
	for _, e := range podOf(t, hub, "StatefulSet", "nats").Spec.Containers[0].Env {
		hubEnv[e.Name] = e
	}
	o := loadNATSConf(t, hub, map[string]string{})
	if o.JetStreamDomain != "hub" || o.LeafNode.Port != 7422 || o.LeafNode.TLSConfig == nil || o.TLSConfig == nil {
		t.Errorf("hub nats.conf: domain %q, leaf port %d (TLS %v), client TLS %v", o.JetStreamDomain, o.LeafNode.Port, o.LeafNode.TLSConfig != nil, o.TLSConfig != nil)
	}
	if !o.FeatureFlags["js_api_reply_v2"] || !o.FeatureFlags["js_snapshot_sources"] {
		t.Errorf("hub nats.conf feature flags %v", o.FeatureFlags)
	}
	var leafUsers []string
	for _, u := range o.Users {
		c, isLeaf := strings.CutPrefix(u.Username, "leaf-")
		if !isLeaf {
			if u.Username != "notifier" && u.Username != "audit" && u.Username != "operator" {
				t.Errorf("hub user %s: want only notifier, audit, operator and leaf users", u.Username)
			}
			continue
		}
		leafUsers = append(leafUsers, c)
		if _, ok := u.AllowedConnectionTypes["LEAFNODE"]; !ok || len(u.AllowedConnectionTypes) != 1 {
			t.Errorf("hub user %s: connection types %v, want LEAFNODE only", u.Username, u.AllowedConnectionTypes)
		}
		pub, sub := u.Permissions.Publish.Allow, u.Permissions.Subscribe.Allow
		if !reflect.DeepEqual(pub, []string{"ops." + c + ".>", "fleet." + c + ".>", "$JSC.R." + c + ".>"}) ||
			!reflect.DeepEqual(sub, []string{"$JS." + c + ".API.>", "$JS.FC.>"}) {
			t.Errorf("hub user %s: publish %v, subscribe %v: only its own cluster's subjects", u.Username, pub, sub)
		}
		v := "NATS_LEAF_" + strings.ToUpper(c) + "_PASSWORD"
		if e, ok := hubEnv[v]; !ok || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
			e.ValueFrom.SecretKeyRef.Name != "opswire-fleet" || e.ValueFrom.SecretKeyRef.Key != "leaf-"+c+"-password" {
			t.Errorf("hub StatefulSet: %s = %+v, want Secret opswire-fleet key leaf-%s-password", v, e, c)
		}
	}
	sort.Strings(leafUsers)
	if !reflect.DeepEqual(leafUsers, fleetClusters) {
		t.Errorf("hub leaf users for %v, config.yml sources %v", leafUsers, fleetClusters)
	}

	// An edge: everything but the notifier; each service named after the cluster.
	if got := kinds(edge, "Deployment"); !reflect.DeepEqual(got, []string{"opswire-cleanup", "opswire-cordon", "opswire-report", "opswire-watcher"}) {
		t.Errorf("edge Deployments %v", got)
	}
	if harness.FindObj(edge, "ServiceAccount", "opswire-notifier") != nil || harness.FindObj(edge, "PodDisruptionBudget", "opswire-notifier") != nil {
		t.Error("edge: the notifier's objects are left")
	}
	fleetCM := harness.FindByPrefix(edge, "ConfigMap", "opswire-fleet-")
	if fleetCM == nil {
		t.Fatal("edge: no ConfigMap opswire-fleet")
	}
	for _, d := range kinds(edge, "Deployment") {
		if ref := envFrom(t, podOf(t, edge, "Deployment", d), "OPSWIRE_CLUSTER"); ref == nil || ref.ConfigMapKeyRef == nil ||
			ref.ConfigMapKeyRef.Name != fleetCM.GetName() || ref.ConfigMapKeyRef.Key != "cluster" {
			t.Errorf("edge %s: OPSWIRE_CLUSTER from %+v, want ConfigMap %s key cluster", d, ref, fleetCM.GetName())
		}
	}
	eo := loadNATSConf(t, edge, map[string]string{"OPSWIRE_CLUSTER": "a", "NATS_SERVER_NAME": "a-nats-0", "NATS_ROUTE_PASSWORD": "x",
		"NATS_LEAF_URL": "tls://leaf-a:x@nats-hub.example.com:7422"})
	if eo.JetStreamDomain != "a" || eo.ServerName != "a-nats-0" || len(eo.LeafNode.Remotes) != 1 ||
		eo.LeafNode.Remotes[0].LocalAccount != "OPSWIRE" || eo.LeafNode.Remotes[0].TLSConfig == nil || len(eo.Users) != 7 {
		t.Errorf("edge nats.conf: domain %q, server %q, remotes %+v, %d users", eo.JetStreamDomain, eo.ServerName, eo.LeafNode.Remotes, len(eo.Users))
	}
	if eo.TLSConfig == nil || eo.Cluster.TLSConfig == nil || len(eo.Routes) != 3 {
		t.Errorf("edge nats.conf: client TLS %v, route TLS %v, %d routes: want the production cluster", eo.TLSConfig != nil, eo.Cluster.TLSConfig != nil, len(eo.Routes))
	}
	if edgeCfg, err := config.Parse([]byte(renderedConfig(t, edge))); err != nil {
		t.Errorf("edge config.yml: %v", err)
	} else if edgeCfg.NATS.Replicas != 3 || len(edgeCfg.NATS.OpsSources) != 0 {
		t.Errorf("edge config.yml: nats %+v; want the production file's", edgeCfg.NATS)
	}
	for _, d := range kinds(edge, "Deployment") {
		if env := strings.Join(harness.DeploymentEnv(t, edge, d), " "); !strings.Contains(env, "OPSWIRE_NATS_TLS_CA=/etc/opswire-tls/ca.crt") {
			t.Errorf("edge %s: no OPSWIRE_NATS_TLS_CA in %q", d, env)
		}
	}
	for _, objs := range [][]*unstructured.Unstructured{hub, edge} {
		for _, o := range objs {
			if k := o.GetKind(); k == "Deployment" || k == "StatefulSet" {
				checkPod(t, o.GetName(), *podOf(t, objs, k, o.GetName()))
			}
		}
	}

	// Cluster b's own kustomization of fleet-edge.
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, deployPath(t, "overlays", "fleet-edge"))
	if err != nil {
		t.Fatal(err)
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [" + rel + "]\n" +
		"configMapGenerator:\n- name: opswire-fleet\n  behavior: replace\n  literals: [cluster=b, hub=nats-hub.example.com:7422]\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		t.Fatal(err)
	}
	b := harness.KustomizeBuild(t, dir)
	cm := harness.FindByPrefix(b, "ConfigMap", "opswire-fleet-")
	if data, _, _ := unstructured.NestedStringMap(cm.Object, "data"); data["cluster"] != "b" {
		t.Errorf("cluster b's opswire-fleet: %v", data)
	}
	if ref := envFrom(t, podOf(t, b, "Deployment", "opswire-cleanup"), "OPSWIRE_CLUSTER"); ref == nil || ref.ConfigMapKeyRef.Name != cm.GetName() {
		t.Errorf("cluster b's cleanup reads OPSWIRE_CLUSTER from %+v, want %s", ref, cm.GetName())
	}
}

func podOf(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *corev1.PodTemplateSpec {
	t.Helper()
	o := harness.FindObj(objs, kind, name)
	if o == nil {
		t.Fatalf("%s %s missing", kind, name)
	}
	var spec corev1.PodTemplateSpec
	tmpl, _, _ := unstructured.NestedMap(o.Object, "spec", "template")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &spec); err != nil {
		t.Fatal(err)
	}
	return &spec
}

func envFrom(t *testing.T, spec *corev1.PodTemplateSpec, name string) *corev1.EnvVarSource {
	t.Helper()
	for _, e := range spec.Spec.Containers[0].Env {
		if e.Name == name {
			return e.ValueFrom
		}
	}
	return nil
}

// loadNATSConf loads a rendered nats.conf with nats-server's loader, with
// the test's passwords and the given variables in the environment.
func loadNATSConf(t *testing.T, objs []*unstructured.Unstructured, vars map[string]string) *natsserver.Options {
	t.Helper()
	cm := harness.FindByPrefix(objs, "ConfigMap", "nats-config-")
	if cm == nil {
		t.Fatal("ConfigMap nats-config missing")
	}
	dir := t.TempDir()
	files, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	certs := makeCerts(t, "")
	for name, body := range files {
		body = strings.ReplaceAll(strings.ReplaceAll(body, "/etc/nats/tls/", certs+"/"), "/etc/nats/hub-ca/", certs+"/")
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range natsEnvPasswords(fleetPasswords()) {
		t.Setenv(k, v)
	}
	for i := 0; i < 3; i++ {
		t.Setenv("NATS_ROUTE_"+string(rune('0'+i)), "nats://route:x@nats-"+string(rune('0'+i))+".nats-headless.opswire.svc:6222")
	}
	for k, v := range vars {
		t.Setenv(k, v)
	}
	o, err := natsserver.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
	if err != nil {
		t.Fatalf("nats.conf does not load: %v", err)
	}
	return o
}

// TestHelmFleetEqualsKustomize: the chart with values-fleet-hub.yaml and
// values-fleet-edge.yaml installs what the fleet-hub and fleet-edge overlays
// install, as TestHelmEqualsKustomize holds the other modes: the same
// objects, RBAC object for object, workloads, Services, PDBs and
// NetworkPolicies spec for spec, config.yml loading to the same config, the
// hub's auth.conf byte for byte (its leaf users rendered from fleet.clusters),
// and nats.conf giving nats-server the same users, permissions, domain, leaf
// listener or remote and feature flags. A third cluster in fleet.clusters
// becomes a leaf user, a password variable and a source.
func TestHelmFleetEqualsKustomize(t *testing.T) {
	cases := []struct {
		name, values, overlay string
	}{{"hub", "values-fleet-hub.yaml", "fleet-hub"}, {"edge", "values-fleet-edge.yaml", "fleet-edge"}}
	rbacKinds := map[string]bool{"ServiceAccount": true, "Role": true, "ClusterRole": true, "RoleBinding": true, "ClusterRoleBinding": true}
	specKinds := map[string]bool{"Deployment": true, "StatefulSet": true, "Service": true, "PodDisruptionBudget": true, "NetworkPolicy": true}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := runHelm(t, "lint", "--strict", chartPath(t), "--set", helmFeishu, "-f", filepath.Join(chartPath(t), c.values))
			if err != nil || !strings.Contains(out, "0 chart(s) failed") {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
			chart := helmTemplate(t, helmFeishu, "-f="+filepath.Join(chartPath(t), c.values))
			kust := harness.KustomizeBuild(t, deployPath(t, "overlays", c.overlay))
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
				if h == nil || !(rbacKinds[k.GetKind()] || specKinds[k.GetKind()]) {
					continue
				}
				if hn, kn := comparableObj(h, specKinds[k.GetKind()]), comparableObj(k, specKinds[k.GetKind()]); !reflect.DeepEqual(hn, kn) {
					t.Errorf("%s %s differs at %s", k.GetKind(), k.GetName(), firstDiff("", hn, kn))
				}
			}
			hcfg, err1 := config.Parse([]byte(renderedConfig(t, chart)))
			kcfg, err2 := config.Parse([]byte(renderedConfig(t, kust)))
			if err1 != nil || err2 != nil || !reflect.DeepEqual(hcfg, kcfg) {
				t.Errorf("config.yml: chart and kustomize load differently (%v, %v)", err1, err2)
			}
			auth := func(objs []*unstructured.Unstructured) string {
				s, _, _ := unstructured.NestedString(harness.FindByPrefix(objs, "ConfigMap", "nats-config-").Object, "data", "auth.conf")
				return s
			}
			if h, k := auth(chart), auth(kust); h != k {
				t.Errorf("the chart's auth.conf differs from the overlay's (%d vs %d bytes)", len(h), len(k))
			}
			if c.name == "edge" {
				data := func(objs []*unstructured.Unstructured) map[string]string {
					d, _, _ := unstructured.NestedStringMap(harness.FindByPrefix(objs, "ConfigMap", "opswire-fleet-").Object, "data")
					return d
				}
				if h, k := data(chart), data(kust); !reflect.DeepEqual(h, k) {
					t.Errorf("ConfigMap opswire-fleet: chart %v, kustomize %v", h, k)
				}
			}
			vars := map[string]string{"OPSWIRE_CLUSTER": "a", "NATS_SERVER_NAME": "a-nats-0", "NATS_ROUTE_PASSWORD": "x",
				"NATS_LEAF_URL": "tls://leaf-a:x@nats-hub.example.com:7422"}
			ho, ko := loadNATSConf(t, chart, vars), loadNATSConf(t, kust, vars)
			compareNATSOptions(t, ho, ko)
			type fleetView struct {
				Domain, ServerName string
				LeafPort           int
				LeafTLS, NoAdv     bool
				Remotes            string
				Flags              map[string]bool
				ClusterName        string
			}
			fv := func(o *natsserver.Options) fleetView {
				var remotes []string
				for _, r := range o.LeafNode.Remotes {
					remotes = append(remotes, jsonOf(r.URLs)+" "+r.LocalAccount+" tls="+jsonOf(r.TLSConfig != nil))
				}
				return fleetView{o.JetStreamDomain, o.ServerName, o.LeafNode.Port, o.LeafNode.TLSConfig != nil, o.LeafNode.NoAdvertise,
					strings.Join(remotes, ","), o.FeatureFlags, o.Cluster.Name}
			}
			if h, k := fv(ho), fv(ko); !reflect.DeepEqual(h, k) {
				t.Errorf("nats.conf fleet settings:\n chart     %+v\n kustomize %+v", h, k)
			}
		})
	}

	// The chart's copies are the overlay's files.
	for chartFile, deployFile := range map[string]string{"fleet-hub-auth.conf": "overlays/fleet-hub/auth.conf", "fleet-hub-config.yml": "overlays/fleet-hub/config.yml"} {
		if mustRead(t, filepath.Join(chartPath(t), "files", chartFile)) != mustRead(t, deployPath(t, deployFile)) {
			t.Errorf("deploy/helm/opswire/files/%s differs from deploy/%s", chartFile, deployFile)
		}
	}
	// A third cluster: its leaf user, its password variable, its source.
	chart := helmTemplate(t, helmFeishu, "-f="+filepath.Join(chartPath(t), "values-fleet-hub.yaml"), "fleet.clusters={a,b,prod-eu}")
	cfg, err := config.Parse([]byte(renderedConfig(t, chart)))
	if err != nil || !reflect.DeepEqual(cfg.NATS.OpsSources, []string{"a", "b", "prod-eu"}) {
		t.Errorf("hub with 3 clusters: config %v, opsSources %v", err, cfg.NATS.OpsSources)
	}
	if ref := envFrom(t, podOf(t, chart, "StatefulSet", "nats"), "NATS_LEAF_PROD_EU_PASSWORD"); ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Key != "leaf-prod-eu-password" {
		t.Errorf("hub with 3 clusters: NATS_LEAF_PROD_EU_PASSWORD from %+v", ref)
	}
	t.Setenv("NATS_LEAF_PROD_EU_PASSWORD", "pleaf-prod-eu")
	o := loadNATSConf(t, chart, map[string]string{})
	found := false
	for _, u := range o.Users {
		if u.Username == "leaf-prod-eu" {
			found = reflect.DeepEqual(u.Permissions.Publish.Allow, []string{"ops.prod-eu.>", "fleet.prod-eu.>", "$JSC.R.prod-eu.>"})
		}
	}
	if !found {
		t.Error("hub with 3 clusters: no leaf-prod-eu user limited to its own subjects")
	}
	// Values the chart refuses.
	for _, bad := range [][]string{
		{"fleet.role=spoke"},
		{"fleet.role=hub", "nats.mode=cluster", "nats.tls.enabled=true"},                         // no clusters
		{"fleet.role=edge", "nats.mode=cluster", "nats.tls.enabled=true", "fleet.cluster=a"},     // no hub
		{"fleet.role=edge", "fleet.cluster=a", "fleet.hub=h:7422"},                               // not cluster + TLS
		{"-f=" + filepath.Join(chartPath(t), "values-fleet-hub.yaml"), "fleet.clusters={a,b.c}"}, // not a token
	} {
		args := []string{"template", "opswire", chartPath(t), "--namespace", "opswire", "--set", helmFeishu}
		for _, v := range bad {
			if f, ok := strings.CutPrefix(v, "-f="); ok {
				args = append(args, "-f", f)
			} else {
				args = append(args, "--set", v)
			}
		}
		if out, err := runHelm(t, args...); err == nil {
			t.Errorf("helm template %v rendered:\n%.300s", bad, out)
		}
	}
}
