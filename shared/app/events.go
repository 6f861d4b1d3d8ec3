package app

import (
	"context"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// EventRecorder returns a recorder of Kubernetes Events for the actor's
// actions, sourced as opswire-<service> on this replica, and its shutdown. The
// events reach the API asynchronously; with toAPI false (dry-run) they are
// recorded nowhere, because an Event is a write to the cluster too.
func (rt *Runtime) EventRecorder(ctx context.Context, client kubernetes.Interface, toAPI bool) (record.EventRecorder, func()) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	if toAPI {
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	}
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: rt.Spec.Binary(), Host: rt.Options.ID}), b.Shutdown
}

// serviceAccountNamespace is where the kubelet mounts the pod's namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// podEvent records a Warning Event on this replica's own Pod, where `kubectl
// describe pod` and `kubectl get events` show it beside the failing readiness
// probe. Outside a pod (no namespace mounted, no POD_NAMESPACE) it is only logged.
func (rt *Runtime) podEvent(client kubernetes.Interface, reason, message string) {
	ns := os.Getenv("POD_NAMESPACE")
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
		ns = strings.TrimSpace(string(b))
	}
	if ns == "" {
		return
	}
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: rt.Options.ID + ".", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: rt.Options.ID},
		Reason:         reason, Message: message, Type: corev1.EventTypeWarning, Count: 1,
		FirstTimestamp: now, LastTimestamp: now,
		Source: corev1.EventSource{Component: rt.Spec.Binary(), Host: rt.Options.ID},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		rt.Log.Warn().Err(err).Str("reason", reason).Msg("could not record the Event on this pod")
	}
}
