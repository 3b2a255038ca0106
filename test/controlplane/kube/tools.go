//go:build tools

// Package kube only pins the Kubernetes release whose binaries the test
// suite builds (the control plane, kubeadm for a kubeadm-made cluster side,
// and the real kubelet and kube-proxy of a node); nothing here is shipped.
package kube

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
