package cordon

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/kube"
)

// TestActuatorPatchIsNotResentByClientGo: the API server applies the
// cordon's PATCH and answers 500 ServerTimeout with Retry-After (what
// InterpretUpdateError gives for an unreachable etcd). client-go's rest
// client would send the PATCH again on a 5xx with Retry-After, and the
// repeat's resourceVersion precondition would no longer hold: a 409, taken
// for "changed before the write" (slot given back, nothing published)
// although the cordon was its own. With
// kube.NoWriteRetries (every service's client) the PATCH goes once, and the
// 500 leaves the write in doubt until a read of the node settles it.
func TestActuatorPatchIsNotResentByClientGo(t *testing.T) {
	a := apiNode("a")
	p := seedPolicy("cordon")
	h := newHarness(t, p, false, Fleet{Managed: 10}, append([]runtime.Object{a}, pods("a", 100)...)...)
	patches := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		writeObj := func(code int, obj any) {
			w.Header().Set("Content-Type", "application/json")
			if code >= 500 {
				w.Header().Set("Retry-After", "0")
			}
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(obj)
		}
		status := func(err *apierrors.StatusError) {
			s := err.ErrStatus
			s.Kind, s.APIVersion = "Status", "v1"
			writeObj(int(s.Code), s)
		}
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes/a":
			n, err := h.client.CoreV1().Nodes().Get(ctx, "a", metav1.GetOptions{})
			if err != nil {
				status(err.(*apierrors.StatusError))
				return
			}
			n.Kind, n.APIVersion = "Node", "v1"
			writeObj(200, n)
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/pods":
			l, _ := h.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			l.Kind, l.APIVersion = "PodList", "v1"
			writeObj(200, l)
		case r.Method == http.MethodPatch && r.URL.Path == "/api/v1/nodes/a":
			patches++
			body, _ := io.ReadAll(r.Body)
			if patches == 1 { // applied, then the answer is a 500 with Retry-After
				n, err := h.client.CoreV1().Nodes().Patch(ctx, "a", types.MergePatchType, body, metav1.PatchOptions{})
				if err != nil {
					t.Errorf("apply: %v", err)
				}
				n.ResourceVersion = "42"
				_, _ = h.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
				status(apierrors.NewServerTimeout(nodesGR, "update", 2))
				return
			}
			status(apierrors.NewConflict(nodesGR, "a", nil)) // the precondition (rv 41) no longer holds
		default:
			t.Errorf("unexpected %s %s", r.Method, r.URL)
			w.WriteHeader(404)
		}
	}))
	defer srv.Close()
	real, err := kubernetes.NewForConfig(kube.NoWriteRetries(&rest.Config{Host: srv.URL}))
	if err != nil {
		t.Fatal(err)
	}
	win := actuate.NewWindow(5, time.Minute)
	act := NewActuator(real, h.pub, h.rec, h.ledger, fixedFleet(Fleet{Managed: 10}), ActuatorConfig{
		Cluster: "prod", Policy: p, Identity: "replica-a", Limiter: win, Now: h.act.cfg.Now,
	}, h.m, zerolog.Nop())
	s := mirrorOf(a, 100)
	o, err := act.Apply(context.Background(), s, false, Evaluate(p, s, false))
	t.Logf("Apply: %+v, %v; PATCHes the server got: %d", o, err, patches)
	if patches != 1 {
		t.Fatalf("server got %d PATCHes, want 1 (client-go sent the write again)", patches)
	}
	// The retry the actuator asked for, from the mirror's new state.
	ns := mirrorOf(h.node(t, "a"), 100)
	marked := h.ledger.Marked(ns)
	_, err = act.Apply(context.Background(), ns, marked, Evaluate(p, ns, marked))
	t.Logf("retry: %v", err)
	out, _ := verbs(t, h)
	t.Logf("node cordoned=%v mark=%v; published %v; window %d", h.node(t, "a").Spec.Unschedulable,
		h.node(t, "a").Annotations["opswire.io/autocordon"] != "", out, win.Len(h.act.cfg.Now()))
	if !h.node(t, "a").Spec.Unschedulable || out[VerbCordoned] != 1 || out[VerbFailed] != 0 || win.Len(h.act.cfg.Now()) != 1 {
		t.Errorf("opswire's cordon is applied but published %v and the window holds %d: want one cordoned and 1",
			out, win.Len(h.act.cfg.Now()))
	}
}
