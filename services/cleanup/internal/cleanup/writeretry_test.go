package cleanup

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/kube"
)

// TestActuatorDeleteIsNotResentByClientGo: the API server carries out the
// DELETE and answers 500 ServerTimeout with Retry-After (what
// InterpretDeleteError gives for an unreachable etcd). client-go's rest
// client would send the DELETE again on a 5xx with Retry-After; the repeat
// would find the pod gone (404, or 429 from priority and fairness), taken
// for "already gone" or "not processed": slot given back, nothing
// published, though the removal was its own. With
// kube.NoWriteRetries (every service's client) the DELETE goes once, and
// the 500 leaves it in doubt until the pod's next visit finds it gone.
func TestActuatorDeleteIsNotResentByClientGo(t *testing.T) {
	r := newRig(t, testPolicy(), false, nil, livePod())
	gr := schema.GroupResource{Resource: "pods"}
	deletes := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := req.Context()
		write := func(code int, obj any) {
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
			write(int(s.Code), s)
		}
		if req.URL.Path != "/api/v1/namespaces/apps/pods/web-1" {
			t.Errorf("unexpected %s %s", req.Method, req.URL)
			w.WriteHeader(404)
			return
		}
		switch req.Method {
		case http.MethodGet:
			p, err := r.client.CoreV1().Pods("apps").Get(ctx, "web-1", metav1.GetOptions{})
			if err != nil {
				status(err.(*apierrors.StatusError))
				return
			}
			p.Kind, p.APIVersion = "Pod", "v1"
			write(200, p)
		case http.MethodDelete:
			deletes++
			if err := r.client.CoreV1().Pods("apps").Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
				status(err.(*apierrors.StatusError)) // a repeat: 404
				return
			}
			status(apierrors.NewServerTimeout(gr, "delete", 2)) // carried out; the answer is a 500 with Retry-After
		}
	}))
	defer srv.Close()
	real, err := kubernetes.NewForConfig(kube.NoWriteRetries(&rest.Config{Host: srv.URL}))
	if err != nil {
		t.Fatal(err)
	}
	w := actuate.NewWindow(10, time.Minute)
	act := NewActuator(real, r.pub, r.recorder, r.metrics, zerolog.Nop(), ActuatorConfig{
		Cluster: "c1", Policy: testPolicy(), Limiter: w, Now: func() time.Time { return t0 }, WindowNow: func() time.Time { return t0 },
	})
	state := pod(failed("Evicted"))
	d := testPolicy().Decide(state, Facts{Now: t0})
	out, err := act.Handle(context.Background(), state, d, Facts{Now: t0})
	t.Logf("Handle: %+v %v; DELETEs the server got: %d", out, err, deletes)
	if deletes != 1 {
		t.Fatalf("server got %d DELETEs, want 1 (client-go sent the write again)", deletes)
	}
	out, err = act.Handle(context.Background(), state, d, Facts{Now: t0}) // a later visit
	t.Logf("again: %+v %v", out, err)
	ids := opsIDs(r)
	t.Logf("OPS %v, Events %v, window %d", ids, r.eventsSeen(), w.Len(t0))
	if strings.Join(ids, ",") != "cleanup/uid-1/deleted" || w.Len(t0) != 1 {
		t.Errorf("this leader's DELETE removed the pod; want its deleted audit and 1 slot, got OPS %v and window %d", ids, w.Len(t0))
	}
}
