// The kubelet's own TLS bootstrap, as a tiny program for `make bench`: the
// same LoadClientCert the kubelet runs for --bootstrap-kubeconfig, so
// kubeboot's figures stand next to the code it is measured against.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/kubelet/certificate/bootstrap"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig to write")
	bootstrapKubeconfig := flag.String("bootstrap-kubeconfig", "", "bootstrap kubeconfig to read")
	certDir := flag.String("cert-dir", "", "directory for the client certificate")
	nodeName := flag.String("node-name", "", "node name")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := bootstrap.LoadClientCert(ctx, *kubeconfig, *bootstrapKubeconfig, *certDir, types.NodeName(*nodeName)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
