package watcher

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/opswire/opswire/services/watcher/internal/compact"
	"github.com/opswire/opswire/shared/events"
)

// Scale of the benchmarks: the Kubernetes scalability limits (DESIGN §8).
const (
	scalePods  = 150_000
	scaleNodes = 5_000
)

// podTemplate is a Deployment replica as the API server returns it: two
// containers with resources, env, probes and mounts, managed fields, owner
// reference, conditions and container statuses. Each benchmark pod is
// decoded from its protobuf encoding (what the services' clients ask the API
// server for), so every pod owns its strings as a real decode does (a struct
// copy would share them and understate the informer's heap).
var podTemplate = func() []byte {
	t := metav1.NewTime(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC))
	yes := true
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
	status := func(name, image string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Image: image, ImageID: image + "@sha256:9b2a7c1f5e0d4c3b8a7f6e5d4c3b2a190817263544536271809a8b7c6d5e4f30",
			ContainerID: "containerd://4f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff0",
			Ready:       true, Started: &yes, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}}}
	}
	fields := `{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"0c6f0a53-54f5-4d8e-9d0b-2f4a3c1b7e91\"}":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:env":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:ports":{},"f:readinessProbe":{},"f:resources":{},"f:volumeMounts":{}},"k:{\"name\":\"proxy\"}":{".":{},"f:image":{},"f:name":{},"f:resources":{}}},"f:dnsPolicy":{},"f:enableServiceLinks":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{},"f:volumes":{}}}`
	statusFields := `{"f:status":{"f:conditions":{"k:{\"type\":\"ContainersReady\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Initialized\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Ready\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}}},"f:containerStatuses":{},"f:hostIP":{},"f:phase":{},"f:podIP":{},"f:podIPs":{".":{},"k:{\"ip\":\"10.244.3.17\"}":{".":{},"f:ip":{}}},"f:startTime":{}}}`
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "web-7d9f8c6b5-", CreationTimestamp: t,
			Labels:          map[string]string{"app": "web", "pod-template-hash": "7d9f8c6b5", "team": "payments", "tier": "frontend"},
			Annotations:     map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-05-01T09:58:00Z", "prometheus.io/scrape": "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9f8c6b5", UID: "0c6f0a53-54f5-4d8e-9d0b-2f4a3c1b7e91", Controller: &yes, BlockOwnerDeletion: &yes}},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &t, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}},
				{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &t, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(statusFields)}, Subresource: "status"},
			},
		},
		Spec: corev1.PodSpec{
			Containers:    []corev1.Container{container("app", "registry.example.com/payments/web:1.42.0"), container("proxy", "registry.example.com/mesh/proxy:2.3.1")},
			Volumes:       []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-config"}}}}, {Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptrInt64(3607)}}}}}}},
			RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSClusterFirst, ServiceAccountName: "web", SchedulerName: "default-scheduler",
			TerminationGracePeriodSeconds: ptrInt64(30),
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptrInt64(300)},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptrInt64(300)}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, HostIP: "10.0.12.34", PodIP: "10.244.3.17", PodIPs: []corev1.PodIP{{IP: "10.244.3.17"}}, StartTime: &t, QOSClass: corev1.PodQOSBurstable,
			Conditions: []corev1.PodCondition{{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: t},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: t}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: t},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t}},
			ContainerStatuses: []corev1.ContainerStatus{status("app", "registry.example.com/payments/web:1.42.0"), status("proxy", "registry.example.com/mesh/proxy:2.3.1")},
		},
	}
	b, err := p.Marshal()
	if err != nil {
		panic(err)
	}
	return b
}()

func ptrInt64(v int64) *int64 { return &v }

// realisticPod decodes the template into a new pod named and placed for index i.
func realisticPod(i int, rv string) *corev1.Pod {
	var p corev1.Pod
	if err := p.Unmarshal(podTemplate); err != nil {
		panic(err)
	}
	p.Namespace, p.Name, p.UID = podIdentity(i)
	p.ResourceVersion = rv
	p.Spec.NodeName = benchNodeName(i % scaleNodes)
	return &p
}

// podIdentity is the namespace, name and uid of benchmark pod i.
func podIdentity(i int) (namespace, name string, uid types.UID) {
	return "ns-" + strconv.Itoa(i%200), "web-7d9f8c6b5-" + strconv.Itoa(i), types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))
}

func benchNodeName(i int) string { return "node-" + strconv.Itoa(i) }

func benchNode(i int, rv string) *corev1.Node {
	res := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi")}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: benchNodeName(i), UID: types.UID(fmt.Sprintf("node-uid-%d", i)), ResourceVersion: rv,
			Labels: map[string]string{"kubernetes.io/hostname": benchNodeName(i), "pool": "web"}},
		Status: corev1.NodeStatus{Allocatable: res, Capacity: res,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

// scaleInformers builds pod and node informers whose LIST generates the
// objects on the fly (so nothing but the informer holds them afterwards) and
// whose WATCH is the source's fake watch, which the benchmark drives.
// compacting selects the watcher's transforms; false is a plain informer.
func scaleInformers(s *source, pods, nodes int, compacting bool) (podInf, nodeInf cache.SharedIndexInformer) {
	return scaleInformersResync(s, pods, nodes, compacting, 0)
}

// scaleInformersResync is scaleInformers with a resync period.
func scaleInformersResync(s *source, pods, nodes int, compacting bool, resync time.Duration) (podInf, nodeInf cache.SharedIndexInformer) {
	lw := func(list func() runtime.Object, w *watch.FakeWatcher) cache.ListerWatcher {
		return listOnly{&cache.ListWatch{
			ListWithContextFunc:  func(context.Context, metav1.ListOptions) (runtime.Object, error) { return list(), nil },
			WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return w, nil },
		}}
	}
	podList := func() runtime.Object {
		l := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: make([]corev1.Pod, pods)}
		for i := range l.Items {
			l.Items[i] = *realisticPod(i, s.nextRV())
		}
		return l
	}
	nodeList := func() runtime.Object {
		l := &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: make([]corev1.Node, nodes)}
		for i := range l.Items {
			l.Items[i] = *benchNode(i, s.nextRV())
		}
		return l
	}
	podInf = cache.NewSharedIndexInformer(lw(podList, s.podW), &corev1.Pod{}, resync, cache.Indexers{})
	nodeInf = cache.NewSharedIndexInformer(lw(nodeList, s.nodeW), &corev1.Node{}, resync, cache.Indexers{})
	if compacting {
		_ = podInf.SetTransform(compact.PodTransform(256))
		_ = nodeInf.SetTransform(compact.NodeTransform(events.KubeletImageListLimit))
	}
	return podInf, nodeInf
}

// ackedPublisher acknowledges every publish at once: it isolates the
// watcher's own memory from the NATS server's in the heap benchmark.
type ackedPublisher struct{}

type ackedFuture struct {
	msg *nats.Msg
	ok  chan *jetstream.PubAck
}

func (ackedPublisher) PublishMsgAsync(m *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	f := &ackedFuture{msg: m, ok: make(chan *jetstream.PubAck, 1)}
	f.ok <- &jetstream.PubAck{Stream: "KUBE"}
	return f, nil
}

func (f *ackedFuture) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f *ackedFuture) Err() <-chan error            { return nil }
func (f *ackedFuture) Msg() *nats.Msg               { return f.msg }
