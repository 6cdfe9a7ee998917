// dns-standin stands in for the coredns Deployment of the conformance suite's base
// manifests (image registry.k8s.io/coredns/coredns, namespace gateway-conformance-infra),
// which the suite only needs Ready: its Corefile serves UDPRoute tests, outside the
// GATEWAY-HTTP profile. It answers what that Corefile's `whoami` zone answers (foo.bar.com:
// an A record of the asking address) and refuses every other name instead of forwarding
// it: a test never sends traffic off the machine.
//
// Flags: -conf FILE (coredns's own flag, read only to fail early when the ConfigMap volume
// is missing), -listen ADDR (default :53, UDP and TCP).
package main

import (
	"flag"
	"log"
	"net"
	"os"
	"strings"

	"github.com/miekg/dns"
)

func main() {
	conf := flag.String("conf", "", "Corefile (read, not interpreted)")
	listen := flag.String("listen", ":53", "address to answer on, UDP and TCP")
	flag.Parse()
	if *conf != "" {
		if _, err := os.ReadFile(*conf); err != nil {
			log.Fatalf("dns-standin: %v", err)
		}
	}
	dns.HandleFunc(".", answer)
	errs := make(chan error, 2)
	for _, proto := range []string{"udp", "tcp"} {
		srv := &dns.Server{Addr: *listen, Net: proto}
		go func() { errs <- srv.ListenAndServe() }()
	}
	log.Printf("dns-standin: answering foo.bar.com. on %s", *listen)
	log.Fatalf("dns-standin: %v", <-errs)
}

// answer mirrors coredns's whoami plugin for foo.bar.com. and refuses the rest.
func answer(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	if len(r.Question) != 1 || !strings.EqualFold(r.Question[0].Name, "foo.bar.com.") {
		m.Rcode = dns.RcodeRefused
		_ = w.WriteMsg(m)
		return
	}
	m.Authoritative = true
	q := r.Question[0]
	var ip net.IP
	switch a := w.RemoteAddr().(type) {
	case *net.UDPAddr:
		ip = a.IP
	case *net.TCPAddr:
		ip = a.IP
	}
	if v4 := ip.To4(); v4 != nil && (q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY) {
		m.Answer = append(m.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0},
			A:   v4,
		})
	}
	_ = w.WriteMsg(m)
}
