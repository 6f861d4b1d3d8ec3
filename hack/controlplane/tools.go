//go:build tools

// Package controlplane pins the real kube-apiserver used by the end-to-end
// harness. It is a separate module, outside go.work, so that the services never
// depend on k8s.io/kubernetes.
package controlplane

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
