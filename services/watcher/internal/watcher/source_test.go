package watcher

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/opswire/opswire/services/watcher/internal/compact"
	"github.com/opswire/opswire/shared/events"
)

// source is a synthetic informer source: a fixed initial list and a fake
// watch the test drives. It lets unit tests and benchmarks feed the watcher
// exactly the events they want, at any scale, without an API server.
type source struct {
	mu    sync.Mutex
	rv    int
	pods  []runtime.Object
	nodes []runtime.Object
	podW  *watch.FakeWatcher
	nodeW *watch.FakeWatcher
}

func newSource() *source {
	return &source{podW: watch.NewFakeWithChanSize(4096, false), nodeW: watch.NewFakeWithChanSize(1024, false)}
}

func (s *source) nextRV() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	return fmt.Sprint(s.rv)
}

func (s *source) node(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: s.nextRV()},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

func (s *source) pod(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), ResourceVersion: s.nextRV()},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// informers builds compacting informers over the source.
func (s *source) informers() (pods, nodes cache.SharedIndexInformer) {
	lw := func(list func() []runtime.Object, w *watch.FakeWatcher, into runtime.Object) cache.ListerWatcher {
		return listOnly{&cache.ListWatch{
			ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
				items := list()
				switch into.(type) {
				case *corev1.Pod:
					l := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
					for _, o := range items {
						l.Items = append(l.Items, *o.(*corev1.Pod))
					}
					return l, nil
				default:
					l := &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
					for _, o := range items {
						l.Items = append(l.Items, *o.(*corev1.Node))
					}
					return l, nil
				}
			},
			WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return w, nil },
		}}
	}
	pods = cache.NewSharedIndexInformer(lw(func() []runtime.Object { return s.pods }, s.podW, &corev1.Pod{}), &corev1.Pod{}, 0, cache.Indexers{})
	nodes = cache.NewSharedIndexInformer(lw(func() []runtime.Object { return s.nodes }, s.nodeW, &corev1.Node{}), &corev1.Node{}, 0, cache.Indexers{})
	_ = pods.SetTransform(compact.PodTransform(256))
	_ = nodes.SetTransform(compact.NodeTransform(events.KubeletImageListLimit))
	return pods, nodes
}

// listOnly tells the reflector to LIST then WATCH: the fake watch cannot
// stream initial events (WatchList semantics).
type listOnly struct{ *cache.ListWatch }

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }
