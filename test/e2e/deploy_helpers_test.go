package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/opswire/opswire/test/harness"
)

// deployServices are the five services, in the order they are started.
var deployServices = []string{"watcher", "cordon", "cleanup", "report", "notifier"}

// deployPath is a path under deploy/ in the repository.
func deployPath(t *testing.T, parts ...string) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(append([]string{root, "deploy"}, parts...)...)
}

// kustomizeBuild renders a kustomization directory with the kustomize Go API
// (what `kubectl kustomize` runs) and returns its objects.
func kustomizeBuild(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatalf("kustomize build %s: %v", dir, err)
		}
		// A JSON round trip gives the value types the apimachinery helpers expect (int64, not int).
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			t.Fatalf("kustomize build %s: %v", dir, err)
		}
		objs = append(objs, u)
	}
	return objs
}

// findObj returns the rendered object of that kind and name, or nil.
func findObj(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// findByPrefix returns the rendered object of that kind whose name starts
// with prefix (generated ConfigMaps carry a hash suffix).
func findByPrefix(objs []*unstructured.Unstructured, kind, prefix string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && strings.HasPrefix(o.GetName(), prefix) {
			return o
		}
	}
	return nil
}

// serverSideApply applies every object to the API server with server-side
// apply and strict field validation, namespaces first, so each object is
// checked against the real schemas.
func serverSideApply(t *testing.T, cfg *rest.Config, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ordered := append([]*unstructured.Unstructured(nil), objs...)
	sort.SliceStable(ordered, func(i, j int) bool {
		return ordered[i].GetKind() == "Namespace" && ordered[j].GetKind() != "Namespace"
	})
	force := true
	for _, o := range ordered {
		gvk := o.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: no API for it: %v", gvk, o.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			if o.GetNamespace() == "" {
				t.Fatalf("%s %s is namespaced but has no namespace", gvk.Kind, o.GetName())
			}
			ri = dyn.Resource(mapping.Resource).Namespace(o.GetNamespace())
		}
		data, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{
			FieldManager: "opswire-e2e", Force: &force, FieldValidation: "Strict",
		})
		if err != nil {
			t.Fatalf("server-side apply %s %s/%s: %v", gvk.Kind, o.GetNamespace(), o.GetName(), err)
		}
	}
}

// secretFromTemplate renders deploy/secret.example.yaml with the given values
// in place of CHANGE-ME (the template must name exactly these keys).
func secretFromTemplate(t *testing.T, values map[string]string) *unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(deployPath(t, "secret.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(raw, &obj); err != nil {
		t.Fatalf("secret.example.yaml: %v", err)
	}
	u := &unstructured.Unstructured{Object: obj}
	data, _, _ := unstructured.NestedStringMap(obj, "stringData")
	for k := range data {
		if _, ok := values[k]; !ok {
			t.Fatalf("secret.example.yaml has key %s the test does not fill", k)
		}
	}
	for k, v := range values {
		if _, ok := data[k]; !ok {
			t.Fatalf("secret.example.yaml lacks key %s", k)
		}
		data[k] = v
	}
	if err := unstructured.SetNestedStringMap(u.Object, data, "stringData"); err != nil {
		t.Fatal(err)
	}
	return u
}

// deployPasswords are the test's NATS passwords, one per user (each starts
// with a letter, as NATS requires of a password given through a variable).
func deployPasswords() map[string]string {
	pw := map[string]string{}
	for _, u := range append(append([]string(nil), deployServices...), "audit", "route") {
		pw[u] = "p" + u + "-7c41e2d9a8b3"
	}
	return pw
}

// startDeployNATS starts the harness's nats-server with deploy/'s users and
// permissions (base/nats/auth.conf), the passwords given as the environment
// variables the StatefulSet sets from the Secret.
func startDeployNATS(t *testing.T) (*harness.NATS, map[string]string) {
	t.Helper()
	pw := deployPasswords()
	for u, p := range pw {
		t.Setenv("NATS_"+strings.ToUpper(u)+"_PASSWORD", p)
	}
	return harness.StartNATS(t, harness.WithConfigFile(deployPath(t, "base", "nats", "auth.conf"))), pw
}

// natsUser connects as one of deploy/'s NATS users and records the
// asynchronous errors (permission violations) the server reports.
type natsUser struct {
	nc   *nats.Conn
	mu   sync.Mutex
	errs []error
}

// Its replies use the user's own inbox prefix, as the services' do
// (natsx.InboxPrefix): the deploy allows each user only _INBOX_<user>.>.
func connectAs(t *testing.T, n *harness.NATS, user, password string) *natsUser {
	t.Helper()
	u := &natsUser{}
	u.nc = n.Connect(t, nats.UserInfo(user, password), nats.CustomInboxPrefix("_INBOX_"+user), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		u.mu.Lock()
		u.errs = append(u.errs, err)
		u.mu.Unlock()
	}))
	return u
}

// violation waits until the server reported a permission violation that
// mentions subject.
func (u *natsUser) violation(t *testing.T, subject string) {
	t.Helper()
	harness.Eventually(t, 5*time.Second, "permissions violation for "+subject, func() bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		for _, err := range u.errs {
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
				return true
			}
		}
		return false
	})
}

// forbidden asserts that an API call was refused by RBAC (403).
func forbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("%s: want 403 Forbidden, got %v", what, err)
	}
}

// deepMerge sets every key of over into base (maps merge, other values replace).
func deepMerge(base, over map[string]any) {
	for k, v := range over {
		if bm, ok := base[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok {
				deepMerge(bm, om)
				continue
			}
		}
		base[k] = v
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// deploymentEnv is the literal environment (value, not valueFrom) of the
// Deployment's first container, as NAME=value: a test process then runs with
// the settings the manifests give the service.
func deploymentEnv(t *testing.T, objs []*unstructured.Unstructured, name string) []string {
	t.Helper()
	d := findObj(objs, "Deployment", name)
	if d == nil {
		t.Fatalf("no Deployment %s rendered", name)
	}
	containers, _, err := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if err != nil || len(containers) == 0 {
		t.Fatalf("Deployment %s has no containers (%v)", name, err)
	}
	env, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "env")
	var out []string
	for _, e := range env {
		m := e.(map[string]any)
		if v, ok := m["value"].(string); ok {
			out = append(out, m["name"].(string)+"="+v)
		}
	}
	return out
}

// liveMsgs keeps every message of a core subscription: how the audit user,
// which may not create consumers, watches OPS.
type liveMsgs struct {
	mu   sync.Mutex
	msgs []harness.Msg
}

func subscribeLive(t *testing.T, nc *nats.Conn, subj string) *liveMsgs {
	t.Helper()
	l := &liveMsgs{}
	sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
		l.mu.Lock()
		l.msgs = append(l.msgs, harness.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
		l.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return l
}

// WaitFor polls until a message matches.
func (l *liveMsgs) WaitFor(t *testing.T, timeout time.Duration, what string, match func(harness.Msg) bool) {
	t.Helper()
	harness.Eventually(t, timeout, what, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, m := range l.msgs {
			if match(m) {
				return true
			}
		}
		return false
	})
}
