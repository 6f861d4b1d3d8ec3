package harness

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Real-size objects: nodes and pods as a kubelet and the controllers fill
// them in a production cluster (an EKS-like one: the most common shape of
// labels, images and addresses), instead of the bare ones Node and Pod
// build. What opswire's watcher decodes, compacts and publishes, and what a
// LIST of thousands costs the API server, depends on that size: a
// kubelet's node with its 50 images is about 12 KB of protobuf (a
// 5,000-node LIST is 63.5 MB), a bare node a few hundred bytes.
//
// Everything derives from the object's name (hashes, not randomness), so
// two calls build the same object and two names build different ones.

// KubeletMaxImages is how many images a kubelet reports in a node's status
// at most (--node-status-max-images).
const KubeletMaxImages = 50

// RealSizeNode builds a node as its kubelet, the cloud provider and the CSI
// driver leave it: 20 labels, provider ID, the five conditions, capacity
// and allocatable with huge pages, addresses, daemon endpoints, node info,
// runtime handlers and the images (the largest first, as a kubelet sorts
// them; KubeletMaxImages is what a kubelet reports). Create it with
// CreateRealSizeNode: the API server drops the status of a created node.
func RealSizeNode(name string, images int) *corev1.Node {
	h := hashOf(name)
	zone := realRegion + string(rune('a'+h.n(0, 3)))
	ip := fmt.Sprintf("10.%d.%d.%d", 16+h.n(1, 16), h.n(2, 256), 1+h.n(3, 254))
	host := fmt.Sprintf("ip-%s.%s.compute.internal", dashed(ip), realRegion)
	instance := "i-0" + h.hex(17)
	labels := map[string]string{
		"beta.kubernetes.io/arch":                       "amd64",
		"beta.kubernetes.io/instance-type":              "m6i.2xlarge",
		"beta.kubernetes.io/os":                         "linux",
		"failure-domain.beta.kubernetes.io/region":      realRegion,
		"failure-domain.beta.kubernetes.io/zone":        zone,
		"kubernetes.io/arch":                            "amd64",
		"kubernetes.io/hostname":                        name,
		"kubernetes.io/os":                              "linux",
		"node.kubernetes.io/instance-type":              "m6i.2xlarge",
		"topology.kubernetes.io/region":                 realRegion,
		"topology.kubernetes.io/zone":                   zone,
		"topology.ebs.csi.aws.com/zone":                 zone,
		"topology.k8s.aws/zone-id":                      fmt.Sprintf("euw1-az%d", 1+h.n(0, 3)),
		"eks.amazonaws.com/nodegroup":                   "general-purpose-20250611",
		"eks.amazonaws.com/nodegroup-image":             "ami-0c7ae24d2d4a1e5f3",
		"eks.amazonaws.com/capacityType":                "ON_DEMAND",
		"eks.amazonaws.com/sourceLaunchTemplateId":      "lt-0a5b8c1d2e3f40516",
		"eks.amazonaws.com/sourceLaunchTemplateVersion": "7",
		"k8s.io/cloud-provider-aws":                     "3b1f5e0c9a7d4e2f8c6b0a1d3e5f7a9b",
		"node-role.kubernetes.io/worker":                "",
	}
	boot := metav1.NewTime(time.Now().Add(-time.Duration(24+h.n(4, 24*30)) * time.Hour).Truncate(time.Second))
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, LastHeartbeatTime: now, LastTransitionTime: boot, Reason: reason, Message: msg}
	}
	network := cond(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "RouteCreated", "RouteController created a route")
	network.LastHeartbeatTime = boot // written once, by the route controller
	yes := true
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("8"),
		corev1.ResourceEphemeralStorage: resource.MustParse("104845292Ki"),
		"hugepages-1Gi":                 resource.MustParse("0"),
		"hugepages-2Mi":                 resource.MustParse("0"),
		corev1.ResourceMemory:           resource.MustParse("32386544Ki"),
		corev1.ResourcePods:             resource.MustParse("110"),
	}
	allocatable := capacity.DeepCopy()
	allocatable[corev1.ResourceCPU] = resource.MustParse("7910m")
	allocatable[corev1.ResourceEphemeralStorage] = resource.MustParse("95551679124")
	allocatable[corev1.ResourceMemory] = resource.MustParse("31369712Ki")
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: labels,
			Annotations: map[string]string{
				"alpha.kubernetes.io/provided-node-ip":                   ip,
				"csi.volume.kubernetes.io/nodeid":                        fmt.Sprintf(`{"ebs.csi.aws.com":%q}`, instance),
				"node.alpha.kubernetes.io/ttl":                           "0",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
			},
		},
		Spec: corev1.NodeSpec{ProviderID: fmt.Sprintf("aws:///%s/%s", zone, instance)},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: allocatable,
			Conditions: []corev1.NodeCondition{
				network,
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
			},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: ip},
				{Type: corev1.NodeInternalDNS, Address: host},
				{Type: corev1.NodeHostName, Address: host},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo: corev1.NodeSystemInfo{
				MachineID:               "ec2" + h.hex(29),
				SystemUUID:              uuidOf("ec2" + h.hex(29)[:5] + name),
				BootID:                  uuidOf("boot" + name),
				KernelVersion:           "6.12.40-63.114.amzn2023.x86_64",
				OSImage:                 "Amazon Linux 2023.8.20250818",
				ContainerRuntimeVersion: "containerd://2.1.4",
				KubeletVersion:          KubeVersion,
				OperatingSystem:         "linux",
				Architecture:            "amd64",
			},
			Images: nodeImages(images),
			RuntimeHandlers: []corev1.NodeRuntimeHandler{
				{Name: "", Features: &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: &yes, UserNamespaces: &yes}},
				{Name: "runc", Features: &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: &yes, UserNamespaces: &yes}},
			},
			Features: &corev1.NodeFeatures{SupplementalGroupsPolicy: &yes},
		},
	}
}

