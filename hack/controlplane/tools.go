//go:build tools

// Package controlplane pins the real Kubernetes components the end-to-end
// harness runs: the control plane (kube-apiserver, kube-controller-manager,
// kube-scheduler) and a node (kubelet, kube-proxy). It is a separate module,
// outside go.work, so that the services never depend on k8s.io/kubernetes.
package controlplane

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
