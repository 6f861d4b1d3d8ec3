package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/opswire/opswire/test/harness"
)

// deployPath is a path under deploy/ in the repository.
func deployPath(t *testing.T, parts ...string) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(append([]string{root, "deploy"}, parts...)...)
}

// secretFromTemplate renders deploy/secret.example.yaml with the given values
// in place of CHANGE-ME (the template must name exactly these keys).
func secretFromTemplate(t *testing.T, values map[string]string) *unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(deployPath(t, "secret.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(raw, &obj); err != nil {
		t.Fatalf("secret.example.yaml: %v", err)
	}
	u := &unstructured.Unstructured{Object: obj}
	data, _, _ := unstructured.NestedStringMap(obj, "stringData")
	for k := range data {
		if _, ok := values[k]; !ok {
			t.Fatalf("secret.example.yaml has key %s the test does not fill", k)
		}
	}
	for k, v := range values {
		if _, ok := data[k]; !ok {
			t.Fatalf("secret.example.yaml lacks key %s", k)
		}
		data[k] = v
	}
	if err := unstructured.SetNestedStringMap(u.Object, data, "stringData"); err != nil {
		t.Fatal(err)
	}
	return u
}

// natsUser connects as one of deploy/'s NATS users and records the
// asynchronous errors (permission violations) the server reports.
type natsUser struct {
	nc   *nats.Conn
	mu   sync.Mutex
	errs []error
}

// Its replies use the user's own inbox prefix, as the services' do
// (natsx.InboxPrefix): the deploy allows each user only _INBOX_<user>.>.
func connectAs(t *testing.T, n *harness.NATS, user, password string) *natsUser {
	t.Helper()
	u := &natsUser{}
	u.nc = n.Connect(t, nats.UserInfo(user, password), nats.CustomInboxPrefix("_INBOX_"+user), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		u.mu.Lock()
		u.errs = append(u.errs, err)
		u.mu.Unlock()
	}))
	return u
}

// violation waits until the server reported a permission violation that
// mentions subject.
func (u *natsUser) violation(t *testing.T, subject string) {
	t.Helper()
	harness.Eventually(t, 5*time.Second, "permissions violation for "+subject, func() bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		for _, err := range u.errs {
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
				return true
			}
		}
		return false
	})
}

// forbidden asserts that an API call was refused by RBAC (403).
func forbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("%s: want 403 Forbidden, got %v", what, err)
	}
}

// deepMerge sets every key of over into base (maps merge, other values replace).
func deepMerge(base, over map[string]any) {
	for k, v := range over {
		if bm, ok := base[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok {
				deepMerge(bm, om)
				continue
			}
		}
		base[k] = v
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// liveMsgs keeps every message of a core subscription: how the audit user,
// which may not create consumers, watches OPS.
type liveMsgs struct {
	mu   sync.Mutex
	msgs []harness.Msg
}

func subscribeLive(t *testing.T, nc *nats.Conn, subj string) *liveMsgs {
	t.Helper()
	l := &liveMsgs{}
	sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
		l.mu.Lock()
		l.msgs = append(l.msgs, harness.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
		l.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return l
}

// WaitFor polls until a message matches.
func (l *liveMsgs) WaitFor(t *testing.T, timeout time.Duration, what string, match func(harness.Msg) bool) {
	t.Helper()
	harness.Eventually(t, timeout, what, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, m := range l.msgs {
			if match(m) {
				return true
			}
		}
		return false
	})
}