// CreateRealSizeNode creates n as its kubelet does: the Node, then its
// status (as field manager "kubelet", so the managed fields a LIST returns
// are a kubelet's too).
func CreateRealSizeNode(t testing.TB, c kubernetes.Interface, n *corev1.Node) *corev1.Node {
	t.Helper()
	ctx := context.Background()
	created, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{FieldManager: "kubelet"})
	if err != nil {
		t.Fatalf("create node %s: %v", n.Name, err)
	}
	created.Status = *n.Status.DeepCopy()
	out, err := c.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{FieldManager: "kubelet"})
	if err != nil {
		t.Fatalf("node %s status: %v", n.Name, err)
	}
	return out
}

// RealSizePod builds a running pod of a Deployment as the ReplicaSet
// controller, the admission plugins and the kubelet leave it: owner
// reference to its ReplicaSet, Helm's labels, one container with
// resources, env, mounts, probes and a security context, the projected
// service-account token volume, the tolerations DefaultTolerationSeconds
// adds, and a Running status with conditions, IPs and the container's
// status. node is where it runs (the status's hostIP is derived from it,
// matching RealSizeNode(node)).
//
// Its ReplicaSet does not exist: with the garbage collector running
// (StartControllers), the pod is deleted as an orphan would be in
// production, so a test that runs both drops or replaces OwnerReferences.
// Create it with CreateRealSizePod: the API server drops the status of a
// created pod.
func RealSizePod(namespace, name, node string) *corev1.Pod {
	h := hashOf(namespace + "/" + name)
	app := realApps[h.n(0, len(realApps))]
	team := realTeams[h.n(1, len(realTeams))]
	version := fmt.Sprintf("v1.%d.%d", h.n(2, 40), h.n(3, 10))
	rsHash := h.hex(10)
	repo := fmt.Sprintf("%s/%s/%s", realRegistry, team, app)
	image := repo + ":" + version + "-" + h.hex(7)
	nodeIP := RealSizeNode(node, 0).Status.Addresses[0].Address
	podIP := nodeIP[:len(nodeIP)-len(lastOctet(nodeIP))] + fmt.Sprint(1+h.n(4, 254))
	started := metav1.NewTime(time.Now().Add(-time.Duration(1+h.n(5, 72*60)) * time.Minute).Truncate(time.Second))
	yes, no := true, false
	uid, gid := int64(10001), int64(10001)
	grace := int64(30)
	tokenTTL := int64(3607)
	mode := int32(420)
	prio := int32(0)
	preempt := corev1.PreemptLowerPriority
	toleration := int64(300)
	apiAccess := "kube-api-access-" + h.hex(5)
	resources := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
	mounts := []corev1.VolumeMount{
		{Name: "config", MountPath: "/etc/" + app, ReadOnly: true},
		{Name: "tmp", MountPath: "/tmp"},
		{Name: apiAccess, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
	}
	probe := func(path string, delay int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intOrName("http"), Scheme: corev1.URISchemeHTTP}},
			InitialDelaySeconds: delay, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3,
		}
	}
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
	}
	podCond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: started, ObservedGeneration: 1}
	}
	var statusMounts []corev1.VolumeMountStatus
	for _, m := range mounts {
		s := corev1.VolumeMountStatus{Name: m.Name, MountPath: m.MountPath, ReadOnly: m.ReadOnly}
		if m.ReadOnly {
			disabled := corev1.RecursiveReadOnlyDisabled
			s.RecursiveReadOnly = &disabled
		}
		statusMounts = append(statusMounts, s)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    namespace,
			Name:         name,
			GenerateName: app + "-" + rsHash + "-",
			Labels: map[string]string{
				"app.kubernetes.io/name":       app,
				"app.kubernetes.io/instance":   team + "-" + app,
				"app.kubernetes.io/version":    version,
				"app.kubernetes.io/component":  "server",
				"app.kubernetes.io/part-of":    team,
				"app.kubernetes.io/managed-by": "Helm",
				"helm.sh/chart":                app + "-" + version[1:],
				"pod-template-hash":            rsHash,
				"team":                         team,
			},
			Annotations: map[string]string{
				"kubectl.kubernetes.io/restartedAt": started.Format(time.RFC3339),
				"prometheus.io/scrape":              "true",
				"prometheus.io/port":                "9090",
				"prometheus.io/path":                "/metrics",
				"checksum/config":                   h.hex(64),
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-" + rsHash,
				UID: types.UID(uuidOf("rs" + namespace + app + rsHash)), Controller: &yes, BlockOwnerDeletion: &yes,
			}},
		},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: app + "-config"}, DefaultMode: &mode}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: apiAccess, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					DefaultMode: &mode,
					Sources: []corev1.VolumeProjection{
						{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: &tokenTTL, Path: "token"}},
						{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
							Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
						{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
							FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
					},
				}}},
			},
			Containers: []corev1.Container{{
				Name:  app,
				Image: image,
				Ports: []corev1.ContainerPort{
					{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
					{Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP},
				},
				Env: []corev1.EnvVar{
					{Name: "LOG_LEVEL", Value: "info"},
					{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://otel-collector.observability.svc.cluster.local:4317"},
					{Name: "OTEL_SERVICE_NAME", Value: app},
					fieldEnv("POD_NAME", "metadata.name"),
					fieldEnv("POD_NAMESPACE", "metadata.namespace"),
					fieldEnv("POD_IP", "status.podIP"),
					fieldEnv("NODE_NAME", "spec.nodeName"),
					{Name: "GOMAXPROCS", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
						Resource: "limits.cpu", Divisor: resource.MustParse("1")}}},
					{Name: "DATABASE_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: app + "-db"}, Key: "password"}}},
				},
				Resources:                resources,
				VolumeMounts:             mounts,
				LivenessProbe:            probe("/healthz", 10),
				ReadinessProbe:           probe("/readyz", 5),
				TerminationMessagePath:   corev1.TerminationMessagePathDefault,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				ImagePullPolicy:          corev1.PullIfNotPresent,
				SecurityContext: &corev1.SecurityContext{
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					RunAsUser:                &uid,
					RunAsNonRoot:             &yes,
					ReadOnlyRootFilesystem:   &yes,
					AllowPrivilegeEscalation: &no,
				},
			}},
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: &grace,
			DNSPolicy:                     corev1.DNSClusterFirst,
			ServiceAccountName:            app,
			DeprecatedServiceAccount:      app,
			NodeName:                      node,
			SecurityContext: &corev1.PodSecurityContext{
				FSGroup:        &gid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			SchedulerName: corev1.DefaultSchedulerName,
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &toleration},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &toleration},
			},
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": app, "app.kubernetes.io/instance": team + "-" + app}},
			}},
			Priority:           &prio,
			EnableServiceLinks: &yes,
			PreemptionPolicy:   &preempt,
		},
		Status: corev1.PodStatus{
			ObservedGeneration: 1,
			Phase:              corev1.PodRunning,
			Conditions: []corev1.PodCondition{
				podCond(corev1.PodReadyToStartContainers),
				podCond(corev1.PodInitialized),
				podCond(corev1.PodReady),
				podCond(corev1.ContainersReady),
				podCond(corev1.PodScheduled),
			},
			HostIP:    nodeIP,
			HostIPs:   []corev1.HostIP{{IP: nodeIP}},
			PodIP:     podIP,
			PodIPs:    []corev1.PodIP{{IP: podIP}},
			StartTime: &started,
			ContainerStatuses: []corev1.ContainerStatus{{
				Name:               app,
				State:              corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
				Ready:              true,
				Image:              image,
				ImageID:            repo + "@sha256:" + digestOf(image),
				ContainerID:        "containerd://" + h.hex(64),
				Started:            &yes,
				AllocatedResources: resources.Requests.DeepCopy(),
				Resources:          resources.DeepCopy(),
				VolumeMounts:       statusMounts,
				User:               &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{UID: uid, GID: gid, SupplementalGroups: []int64{gid}}},
			}},
			QOSClass: corev1.PodQOSBurstable,
		},
	}
}

// CreateRealSizePod creates p as its controller, the scheduler and its
// kubelet do: the Pod (field manager "kube-controller-manager"), then its
// status (field manager "kubelet").
func CreateRealSizePod(t testing.TB, c kubernetes.Interface, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	created, err := c.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{FieldManager: "kube-controller-manager"})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", p.Namespace, p.Name, err)
	}
	created.Status = *p.Status.DeepCopy()
	out, err := c.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{FieldManager: "kubelet"})
	if err != nil {
		t.Fatalf("pod %s/%s status: %v", p.Namespace, p.Name, err)
	}
	return out
}
