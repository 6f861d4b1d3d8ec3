//go:build bench

package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/opswire/opswire/test/harness"
)

// fakeAPI is the least of a Kubernetes API server that opswire-watcher
// needs, serving a synthetic cluster from memory: pods and nodes by LIST
// (paged) or by WATCH (with sendInitialEvents, the streaming list client-go
// uses), Leases for leader election, and Events. A real kube-apiserver with
// 150,000 pods needs etcd and minutes of writes; the watcher's memory only
// depends on what it is sent. Objects are rendered from one realistic JSON
// template per kind (a Deployment replica as in the watcher's own
// benchmarks), so every pod is decoded afresh by the client.
type fakeAPI struct {
	t            testing.TB
	pods, nodes  int
	podTmpl      []byte
	nodeTmpl     []byte
	rv           string
	mu           sync.Mutex
	leases       map[string]*coordinationv1.Lease
	leaseRV      int
	unknownPaths map[string]bool
}

func startFakeAPI(t testing.TB, pods, nodes int) (*fakeAPI, *httptest.Server) {
	f := &fakeAPI{t: t, pods: pods, nodes: nodes, podTmpl: podTemplateJSON(t), nodeTmpl: nodeTemplateJSON(t), rv: "1000",
		leases: map[string]*coordinationv1.Lease{}, unknownPaths: map[string]bool{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

// kubeconfig writes a kubeconfig for the fake server.
func (f *fakeAPI) kubeconfig(t testing.TB, url string) string {
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: %s
contexts:
- name: fake
  context:
    cluster: fake
    user: fake
current-context: fake
users:
- name: fake
  user:
    token: fake
`, url)
	return harness.WriteConfig(t, cfg)
}

func (f *fakeAPI) pod(i int) []byte {
	ns, name := fmt.Sprintf("ns-%03d", i%200), fmt.Sprintf("web-7d9f8c6b5-%06d", i)
	r := strings.NewReplacer("@NS@", ns, "@NAME@", name, "@UID@", fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
		"@NODE@", fmt.Sprintf("node-%04d", i%f.nodes), "@RV@", strconv.Itoa(200+i))
	return []byte(r.Replace(string(f.podTmpl)))
}

func (f *fakeAPI) node(i int) []byte {
	name := fmt.Sprintf("node-%04d", i)
	r := strings.NewReplacer("@NAME@", name, "@UID@", fmt.Sprintf("node-uid-%04d", i), "@RV@", strconv.Itoa(100+i))
	return []byte(r.Replace(string(f.nodeTmpl)))
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	q := r.URL.Query()
	switch {
	case path == "/api/v1/pods":
		f.collection(w, r, "PodList", "Pod", f.pods, f.pod)
	case path == "/api/v1/nodes":
		f.collection(w, r, "NodeList", "Node", f.nodes, f.node)
	case strings.HasPrefix(path, "/apis/coordination.k8s.io/v1/namespaces/") && strings.Contains(path, "/leases"):
		f.lease(w, r)
	case strings.HasSuffix(path, "/events") && r.Method == http.MethodPost:
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	default:
		f.mu.Lock()
		if !f.unknownPaths[path] {
			f.unknownPaths[path] = true
			f.t.Logf("fake API: %s %s?%s not served", r.Method, path, q.Encode())
		}
		f.mu.Unlock()
		status(w, http.StatusNotFound, "NotFound")
	}
}

// collection answers a LIST (paged by limit/continue) or a WATCH (the
// initial events when asked for, a bookmark, then nothing until the client
// goes).
func (f *fakeAPI) collection(w http.ResponseWriter, r *http.Request, listKind, kind string, n int, item func(int) []byte) {
	q := r.URL.Query()
	w.Header().Set("Content-Type", "application/json")
	if q.Get("watch") == "true" || q.Get("watch") == "1" {
		fl, _ := w.(http.Flusher)
		if q.Get("sendInitialEvents") == "true" {
			bw := &bytes.Buffer{}
			for i := range n {
				bw.WriteString(`{"type":"ADDED","object":`)
				bw.Write(item(i))
				bw.WriteString("}\n")
				if bw.Len() > 1<<20 {
					if _, err := w.Write(bw.Bytes()); err != nil {
						return
					}
					bw.Reset()
				}
			}
			fmt.Fprintf(bw, `{"type":"BOOKMARK","object":{"kind":%q,"apiVersion":"v1","metadata":{"resourceVersion":%q,"annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n", kind, f.rv)
			if _, err := w.Write(bw.Bytes()); err != nil {
				return
			}
		}
		if fl != nil {
			fl.Flush()
		}
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Minute):
		}
		return
	}
	start := 0
	if c := q.Get("continue"); c != "" {
		start, _ = strconv.Atoi(c)
	}
	end := n
	if l, err := strconv.Atoi(q.Get("limit")); err == nil && l > 0 && start+l < n {
		end = start + l
	}
	cont := ""
	if end < n {
		cont = strconv.Itoa(end)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"kind":%q,"apiVersion":"v1","metadata":{"resourceVersion":%q,"continue":%q},"items":[`, listKind, f.rv, cont)
	for i := start; i < end; i++ {
		if i > start {
			b.WriteByte(',')
		}
		b.Write(item(i))
	}
	b.WriteString("]}")
	_, _ = w.Write(b.Bytes())
}

// lease keeps Leases in memory (GET, POST, PUT), enough for leader election.
func (f *fakeAPI) lease(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rest := strings.TrimPrefix(r.URL.Path, "/apis/coordination.k8s.io/v1/namespaces/")
	ns, after, _ := strings.Cut(rest, "/leases")
	name := strings.TrimPrefix(after, "/")
	switch r.Method {
	case http.MethodGet:
		l, ok := f.leases[ns+"/"+name]
		if !ok {
			status(w, http.StatusNotFound, "NotFound")
			return
		}
		writeJSON(w, http.StatusOK, l)
	case http.MethodPost, http.MethodPut:
		body, _ := io.ReadAll(r.Body)
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, &coordinationv1.Lease{})
		l, ok := obj.(*coordinationv1.Lease)
		if err != nil || !ok {
			status(w, http.StatusBadRequest, "BadRequest")
			return
		}
		key := ns + "/" + l.Name
		if r.Method == http.MethodPost && f.leases[key] != nil {
			status(w, http.StatusConflict, "AlreadyExists")
			return
		}
		f.leaseRV++
		l.ResourceVersion = strconv.Itoa(f.leaseRV)
		l.Namespace = ns
		f.leases[key] = l
		code := http.StatusOK
		if r.Method == http.MethodPost {
			code = http.StatusCreated
		}
		writeJSON(w, code, l)
	default:
		status(w, http.StatusMethodNotAllowed, "MethodNotAllowed")
	}
}

func writeJSON(w http.ResponseWriter, code int, obj runtime.Object) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	gvks, _, _ := scheme.Scheme.ObjectKinds(obj)
	if len(gvks) > 0 {
		obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	}
	_ = json.NewEncoder(w).Encode(obj)
}

func status(w http.ResponseWriter, code int, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":%q,"code":%d}`, reason, code)
}

// podTemplateJSON is a Deployment replica as the API server returns it (two
// containers with resources, env, probes and mounts, managed fields, owner
// reference, conditions and container statuses), with @NS@, @NAME@, @UID@,
// @NODE@ and @RV@ to fill in.
func podTemplateJSON(t testing.TB) []byte {
	ts := metav1.NewTime(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC))
	yes := true
	i64 := func(v int64) *int64 { return &v }
	container := func(name, image string) corev1.Container {
		return corev1.Container{
			Name: name, Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			Env: []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}, {Name: "REGION", Value: "eu-west-1"},
				{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"},
				{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(8080)}},
				PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3},
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		}
	}
	cstatus := func(name, image string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Image: image, ImageID: image + "@sha256:9b2a7c1f5e0d4c3b8a7f6e5d4c3b2a190817263544536271809a8b7c6d5e4f30",
			ContainerID: "containerd://4f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff0",
			Ready:       true, Started: &yes, RestartCount: 3, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: ts}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled", FinishedAt: ts}}}
	}
	fields := `{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"0c6f0a53-54f5-4d8e-9d0b-2f4a3c1b7e91\"}":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:env":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:ports":{},"f:readinessProbe":{},"f:resources":{},"f:volumeMounts":{}},"k:{\"name\":\"proxy\"}":{".":{},"f:image":{},"f:name":{},"f:resources":{}}},"f:dnsPolicy":{},"f:enableServiceLinks":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{},"f:volumes":{}}}`
	p := corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "@NS@", Name: "@NAME@", UID: "@UID@", ResourceVersion: "@RV@",
			GenerateName: "web-7d9f8c6b5-", CreationTimestamp: ts,
			Labels:          map[string]string{"app": "web", "pod-template-hash": "7d9f8c6b5", "team": "payments", "tier": "frontend"},
			Annotations:     map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-05-01T09:58:00Z", "prometheus.io/scrape": "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9f8c6b5", UID: "0c6f0a53-54f5-4d8e-9d0b-2f4a3c1b7e91", Controller: &yes, BlockOwnerDeletion: &yes}},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &ts, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}},
			},
		},
		Spec: corev1.PodSpec{
			NodeName:   "@NODE@",
			Containers: []corev1.Container{container("app", "registry.example.com/payments/web:1.42.0"), container("proxy", "registry.example.com/mesh/proxy:2.3.1")},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-config"}}}},
				{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: i64(3607)}}}}}}},
			RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSClusterFirst, ServiceAccountName: "web", SchedulerName: "default-scheduler",
			TerminationGracePeriodSeconds: i64(30),
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: i64(300)},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: i64(300)}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, HostIP: "10.0.12.34", PodIP: "10.244.3.17", PodIPs: []corev1.PodIP{{IP: "10.244.3.17"}}, StartTime: &ts, QOSClass: corev1.PodQOSBurstable,
			Conditions: []corev1.PodCondition{{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: ts},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: ts}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: ts},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: ts}},
			ContainerStatuses: []corev1.ContainerStatus{cstatus("app", "registry.example.com/payments/web:1.42.0"), cstatus("proxy", "registry.example.com/mesh/proxy:2.3.1")},
		},
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func nodeTemplateJSON(t testing.TB) []byte {
	res := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
		corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi")}
	n := corev1.Node{
		TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "@NAME@", UID: "@UID@", ResourceVersion: "@RV@",
			Labels: map[string]string{"kubernetes.io/hostname": "@NAME@", "pool": "web", "kubernetes.io/os": "linux"}},
		Status: corev1.NodeStatus{Allocatable: res, Capacity: res,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
				LastTransitionTime: metav1.NewTime(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC))}}},
	}
	b, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
