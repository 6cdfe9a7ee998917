// The client-go anchor for bench/informer.sh: the same program shape as sluice's
// `pod_sync` example. It builds a SharedInformerFactory, asks it for the Pod informer,
// starts it, waits for cache sync and prints `RESULT <seconds> <VmHWM KiB> <pods>`.
// client-go v0.35 and later fill the cache with a streaming list (a watch with
// sendInitialEvents, feature WatchListClient, on by default) where the server offers it;
// -list-watch turns that off (a paged LIST, then a watch), and an `INFO` line says which.
// With -steady SECS it also measures the steady phase as pod_sync does (update handler
// latency from the Pod's written-at annotation, VmRSS after sync and after the phase) and
// prints `STEADY <VmRSS at sync> <VmRSS at end> <VmHWM> <updates> <p50 us> <p99 us> <max us>`.
// Built by bench/informer.sh against k8s.io/client-go of the server's minor (Go modules).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

const writtenAt = "bench.sluice.dev/written-at"

func vmHWM() int64 { return status("VmHWM:") }

func status(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if strings.HasPrefix(s.Text(), field) {
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
	steady := flag.Int("steady", 0, "seconds of steady phase after sync (0: none)")
	listWatch := flag.Bool("list-watch", false, "LIST then watch, no streaming list")
	flag.Parse()
	if *listWatch {
		// client-go reads its feature gates from the environment on first use.
		os.Setenv("KUBE_FEATURE_WatchListClient", "false")
	}
	fmt.Printf("INFO WatchListClient=%v\n", clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient))
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
	var mu sync.Mutex
	var lat []int64
	last := time.Now()
	if *steady > 0 {
		pods.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(old, new interface{}) {
			n, ok := new.(*v1.Pod)
			if !ok {
				return
			}
			s := n.Annotations[writtenAt]
			if o, ok := old.(*v1.Pod); s == "" || (ok && o.Annotations[writtenAt] == s) {
				return
			}
			sent, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return
			}
			d := time.Now().UnixNano()/1000 - sent
			mu.Lock()
			lat = append(lat, d)
			last = time.Now()
			mu.Unlock()
		}})
	}
	stop := make(chan struct{})
	factory.Start(stop)
	// Not cache.WaitForCacheSync: it polls every 100 ms, which would round the time up.
	for deadline := time.Now().Add(10 * time.Minute); !pods.HasSynced(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "no sync")
			os.Exit(1)
		}
	}
	secs := time.Since(start).Seconds()
	fmt.Printf("RESULT %.3f %d %d\n", secs, vmHWM(), len(pods.GetStore().ListKeys()))
	if *steady > 0 {
		rssSynced := status("VmRSS:")
		time.Sleep(time.Duration(*steady) * time.Second)
		extra := time.Now().Add(30 * time.Second)
		for time.Now().Before(extra) {
			mu.Lock()
			quiet := time.Since(last) >= 3*time.Second
			mu.Unlock()
			if quiet {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		rssEnd := status("VmRSS:")
		mu.Lock()
		l := append([]int64(nil), lat...)
		mu.Unlock()
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		pct := func(p float64) int64 {
			if len(l) == 0 {
				return 0
			}
			i := int(float64(len(l))*p+0.999999) - 1
			if i < 0 {
				i = 0
			}
			if i >= len(l) {
				i = len(l) - 1
			}
			return l[i]
		}
		fmt.Printf("STEADY %d %d %d %d %d %d %d\n", rssSynced, rssEnd, vmHWM(), len(l), pct(0.5), pct(0.99), pct(1))
	}
	close(stop)
}
