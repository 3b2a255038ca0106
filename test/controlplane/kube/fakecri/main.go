// Command fakecri serves the CRI on a unix socket from k8s.io/cri-client's
// in-memory fake runtime, as kubemark's hollow nodes do: the real kubelet
// reports a Ready node and runs pods on it, and no container, image or
// network is made on the machine. The tests' kubelet talks to it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
)

func main() {
	socket := flag.String("socket", "", "path of the unix socket to serve the runtime and image services on")
	imageFs := flag.String("image-fs", "/", "mount point reported as the image filesystem")
	flag.Parse()
	if *socket == "" {
		fmt.Fprintln(os.Stderr, "fakecri: --socket is required")
		os.Exit(2)
	}

	runtime := fake.NewFakeRemoteRuntime()
	// The stock fake reports images of size 0 and no image filesystem; the
	// kubelet's image GC and /stats/summary then fail every few seconds.
	runtime.ImageService.SetFakeImageSize(16 << 20)
	runtime.ImageService.SetFakeFilesystemUsage([]*runtimeapi.FilesystemUsage{{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: *imageFs},
		UsedBytes:  &runtimeapi.UInt64Value{Value: 64 << 20},
		InodesUsed: &runtimeapi.UInt64Value{Value: 64},
	}})
	if err := runtime.Start("unix://" + *socket); err != nil {
		fmt.Fprintf(os.Stderr, "fakecri: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "fakecri: serving CRI on %s\n", *socket)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Each fake records every call it answers, forever; the kubelet calls
	// several times a second, so a long test would grow without bound.
	trim := time.NewTicker(30 * time.Second)
	defer trim.Stop()
	for {
		select {
		case <-ctx.Done():
			runtime.Stop()
			return
		case <-trim.C:
			runtime.RuntimeService.Lock()
			runtime.RuntimeService.Called = runtime.RuntimeService.Called[:0]
			runtime.RuntimeService.Unlock()
			runtime.ImageService.Lock()
			runtime.ImageService.Called = runtime.ImageService.Called[:0]
			runtime.ImageService.Unlock()
		}
	}
}
