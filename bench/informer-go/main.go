// The client-go 1.20 anchor for bench/informer.sh: the same program shape as sluice's
// `pod_sync` example. It builds a SharedInformerFactory, asks it for the Pod informer,
// starts it, waits for cache sync and prints `RESULT <seconds> <VmHWM KiB> <pods>`.
// Built in GOPATH mode against the vendor tree of the test control plane's Kubernetes
// source, so nothing is downloaded.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

func vmHWM() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if strings.HasPrefix(s.Text(), "VmHWM:") {
			fields := strings.Fields(s.Text())
			if len(fields) >= 2 {
				v, _ := strconv.ParseInt(fields[1], 10, 64)
				return v
			}
		}
	}
	return 0
}

func main() {
	ns := flag.String("namespace", "", "namespace to watch (all when empty)")
	flag.Parse()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Warm the connection (TLS, auth) outside the measurement, as the sluice program does.
	if _, err := client.Discovery().ServerVersion(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	start := time.Now()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(*ns))
	pods := factory.Core().V1().Pods().Informer()
	stop := make(chan struct{})
	factory.Start(stop)
	if !cache.WaitForCacheSync(stop, pods.HasSynced) {
		fmt.Fprintln(os.Stderr, "no sync")
		os.Exit(1)
	}
	secs := time.Since(start).Seconds()
	fmt.Printf("RESULT %.3f %d %d\n", secs, vmHWM(), len(pods.GetStore().ListKeys()))
	close(stop)
}
