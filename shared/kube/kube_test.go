package kube

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://%s:6443", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: t}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`

func write(t *testing.T, dir, host string) string {
	t.Helper()
	p := filepath.Join(dir, host+".yaml")
	if err := os.WriteFile(p, []byte(fmt.Sprintf(kubeconfig, host)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestResolutionOrder(t *testing.T) {
	dir := t.TempDir()
	flagPath, envPath := write(t, dir, "flag.example"), write(t, dir, "env.example")
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".kube"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".kube", "config"), []byte(fmt.Sprintf(kubeconfig, "home.example")), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)

	tests := []struct {
		name, flag, env, wantHost, wantSource string
	}{
		{"flag wins", flagPath, envPath, "https://flag.example:6443", "--kubeconfig"},
		{"env next", "", envPath, "https://env.example:6443", "$KUBECONFIG"},
		{"home last", "", "", "https://home.example:6443", "~/.kube/config"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tc.env)
			cfg, err := RESTConfig(Options{Kubeconfig: tc.flag, QPS: 5, Burst: 10})
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tc.wantHost || Source(tc.flag) != tc.wantSource {
				t.Fatalf("host %q source %q, want %q %q", cfg.Host, Source(tc.flag), tc.wantHost, tc.wantSource)
			}
			if cfg.QPS != 5 || cfg.Burst != 10 || cfg.ContentType != "application/vnd.kubernetes.protobuf" {
				t.Fatalf("tuning not applied: %+v", cfg)
			}
		})
	}
}

func TestNoCredentials(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := RESTConfig(Options{}); err == nil {
		t.Fatal("want an error without any credentials")
	}
}
