package app

import (
	"context"

	corev1 "k8s.io/api/core/v1"
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
