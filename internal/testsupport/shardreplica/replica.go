// Package shardreplica runs replicas of a sharded loop over ConfigMaps in one process,
// each with connections of its own that can be cut off (a crash, or a partition: no
// heartbeat, no renewal, no watch) and that count the bytes received. The end-to-end
// test of sharding, the shards demo and the sharding benchmark share it.
package shardreplica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"

	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
	"github.com/typedinformer/typedinformer/typed/shard"
)

// Config is what the replicas of one group share.
type Config struct {
	// Rest is the API server's configuration; each replica copies it.
	Rest *rest.Config
	// Namespace holds the ConfigMaps reconciled and the Leases.
	Namespace string
	// Group names the Leases (shard.Options.Name).
	Group string
	// Space, durations, Workers and Metrics are those of shard.Options and typed.Options.
	Space                                     shard.Space
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Workers                                   int
	Metrics                                   shard.Metrics
	// Reconcile is each replica's reconciler, told which replica calls it.
	Reconcile func(ctx context.Context, replica string, req typed.Request[*corev1.ConfigMap]) (typed.Result, error)
}

// Replica is one running replica: a Manager, whose caches the Loop's shards are, running
// the Loop.
type Replica struct {
	// Name is the replica's identity.
	Name    string
	Manager *manager.Manager
	Sharder *shard.Sharder
	Loop    *shard.Loop[*corev1.ConfigMap]

	cut         atomic.Bool
	bytes       atomic.Int64
	objectBytes atomic.Int64
	dialer      *connrotation.Dialer
	cancel      context.CancelFunc
	done        chan struct{}
	err         error
}

// ErrCut is the error of every request of a replica that was cut off.
var ErrCut = errors.New("replica cut off from the API server")

// Start starts a replica named name, running until ctx ends or Stop.
func Start(ctx context.Context, cfg Config, name string) (*Replica, error) {
	r := &Replica{Name: name, done: make(chan struct{})}
	rc := rest.CopyConfig(cfg.Rest)
	// A Dial of its own gives the replica connections of its own, which Crash closes.
	r.dialer = connrotation.NewDialer((&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	rc.Dial = r.dialer.DialContext
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if r.cut.Load() {
				return nil, ErrCut
			}
			resp, err := rt.RoundTrip(req)
			if err == nil {
				c := &counting{ReadCloser: resp.Body, r: r, total: &r.bytes}
				if strings.Contains(req.URL.Path, "/configmaps") {
					c.objects = &r.objectBytes
				}
				resp.Body = c
			}
			return resp, err
		})
	})
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	r.Sharder, err = shard.New(shard.Options{
		Client: client.CoordinationV1(), Namespace: cfg.Namespace, Name: cfg.Group, Identity: name,
		Space: cfg.Space, LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline,
		RetryPeriod: cfg.RetryPeriod, Metrics: cfg.Metrics,
	})
	if err != nil {
		return nil, err
	}
	reconcile := func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
		return cfg.Reconcile(ctx, name, req)
	}
	// The Manager runs the shards' caches, and the Loop on every replica (it needs no
	// leader election): its shutdown stops the caches once the Loop has handed its shards
	// over.
	r.Manager = manager.New(manager.Options{})
	loop, err := shard.NewLoop(r.Manager, r.Sharder, manager.Namespaced[*corev1.ConfigMap](client.CoreV1().ConfigMaps),
		typed.ReconcilerFunc[*corev1.ConfigMap](reconcile), typed.Options{Name: "configmaps", Workers: cfg.Workers})
	if err != nil {
		return nil, err
	}
	r.Loop = loop.WithCacheOptions(manager.CacheOptions[*corev1.ConfigMap]{Namespaces: []string{cfg.Namespace}})
	if err := r.Manager.Add("configmaps", r.Loop); err != nil {
		return nil, err
	}
	ctx, r.cancel = context.WithCancel(ctx)
	go func() {
		defer close(r.done)
		r.err = r.Manager.Run(ctx)
	}()
	return r, nil
}

// Crash cuts the replica off: its open connections close and every later request fails,
// so that it renews nothing and watches nothing, as if it had died; its loops stop once
// their shards' Leases cannot be renewed.
func (r *Replica) Crash() {
	r.cut.Store(true)
	r.dialer.CloseAll()
}

// Stop stops the replica, which releases its shards, and returns the Manager's Run's
// error (the Loop's, wrapped).
func (r *Replica) Stop() error {
	r.cancel()
	<-r.done
	r.dialer.CloseAll()
	return r.err
}

// BytesReceived returns the bytes of response bodies the replica has read.
func (r *Replica) BytesReceived() int64 { return r.bytes.Load() }

// ObjectBytesReceived returns the bytes of the ConfigMaps' lists and watches, without the
// Leases'.
func (r *Replica) ObjectBytesReceived() int64 { return r.objectBytes.Load() }

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// counting counts what is read from a response body, and fails reads once its replica
// is cut off, so that a watch already open ends too.
type counting struct {
	io.ReadCloser
	r              *Replica
	total, objects *atomic.Int64
}

func (c *counting) Read(p []byte) (int, error) {
	if c.r.cut.Load() {
		return 0, fmt.Errorf("reading a response: %w", ErrCut)
	}
	n, err := c.ReadCloser.Read(p)
	c.total.Add(int64(n))
	if c.objects != nil {
		c.objects.Add(int64(n))
	}
	return n, err
}
