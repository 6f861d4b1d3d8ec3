package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/test/harness"
)

// The chart's knobs for teams (issue 39): image mirrors, pod settings,
// receivers' secrets, prometheus-operator objects and the GitOps guard. Each
// case renders the chart with one values file and decodes what it checks
// into the typed Kubernetes objects (no schema validator is available here;
// the typed decoding refuses fields of the wrong shape).

// allKnobs sets every value the chart gained for issue 39 (and TestHelmLint
// lints it with --strict).
const allKnobs = `
global: {imageRegistry: mirror.example.com/hub}
secrets:
  feishuURL: https://feishu.invalid/hook
  receivers:
    dingtalk-url: https://oapi.dingtalk.com/robot/send?access_token=t
    dingtalk-secret: SECabc
    wecom-url: https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k
    slack-url: https://hooks.slack.com/services/T/B/x
    teams-url: https://example.webhook.office.com/x
    webhook-url: https://alerts.example.com/opswire
nodeSelector: {pool: infra}
tolerations: [{key: dedicated, operator: Equal, value: infra, effect: NoSchedule}]
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms: [{matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [a, b]}]}]
priorityClassName: opswire-high
podAnnotations: {team.example.com/owner: sre}
podLabels: {team: sre, app.kubernetes.io/name: not-the-selector}
extraEnv: [{name: HTTPS_PROXY, value: "http://proxy:3128"}]
extraVolumes: [{name: corp-ca, configMap: {name: corp-ca}}]
extraVolumeMounts: [{name: corp-ca, mountPath: /etc/corp-ca, readOnly: true}]
cordon:
  image: {registry: other.example.com, repository: team/cordon, tag: v9}
  nodeSelector: {pool: cordon}
  tolerations: [{key: cordon, operator: Exists}]
  podAnnotations: {team.example.com/owner: cordon-team}
  podLabels: {tier: ops}
  extraEnv: [{name: GODEBUG, value: "http2client=0"}]
  extraVolumes: [{name: scratch, emptyDir: {}}]
  extraVolumeMounts: [{name: scratch, mountPath: /scratch}]
report:
  image: {digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
  priorityClassName: report-low
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app.kubernetes.io/name: opswire-report}}}
nats:
  image: {tag: 2.15.4-alpine}
  priorityClassName: system-cluster-critical
  podLabels: {store: jetstream}
  extraEnv: [{name: GOMEMLIMIT, value: 900MiB}]
  extraVolumes: [{name: extra, emptyDir: {}}]
  extraVolumeMounts: [{name: extra, mountPath: /extra}]
serviceMonitor: {enabled: true, labels: {release: kube-prometheus-stack}, interval: 30s, scrapeTimeout: 10s}
clusterLabel: prod-eu
prometheusRule: {enabled: true, labels: {release: kube-prometheus-stack}}
`

// writeValues writes a values file and returns the -f argument helmTemplate takes.
func writeValues(t *testing.T, values string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	return "-f=" + path
}

