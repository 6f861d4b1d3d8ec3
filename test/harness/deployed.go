package harness

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Services are opswire's five services, in the order they are started.
var Services = []string{"watcher", "cordon", "cleanup", "report", "notifier"}

// Deployed is the harness mode with the credentials deploy/ ships instead of
// admin ones: NATS runs with deploy/'s users and permissions
// (base/nats/auth.conf), and each service reaches the API as its own
// ServiceAccount under deploy/'s RBAC (a TokenRequest token). A permission
// the deployment lacks fails a test here as it would fail in a cluster.
type Deployed struct {
	CP        *ControlPlane
	NATS      *NATS
	Passwords map[string]string // NATS password by user (the five services, audit, operator, route)
	Objects   []*unstructured.Unstructured
}

// StartDeployed renders deploy/overlays/dev, applies its namespace,
// ServiceAccounts and RBAC to cp, and starts NATS with deploy/'s auth.conf.
// The passwords are set as the variables the NATS StatefulSet sets from the
// Secret (t.Setenv: the test may not run in parallel).
func StartDeployed(t testing.TB, cp *ControlPlane) *Deployed {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	d := &Deployed{CP: cp, Passwords: DeployPasswords(),
		Objects: KustomizeBuild(t, filepath.Join(root, "deploy", "overlays", "dev"))}
	var access []*unstructured.Unstructured
	for _, o := range d.Objects {
		switch o.GetKind() {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			access = append(access, o)
		}
	}
	ServerSideApply(t, cp.Config, access)
	d.NATS, _ = StartDeployedNATS(t)
	return d
}

// StartDeployedNATS starts NATS with deploy/'s users and permissions
// (base/nats/auth.conf) and returns it with the users' passwords, set as the
// variables the NATS StatefulSet sets from the Secret (t.Setenv: the test may
// not run in parallel).
func StartDeployedNATS(t testing.TB) (*NATS, map[string]string) {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	pw := DeployPasswords()
	for u, p := range pw {
		t.Setenv("NATS_"+strings.ToUpper(u)+"_PASSWORD", p)
	}
	return StartNATS(t, WithConfigFile(filepath.Join(root, "deploy", "base", "nats", "auth.conf"))), pw
}

// DeployPasswords are test passwords for deploy/'s NATS users (each starts
// with a letter, as NATS requires of a password given through a variable).
func DeployPasswords() map[string]string {
	pw := map[string]string{}
	for _, u := range append(append([]string(nil), Services...), "audit", "operator", "route") {
		pw[u] = "p" + u + "-7c41e2d9a8b3"
	}
	return pw
}

// Service is how deploy/ runs svc: the Deployment's own environment, its NATS
// user's password and, but for the notifier, a kubeconfig of its
// ServiceAccount. Flags the harness passes (--nats-url) take precedence.
func (d *Deployed) Service(t testing.TB, svc, config string) ServiceOptions {
	t.Helper()
	o := ServiceOptions{Config: config, NATSURL: d.NATS.URL,
		Env: append(DeploymentEnv(t, d.Objects, "opswire-"+svc), "OPSWIRE_NATS_PASSWORD="+d.Passwords[svc])}
	if svc != "notifier" {
		o.Kubeconfig = d.CP.ServiceAccountKubeconfig(t, "opswire", "opswire-"+svc)
	}
	return o
}

// Connect connects as one of deploy/'s NATS users. Replies use the user's
// own inbox prefix, as the services' do: deploy/ allows each user only
// _INBOX_<user>.>.
func (d *Deployed) Connect(t testing.TB, user string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return d.NATS.Connect(t, append([]nats.Option{nats.UserInfo(user, d.Passwords[user]),
		nats.CustomInboxPrefix("_INBOX_" + user)}, opts...)...)
}
