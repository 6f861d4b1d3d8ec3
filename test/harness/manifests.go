package harness

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

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
)

// KustomizeBuild renders a kustomization directory with the kustomize Go API
// (what `kubectl kustomize` runs) and returns its objects.
func KustomizeBuild(t testing.TB, dir string) []*unstructured.Unstructured {
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

// FindObj returns the rendered object of that kind and name, or nil.
func FindObj(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// FindByPrefix returns the rendered object of that kind whose name starts
// with prefix (generated ConfigMaps carry a hash suffix).
func FindByPrefix(objs []*unstructured.Unstructured, kind, prefix string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && strings.HasPrefix(o.GetName(), prefix) {
			return o
		}
	}
	return nil
}

// ServerSideApply applies every object to the API server with server-side
// apply and strict field validation, namespaces first, so each object is
// checked against the real schemas.
func ServerSideApply(t testing.TB, cfg *rest.Config, objs []*unstructured.Unstructured) {
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

// DeploymentEnv is the literal environment (name=value, no valueFrom) of the
// first container of a rendered Deployment: the settings deploy/ gives a
// service (OPSWIRE_NATS_USER, OPSWIRE_MANAGE_STREAMS…).
func DeploymentEnv(t testing.TB, objs []*unstructured.Unstructured, name string) []string {
	t.Helper()
	d := FindObj(objs, "Deployment", name)
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