// receiversConfig is deploy/base/config.yml with the receivers of
// docs/deploy.md ("Receivers' secrets") next to the Feishu one.
// configOfCluster writes deploy/base/config.yml with cluster.name set to
// name (as written, quotes included) after a comment line.
func configOfCluster(t *testing.T, name string) string {
	t.Helper()
	base := mustRead(t, deployPath(t, "base", "config.yml"))
	c := regexp.MustCompile(`(?m)^cluster:\n  name: default\b`).ReplaceAllLiteralString(base, "cluster:\n  # the subjects' token\n  name: "+name)
	if c == base {
		t.Fatal("deploy/base/config.yml: no cluster.name default")
	}
	path := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(path, []byte(c), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func receiversConfig(t *testing.T) string {
	t.Helper()
	base := mustRead(t, deployPath(t, "base", "config.yml"))
	anchor := "    secretEnv: OPSWIRE_FEISHU_SECRET"
	i := strings.Index(base, anchor)
	if i < 0 {
		t.Fatal("deploy/base/config.yml: no Feishu receiver")
	}
	i += strings.IndexByte(base[i:], '\n') + 1
	others := `  - {name: dingtalk, type: dingtalk, urlEnv: OPSWIRE_DINGTALK_URL, secretEnv: OPSWIRE_DINGTALK_SECRET}
  - {name: wecom, type: wecom, urlEnv: OPSWIRE_WECOM_URL}
  - {name: slack, type: slack, urlEnv: OPSWIRE_SLACK_URL}
  - {name: teams, type: teams, urlEnv: OPSWIRE_TEAMS_URL}
  - {name: hook, type: webhook, urlEnv: OPSWIRE_WEBHOOK_URL}
`
	if doc := mustRead(t, filepath.Join(filepath.Dir(deployPath(t)), "docs", "deploy.md")); !strings.Contains(doc, strings.ReplaceAll(others, "  - ", "    - ")) {
		t.Error("docs/deploy.md no longer shows these receivers: keep the doc and this test together")
	}
	path := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(path, []byte(base[:i]+others+base[i:]), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// typed decodes a rendered object into a typed one, refusing unknown fields.
func typed(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if o == nil {
		t.Fatal("object missing")
	}
	data, err := json.Marshal(o.Object)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

// pods returns the pod templates of the services' Deployments and the NATS
// StatefulSet, by name (opswire-<service>, nats).
func pods(t *testing.T, objs []*unstructured.Unstructured) map[string]corev1.PodTemplateSpec {
	t.Helper()
	out := map[string]corev1.PodTemplateSpec{}
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			typed(t, o, &d)
			out[d.Name] = d.Spec.Template
		case "StatefulSet":
			var s appsv1.StatefulSet
			typed(t, o, &s)
			out[s.Name] = s.Spec.Template
		}
	}
	return out
}

func envNamed(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func hasVolume(p corev1.PodSpec, name string) bool {
	for _, v := range p.Volumes {
		if v.Name == name {
			return true
		}
	}
	return false
}

func hasMount(c corev1.Container, name, path string) bool {
	for _, m := range c.VolumeMounts {
		if m.Name == name && m.MountPath == path {
			return true
		}
	}
	return false
}

// Minimal prometheus-operator (monitoring.coreos.com/v1) shapes: the fields
// the chart sets, decoded strictly.
type monitorEndpoint struct {
	Port          string              `json:"port"`
	Path          string              `json:"path"`
	Interval      string              `json:"interval,omitempty"`
	ScrapeTimeout string              `json:"scrapeTimeout,omitempty"`
	Relabelings   []monitorRelabeling `json:"relabelings,omitempty"`
}

type monitorRelabeling struct {
	TargetLabel string `json:"targetLabel"`
	Replacement string `json:"replacement"`
	Action      string `json:"action"`
}

// clusterRelabeling is the relabeling the chart's monitors set the cluster
// label with (docs/observability.md).
func clusterRelabeling(cluster string) []monitorRelabeling {
	return []monitorRelabeling{{TargetLabel: "cluster", Replacement: cluster, Action: "replace"}}
}

type monitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Selector            metav1.LabelSelector `json:"selector"`
		Endpoints           []monitorEndpoint    `json:"endpoints,omitempty"`
		PodMetricsEndpoints []monitorEndpoint    `json:"podMetricsEndpoints,omitempty"`
	} `json:"spec"`
}

func TestHelmValues(t *testing.T) {
	services := harness.Services
	cases := []struct {
		name   string
		values []string
		check  func(t *testing.T, objs []*unstructured.Unstructured)
	}{
		{"images", []string{writeValues(t, allKnobs)}, func(t *testing.T, objs []*unstructured.Unstructured) {
			want := map[string]string{
				"opswire-watcher":  "mirror.example.com/hub/opswire/opswire-watcher:dev",
				"opswire-cordon":   "other.example.com/team/cordon:v9",
				"opswire-cleanup":  "mirror.example.com/hub/opswire/opswire-cleanup:dev",
				"opswire-report":   "mirror.example.com/hub/opswire/opswire-report@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
				"opswire-notifier": "mirror.example.com/hub/opswire/opswire-notifier:dev",
				"nats":             "mirror.example.com/hub/nats:2.15.4-alpine",
			}
			for name, p := range pods(t, objs) {
				if got := p.Spec.Containers[0].Image; got != want[name] {
					t.Errorf("%s image %q, want %q", name, got, want[name])
				}
			}
		}},
		{"nats image as a string, image.registry", []string{helmFeishu, "nats.image=quay.io/nats/nats:2.15.3-alpine", "image.registry=registry.example.com"}, func(t *testing.T, objs []*unstructured.Unstructured) {
			p := pods(t, objs)
			if got := p["nats"].Spec.Containers[0].Image; got != "quay.io/nats/nats:2.15.3-alpine" {
				t.Errorf("nats image %q", got)
			}
			if got := p["opswire-watcher"].Spec.Containers[0].Image; got != "registry.example.com/opswire/opswire-watcher:dev" {
				t.Errorf("watcher image %q", got)
			}
		}},
		{"nats image string behind global.imageRegistry", []string{helmFeishu, "nats.image=nats:2.15.3-alpine", "global.imageRegistry=mirror.example.com", "image.registry=ignored.example.com"}, func(t *testing.T, objs []*unstructured.Unstructured) {
			p := pods(t, objs)
			if got := p["nats"].Spec.Containers[0].Image; got != "mirror.example.com/nats:2.15.3-alpine" {
				t.Errorf("nats image %q", got)
			}
			if got := p["opswire-notifier"].Spec.Containers[0].Image; got != "mirror.example.com/opswire/opswire-notifier:dev" {
				t.Errorf("notifier image %q: global.imageRegistry wins over image.registry", got)
			}
		}},
		{"pod settings", []string{writeValues(t, allKnobs)}, func(t *testing.T, objs []*unstructured.Unstructured) {
			ps := pods(t, objs)
			if len(ps) != 6 {
				t.Fatalf("%d pod templates, want 5 Deployments and the StatefulSet", len(ps))
			}
			for name, p := range ps {
				s, c := p.Spec, p.Spec.Containers[0]
				own := map[string]bool{"opswire-cordon": true, "opswire-report": true, "nats": true}[name]
				wantNode, wantPrio, wantOwner := "infra", "opswire-high", "sre"
				switch name {
				case "opswire-cordon":
					wantNode, wantOwner = "cordon", "cordon-team"
				case "opswire-report":
					wantPrio = "report-low"
				case "nats":
					wantPrio = "system-cluster-critical"
				}
				if s.NodeSelector["pool"] != wantNode || len(s.NodeSelector) != 1 {
					t.Errorf("%s nodeSelector %v, want pool=%s", name, s.NodeSelector, wantNode)
				}
				if s.PriorityClassName != wantPrio {
					t.Errorf("%s priorityClassName %q, want %q", name, s.PriorityClassName, wantPrio)
				}
				if len(s.Tolerations) != 1 || (name == "opswire-cordon") != (s.Tolerations[0].Key == "cordon") {
					t.Errorf("%s tolerations %+v (own %v)", name, s.Tolerations, own)
				}
				if p.Annotations["team.example.com/owner"] != wantOwner {
					t.Errorf("%s annotations %v, want owner %s", name, p.Annotations, wantOwner)
				}
				// The chart's own annotations and selector labels stay.
				if _, ok := p.Annotations["prometheus.io/scrape"]; !ok {
					t.Errorf("%s lost prometheus.io/scrape: %v", name, p.Annotations)
				}
				if p.Labels["app.kubernetes.io/name"] != name || p.Labels["team"] != "sre" || p.Labels["app.kubernetes.io/part-of"] != "opswire" {
					t.Errorf("%s labels %v: want the chart's with team=sre added", name, p.Labels)
				}
				if (name == "opswire-cordon") != (p.Labels["tier"] == "ops") || (name == "nats") != (p.Labels["store"] == "jetstream") {
					t.Errorf("%s labels %v: a component's podLabels only on its pods", name, p.Labels)
				}
				a := s.Affinity
				if a == nil || a.PodAntiAffinity == nil {
					t.Fatalf("%s affinity %+v: no podAntiAffinity", name, a)
				}
				// report's own affinity replaces the top-level one (no nodeAffinity).
				if (a.NodeAffinity == nil) != (name == "opswire-report") {
					t.Errorf("%s nodeAffinity %+v: want the top-level one added to the chart's podAntiAffinity, except where the service has its own affinity", name, a.NodeAffinity)
				}
				switch name {
				case "nats":
					if len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
						t.Errorf("nats lost its required anti-affinity: %+v", a.PodAntiAffinity)
					}
				case "opswire-report":
					if n := len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution); n != 0 || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
						t.Errorf("report's own podAntiAffinity does not replace the chart's: %+v", a.PodAntiAffinity)
					}
				default:
					if len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
						t.Errorf("%s lost its preferred anti-affinity: %+v", name, a.PodAntiAffinity)
					}
				}
				if name == "nats" {
					if e := envNamed(c, "GOMEMLIMIT"); e == nil || envNamed(c, "HTTPS_PROXY") != nil {
						t.Errorf("nats env: want nats.extraEnv only, not the services' extraEnv")
					}
					if !hasVolume(s, "extra") || !hasMount(c, "extra", "/extra") || hasVolume(s, "corp-ca") {
						t.Errorf("nats volumes: want nats.extraVolumes/extraVolumeMounts only")
					}
					continue
				}
				if e := envNamed(c, "HTTPS_PROXY"); e == nil || e.Value != "http://proxy:3128" {
					t.Errorf("%s: extraEnv HTTPS_PROXY missing", name)
				}
				if (name == "opswire-cordon") != (envNamed(c, "GODEBUG") != nil) {
					t.Errorf("%s: cordon.extraEnv belongs to cordon alone", name)
				}
				if envNamed(c, "OPSWIRE_NATS_PASSWORD") == nil {
					t.Errorf("%s: the chart's env lost", name)
				}
				if !hasVolume(s, "corp-ca") || !hasMount(c, "corp-ca", "/etc/corp-ca") || !hasVolume(s, "config") {
					t.Errorf("%s: extraVolumes/extraVolumeMounts missing (or config lost)", name)
				}
				if (name == "opswire-cordon") != (hasVolume(s, "scratch") && hasMount(c, "scratch", "/scratch")) {
					t.Errorf("%s: cordon.extraVolumes belong to cordon alone", name)
				}
			}
		}},
		{"receivers", []string{writeValues(t, allKnobs)}, func(t *testing.T, objs []*unstructured.Unstructured) {
			var s corev1.Secret
			typed(t, harness.FindObj(objs, "Secret", "opswire-secrets"), &s)
			n := pods(t, objs)["opswire-notifier"].Spec.Containers[0]
			for key, env := range map[string]string{"dingtalk-url": "OPSWIRE_DINGTALK_URL", "dingtalk-secret": "OPSWIRE_DINGTALK_SECRET",
				"wecom-url": "OPSWIRE_WECOM_URL", "slack-url": "OPSWIRE_SLACK_URL", "teams-url": "OPSWIRE_TEAMS_URL", "webhook-url": "OPSWIRE_WEBHOOK_URL",
				"feishu-url": "OPSWIRE_FEISHU_URL"} {
				if s.StringData[key] == "" {
					t.Errorf("Secret lacks %s", key)
				}
				e := envNamed(n, env)
				if e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "opswire-secrets" || e.ValueFrom.SecretKeyRef.Key != key {
					t.Errorf("notifier: %s not from Secret opswire-secrets key %s (%+v)", env, key, e)
				}
			}
			if s.StringData["dingtalk-url"] != "https://oapi.dingtalk.com/robot/send?access_token=t" {
				t.Errorf("dingtalk-url %q", s.StringData["dingtalk-url"])
			}
			for _, svc := range services[:4] {
				if envNamed(pods(t, objs)["opswire-"+svc].Spec.Containers[0], "OPSWIRE_SLACK_URL") != nil {
					t.Errorf("opswire-%s got a receiver's URL", svc)
				}
			}
		}},
		{"receivers from existingSecret, no Feishu", []string{"secrets.existingSecret=team-secrets", "secrets.receivers.wecom-url="}, func(t *testing.T, objs []*unstructured.Unstructured) {
			if harness.FindObj(objs, "Secret", "opswire-secrets") != nil {
				t.Error("existingSecret: the chart made a Secret")
			}
			e := envNamed(pods(t, objs)["opswire-notifier"].Spec.Containers[0], "OPSWIRE_WECOM_URL")
			if e == nil || e.ValueFrom.SecretKeyRef.Name != "team-secrets" || e.ValueFrom.SecretKeyRef.Key != "wecom-url" {
				t.Errorf("OPSWIRE_WECOM_URL %+v, want key wecom-url of team-secrets", e)
			}
		}},
		{"receivers without Feishu", []string{"secrets.receivers.slack-url=https://hooks.slack.com/services/x"}, func(t *testing.T, objs []*unstructured.Unstructured) {
			var s corev1.Secret
			typed(t, harness.FindObj(objs, "Secret", "opswire-secrets"), &s)
			if v, ok := s.StringData["feishu-url"]; !ok || v != "" || s.StringData["slack-url"] == "" {
				t.Errorf("Secret %v: want feishu-url empty (the pods' secretKeyRef needs the key) and slack-url", s.StringData)
			}
		}},
		{"receivers in config", []string{writeValues(t, allKnobs), "--set-file=config=" + receiversConfig(t)}, func(t *testing.T, objs []*unstructured.Unstructured) {
			// The documented config loads with the services' own loader, and
			// every urlEnv/secretEnv it names is set on the notifier from the Secret.
			got, _, _ := unstructured.NestedString(harness.FindByPrefix(objs, "ConfigMap", "opswire-config-").Object, "data", "config.yml")
			cfg, err := config.Parse([]byte(got))
			if err != nil {
				t.Fatalf("config with the other receivers: %v", err)
			}
			n := pods(t, objs)["opswire-notifier"].Spec.Containers[0]
			if len(cfg.Notifier.Receivers) != 6 {
				t.Fatalf("%d receivers, want feishu and the five others", len(cfg.Notifier.Receivers))
			}
			for _, r := range cfg.Notifier.Receivers {
				for _, env := range []string{r.URLEnv, r.SecretEnv} {
					if e := envNamed(n, env); env != "" && (e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
						t.Errorf("receiver %s (%s): %s is not set on the notifier from the Secret", r.Name, r.Type, env)
					}
				}
			}
		}},
		{"serviceMonitor", []string{writeValues(t, allKnobs)}, func(t *testing.T, objs []*unstructured.Unstructured) {
			var sm monitor
			typed(t, harness.FindObj(objs, "ServiceMonitor", "opswire"), &sm)
			if sm.APIVersion != "monitoring.coreos.com/v1" || sm.Labels["release"] != "kube-prometheus-stack" || !reflect.DeepEqual(sm.Spec.NamespaceSelector.MatchNames, []string{"opswire"}) {
				t.Errorf("ServiceMonitor %+v", sm)
			}
			if len(sm.Spec.Endpoints) != 1 || !reflect.DeepEqual(sm.Spec.Endpoints[0], monitorEndpoint{"http", "/metrics", "30s", "10s", clusterRelabeling("prod-eu")}) {
				t.Errorf("ServiceMonitor endpoints %+v", sm.Spec.Endpoints)
			}
			sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
			if err != nil {
				t.Fatal(err)
			}
			ps := pods(t, objs)
			selected := 0
			for _, o := range objs {
				if o.GetKind() != "Service" {
					continue
				}
				var svc corev1.Service
				typed(t, o, &svc)
				if !sel.Matches(labels.Set(svc.Labels)) {
					continue
				}
				selected++
				p, ok := ps[strings.TrimSuffix(svc.Name, "-metrics")]
				if !ok || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(p.Labels)) {
					t.Errorf("Service %s selects no service's pods", svc.Name)
					continue
				}
				if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "http" || svc.Spec.Ports[0].TargetPort.StrVal != "http" || p.Spec.Containers[0].Ports[0].Name != "http" {
					t.Errorf("Service %s ports %+v", svc.Name, svc.Spec.Ports)
				}
			}
			if selected != len(services) {
				t.Errorf("the ServiceMonitor selects %d Services, want one per service (%d), NATS's not", selected, len(services))
			}
		}},
		{"podMonitor", []string{helmFeishu, "podMonitor.enabled=true", "podMonitor.labels.release=prom"}, func(t *testing.T, objs []*unstructured.Unstructured) {
			var pm monitor
			typed(t, harness.FindObj(objs, "PodMonitor", "opswire"), &pm)
			if pm.Labels["release"] != "prom" || len(pm.Spec.PodMetricsEndpoints) != 1 || !reflect.DeepEqual(pm.Spec.PodMetricsEndpoints[0], monitorEndpoint{Port: "http", Path: "/metrics", Relabelings: clusterRelabeling("default")}) {
				t.Errorf("PodMonitor %+v", pm)
			}
			sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
			if err != nil {
				t.Fatal(err)
			}
			for name, p := range pods(t, objs) {
				if sel.Matches(labels.Set(p.Labels)) != (name != "nats") {
					t.Errorf("PodMonitor selects %s: %v", name, sel.Matches(labels.Set(p.Labels)))
				}
			}
			if harness.FindObj(objs, "ServiceMonitor", "opswire") != nil || harness.FindObj(objs, "Service", "opswire-watcher-metrics") != nil {
				t.Error("podMonitor alone rendered the ServiceMonitor's objects")
			}
		}},
		{"podMonitor on a fleet hub", []string{helmFeishu, "-f=" + filepath.Join(chartPath(t), "values-fleet-hub.yaml"), "podMonitor.enabled=true"}, func(t *testing.T, objs []*unstructured.Unstructured) {
			var pm monitor
			typed(t, harness.FindObj(objs, "PodMonitor", "opswire"), &pm)
			if got := pm.Spec.Selector.MatchExpressions[0].Values; !reflect.DeepEqual(got, []string{"opswire-notifier"}) {
				t.Errorf("hub PodMonitor selects %v, want the notifier only", got)
			}
			if got := pm.Spec.PodMetricsEndpoints[0].Relabelings; !reflect.DeepEqual(got, clusterRelabeling("hub")) {
				t.Errorf("hub PodMonitor relabelings %+v, want cluster hub (its config's cluster.name)", got)
			}
		}},
		{"podMonitor on a fleet edge", []string{helmFeishu, "-f=" + filepath.Join(chartPath(t), "values-fleet-edge.yaml"), "fleet.cluster=edge-7", "podMonitor.enabled=true"}, func(t *testing.T, objs []*unstructured.Unstructured) {
			var pm monitor
			typed(t, harness.FindObj(objs, "PodMonitor", "opswire"), &pm)
			if got := pm.Spec.PodMetricsEndpoints[0].Relabelings; !reflect.DeepEqual(got, clusterRelabeling("edge-7")) {
				t.Errorf("edge PodMonitor relabelings %+v, want cluster edge-7 (fleet.cluster)", got)
			}
		}},
		{"podMonitor with the cluster of a given config", []string{helmFeishu, "--set-file=config=" + configOfCluster(t, `"prod-us"`), "podMonitor.enabled=true"}, func(t *testing.T, objs []*unstructured.Unstructured) {
			var pm monitor
			typed(t, harness.FindObj(objs, "PodMonitor", "opswire"), &pm)
			if got := pm.Spec.PodMetricsEndpoints[0].Relabelings; !reflect.DeepEqual(got, clusterRelabeling("prod-us")) {
				t.Errorf("PodMonitor relabelings %+v, want cluster prod-us (config's cluster.name)", got)
			}
		}},
		{"podMonitor without the cluster label", []string{helmFeishu, "podMonitor.enabled=true", "clusterLabel=false"}, func(t *testing.T, objs []*unstructured.Unstructured) {
			var pm monitor
			typed(t, harness.FindObj(objs, "PodMonitor", "opswire"), &pm)
			if got := pm.Spec.PodMetricsEndpoints[0].Relabelings; got != nil {
				t.Errorf("clusterLabel=false: relabelings %+v, want none (external_labels set the cluster)", got)
			}
		}},
		{"prometheusRule with another runbook URL", []string{helmFeishu, "prometheusRule.enabled=true", "prometheusRule.runbookBaseURL=https://wiki.example.com/opswire/runbook/"}, func(t *testing.T, objs []*unstructured.Unstructured) {
			o := harness.FindObj(objs, "PrometheusRule", "opswire")
			data, _ := json.Marshal(o.Object["spec"])
			var got rulesFile
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, g := range got.Groups {
				for _, r := range g.Rules {
					if want := "https://wiki.example.com/opswire/runbook#" + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
						t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
					}
					n++
				}
			}
			if n == 0 {
				t.Error("no rules")
			}
		}},
		{"prometheusRule", []string{writeValues(t, allKnobs)}, func(t *testing.T, objs []*unstructured.Unstructured) {
			o := harness.FindObj(objs, "PrometheusRule", "opswire")
			if o == nil || o.GetAPIVersion() != "monitoring.coreos.com/v1" || o.GetLabels()["release"] != "kube-prometheus-stack" {
				t.Fatalf("PrometheusRule %v", o)
			}
			var got rulesFile
			spec, _ := o.Object["spec"].(map[string]any)
			data, _ := json.Marshal(spec)
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&got); err != nil {
				t.Fatal(err)
			}
			if want := readRules(t, deployPath(t, "prometheus", "opswire-rules.yaml"), false); !reflect.DeepEqual(got, want) || len(want.Groups) == 0 {
				t.Error("the PrometheusRule's groups are not deploy/prometheus/opswire-rules.yaml's")
			}
		}},
		{"defaults add nothing", []string{helmFeishu}, func(t *testing.T, objs []*unstructured.Unstructured) {
			for _, o := range objs {
				if o.GetAPIVersion() == "monitoring.coreos.com/v1" || strings.HasSuffix(o.GetName(), "-metrics") {
					t.Errorf("default values render %s %s", o.GetKind(), o.GetName())
				}
			}
			for name, p := range pods(t, objs) {
				s := p.Spec
				if s.NodeSelector != nil || s.Tolerations != nil || s.PriorityClassName != "" || s.Affinity.NodeAffinity != nil {
					t.Errorf("%s: default scheduling changed: %+v", name, s)
				}
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.check(t, helmTemplate(t, c.values...)) })
	}

	t.Run("refusals", func(t *testing.T) {
		for _, c := range []struct{ set, want string }{
			{"gitops=true," + helmFeishu, "gitops: true needs secrets.existingSecret"},
			{"serviceMonitor.enabled=true,podMonitor.enabled=true,secrets.existingSecret=s", "enable one of them"},
			{"secrets.receivers.Slack_URL=x,secrets.existingSecret=s", `secrets.receivers key "Slack_URL"`},
			{"secrets.receivers.nats-watcher-password=x,secrets.existingSecret=s", "one of the chart's own keys"},
			{"secrets.receivers.feishu-url=x,secrets.existingSecret=s", "one of the chart's own keys"},
		} {
			out, err := runHelm(t, "template", "opswire", chartPath(t), "--set", c.set)
			if err == nil || !strings.Contains(out, c.want) {
				t.Errorf("--set %s: err %v, output %q; want a refusal naming %q", c.set, err, out, c.want)
			}
		}
		// The GitOps refusal names every key of the Secret the chart makes.
		out, _ := runHelm(t, "template", "opswire", chartPath(t), "--set", "gitops=true")
		var s corev1.Secret
		typed(t, harness.FindObj(helmTemplate(t, helmFeishu), "Secret", "opswire-secrets"), &s)
		for k := range s.StringData {
			if !strings.Contains(out, k) {
				t.Errorf("the gitops refusal does not name key %s", k)
			}
		}
		if objs := helmTemplate(t, "gitops=true", "secrets.existingSecret=s"); harness.FindObj(objs, "Secret", "opswire-secrets") != nil {
			t.Error("gitops with existingSecret rendered a Secret")
		}
	})
}
