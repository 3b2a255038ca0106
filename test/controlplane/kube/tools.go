//go:build tools

// Package kube only pins the Kubernetes release whose control-plane binaries
// the test suite builds; nothing here is shipped.
package kube

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
