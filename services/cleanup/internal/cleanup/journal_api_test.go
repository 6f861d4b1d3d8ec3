package cleanup

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/actuate/actuatetest"
	"github.com/opswire/opswire/shared/events"
)

func eventsIntent(namespace, name string) events.Intent {
	return events.Intent{Actor: Service, Action: VerbDeleted, Kind: "Pod", Namespace: namespace, Name: name, UID: "uid-" + name}
}

// apiRig is an Actuator over a real clientset against an httptest server
// (the fake clientset skips client-go's URL checks of a name): the server
// lists evs and answers a pod GET with podStatus (404: gone).
type apiRig struct {
	mu        sync.Mutex
	evs       []corev1.Event
	podStatus int
	gets      []string
}

func newAPIRig(t *testing.T, evs ...*corev1.Event) (*apiRig, *Actuator, *Metrics) {
	t.Helper()
	r := &apiRig{podStatus: http.StatusNotFound}
	for _, e := range evs {
		r.evs = append(r.evs, *e)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		defer r.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if req.URL.Path == "/api/v1/events" {
			_ = json.NewEncoder(w).Encode(&corev1.EventList{TypeMeta: metav1.TypeMeta{Kind: "EventList", APIVersion: "v1"}, Items: r.evs})
			return
		}
		r.gets = append(r.gets, req.URL.Path)
		code := r.podStatus
		reason := metav1.StatusReasonNotFound
		switch code {
		case http.StatusBadRequest:
			reason = metav1.StatusReasonBadRequest
		case http.StatusServiceUnavailable:
			reason = metav1.StatusReasonServiceUnavailable
		}
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: "test"})
	}))
	t.Cleanup(srv.Close)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil)
	a := NewActuator(client, &actuatetest.Publisher{}, record.NewFakeRecorder(10), m, zerolog.Nop(), ActuatorConfig{
		Cluster: "c1", Policy: testPolicy(), Limiter: actuate.NewWindow(100, time.Minute),
		Now: func() time.Time { return t0 }, WindowNow: func() time.Time { return t0 }, APITimeout: 5 * time.Second,
	})
	return r, a, m
}

// TestLiveActionsRealClientNames: a forged intent Event on a pod name
// client-go refuses in a URL (x/y, a%b, ., ..) is refused by the recovery
// (its re-read would fail client-side on every attempt and hold a new
// leader's recovery back for ever); a valid one
// (p, gone) is read, its pod re-read once.
func TestLiveActionsRealClientNames(t *testing.T) {
	var evs []*corev1.Event
	for _, name := range []string{"x/y", "a%b", ".", ".."} {
		e := journalEv(t, EventIntent, name, "uid-"+name, t0)
		e.UID = types.UID("event-" + name)
		evs = append(evs, e)
	}
	evs = append(evs, journalEv(t, EventIntent, "p", "uid-p", t0))
	r, a, m := newAPIRig(t, evs...)
	las, err := a.LiveActions(context.Background(), t0.Add(-10*time.Minute))
	if err != nil {
		t.Fatalf("LiveActions: %v (a forged name must refuse its Event, not fail the recovery)", err)
	}
	if len(las) != 1 || las[0].Subject != "ops.c1.cleanup.deleted.apps.p" || las[0].Pending {
		t.Fatalf("live actions %+v, want p's only, happened", las)
	}
	if got := testutil.ToFloat64(m.RecoveryRejected.WithLabelValues("forged")); got != 4 {
		t.Fatalf("forged = %v, want 4", got)
	}
	if len(r.gets) != 1 || r.gets[0] != "/api/v1/namespaces/apps/pods/p" {
		t.Fatalf("pod reads %v, want p's only", r.gets)
	}
}

// TestHappenedPermanentError: a re-read error that is permanent for that
// one record (a name no pod can have, a 400 from the API) is
// actuate.ErrUnverifiable, and the recovery refuses the Event (counted once
// as invalid, the recovery goes on); a transient one (503) is not, and
// fails the recovery attempt so it is retried.
func TestHappenedPermanentError(t *testing.T) {
	p := journalEv(t, EventIntent, "p", "uid-p", t0)
	p.UID = "event-p"
	r, a, m := newAPIRig(t, p)
	for _, name := range []string{"x/y", "a%b", ".", ".."} {
		if _, err := a.Happened(context.Background(), eventsIntent("apps", name)); !errors.Is(err, actuate.ErrUnverifiable) {
			t.Fatalf("Happened(%q) = %v, want ErrUnverifiable", name, err)
		}
	}
	if _, err := a.Happened(context.Background(), eventsIntent("a/b", "p")); !errors.Is(err, actuate.ErrUnverifiable) {
		t.Fatalf("Happened(namespace a/b) = %v, want ErrUnverifiable", err)
	}
	if len(r.gets) != 0 {
		t.Fatalf("invalid names reached the API: %v", r.gets)
	}

	r.mu.Lock()
	r.podStatus = http.StatusServiceUnavailable
	r.mu.Unlock()
	_, err := a.LiveActions(context.Background(), t0.Add(-10*time.Minute))
	if err == nil || errors.Is(err, actuate.ErrUnverifiable) || !strings.Contains(err.Error(), "re-read pod") {
		t.Fatalf("LiveActions with the API unavailable = %v, want a transient error (the recovery retries)", err)
	}

	r.mu.Lock()
	r.podStatus = http.StatusBadRequest
	r.mu.Unlock()
	for range 2 {
		las, err := a.LiveActions(context.Background(), t0.Add(-10*time.Minute))
		if err != nil || len(las) != 0 {
			t.Fatalf("LiveActions with a 400 on the re-read = %+v, %v; want the Event refused", las, err)
		}
	}
	if got := testutil.ToFloat64(m.RecoveryRejected.WithLabelValues("invalid")); got != 1 {
		t.Fatalf("invalid = %v, want 1 (one Event, counted once over two attempts)", got)
	}
}
