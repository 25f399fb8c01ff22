package prometheus_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/typedinformer/typedinformer/typed/manager"
	typedprom "github.com/typedinformer/typedinformer/typed/metrics/prometheus"
)

// A Manager serves the metrics at /metrics: one New gives the sink every cache and loop
// reports to, and the handler. A program sets MetricsAddress (":8080") and, to have the
// API server authenticate and authorize scrapes, MetricsAuth; here a listener on a free
// port stands for the address.
func Example_manager() {
	pm := typedprom.New(typedprom.Options{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	m := manager.New(manager.Options{Metrics: pm, MetricsListener: l, MetricsHandler: pm.Handler()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()

	// Run listens before it starts anything: the first scrape is served.
	resp, err := http.Get("http://" + l.Addr().String() + "/metrics")
	if err != nil {
		fmt.Println(err)
		cancel()
		<-done
		return
	}
	found := false
	for s := bufio.NewScanner(resp.Body); s.Scan(); {
		found = found || strings.HasPrefix(s.Text(), "go_goroutines ")
	}
	_ = resp.Body.Close()
	fmt.Println(resp.Status, "go_goroutines served:", found)

	cancel()
	fmt.Println("Run:", <-done)
	// Output:
	// 200 OK go_goroutines served: true
	// Run: <nil>
}
