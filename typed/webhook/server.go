package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/internal/guard"
)

// The defaults of ServerOptions, controller-runtime's.
const (
	DefaultPort     = 9443
	DefaultCertName = "tls.crt"
	DefaultKeyName  = "tls.key"
	// DefaultShutdownTimeout bounds how long reviews in flight may finish once Run's
	// context ends: the API server waits 10 seconds for a webhook by default.
	DefaultShutdownTimeout = 10 * time.Second
)

// DefaultCertDir is where a Server reads its certificate by default:
// $TMPDIR/k8s-webhook-server/serving-certs, as controller-runtime's does.
func DefaultCertDir() string {
	return filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")
}

// ServerOptions configure a Server. The zero value serves on port 9443 of every
// interface, with the certificate and key of DefaultCertDir.
type ServerOptions struct {
	// Host is the address to listen on; every interface when "".
	Host string
	// Port is the port to listen on; DefaultPort when zero.
	Port int
	// Listener, when set, is listened on instead of Host and Port (a test's, on port
	// 0); the Server serves TLS on it and closes it when Run returns. A typed nil counts
	// as unset.
	Listener net.Listener
	// CertDir holds the serving certificate and key, in PEM; DefaultCertDir when "".
	CertDir string
	// CertName and KeyName are their file names in CertDir; DefaultCertName and
	// DefaultKeyName when "".
	CertName, KeyName string
	// TLSOpts change the TLS configuration after the Server set its own (minimum
	// version TLS 1.2, HTTP/1.1 only, the certificate from the files). HTTP/2 is off by
	// default because of its rapid-reset attack (CVE-2023-44487), as in controller-runtime's
	// scaffolding; an option setting NextProtos to {"h2", "http/1.1"} turns it on.
	TLSOpts []func(*tls.Config)
	// ShutdownTimeout bounds how long reviews in flight may finish once Run's context
	// ends; DefaultShutdownTimeout when zero.
	ShutdownTimeout time.Duration
}

// Server serves webhooks (Admission, Converter, any http.Handler registered) over TLS,
// with a certificate and key read from files and read again when they change: each TLS
// handshake checks the files' size and modification time (a stat), and a changed pair is
// served from that handshake on, with no restart. A pair that does not load (a
// half-written replacement) is logged and the previous one kept, until the files load.
//
// Run it alone, or give it to a Manager (manager.Options.Webhook), which runs it on every
// replica and makes /readyz wait for it. Its methods are safe for concurrent use.
type Server struct {
	opts ServerOptions
	mux  *http.ServeMux

	mu      sync.Mutex
	paths   map[string]bool
	running bool
	addr    net.Addr // while listening, with a certificate loaded
}

// NewServer returns a Server with opts, ready to Register handlers and Run. The zero
// Server is one with the zero ServerOptions.
func NewServer(opts ServerOptions) *Server { return &Server{opts: opts} }

// withDefaults returns opts with the defaults of what is unset.
func withDefaults(opts ServerOptions) ServerOptions {
	if opts.CertDir == "" {
		opts.CertDir = DefaultCertDir()
	}
	if opts.CertName == "" {
		opts.CertName = DefaultCertName
	}
	if opts.KeyName == "" {
		opts.KeyName = DefaultKeyName
	}
	if opts.Port == 0 {
		opts.Port = DefaultPort
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if guard.IsNil(opts.Listener) {
		opts.Listener = nil
	}
	return opts
}

// muxLocked returns the Server's mux, made on first use. Called with s.mu held.
func (s *Server) muxLocked() *http.ServeMux {
	if s.mux == nil {
		s.mux, s.paths = http.NewServeMux(), map[string]bool{}
	}
	return s.mux
}

// Register serves h at path, before or while the Server runs. It returns an error
// wrapping ErrInvalidOptions for a nil s or h, a path that does not start with "/", or
// one registered already.
func (s *Server) Register(path string, h http.Handler) error {
	if s == nil || guard.IsNil(h) {
		return fmt.Errorf("%w: Register(%q) needs a Server and a handler", ErrInvalidOptions, path)
	}
	if !strings.HasPrefix(path, "/") {
		return fmt.Errorf("%w: path %q does not start with /", ErrInvalidOptions, path)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paths[path] {
		return fmt.Errorf("%w: path %q is registered already", ErrInvalidOptions, path)
	}
	mux := s.muxLocked()
	s.paths[path] = true
	mux.Handle(path, h)
	return nil
}

// Paths returns the registered paths, sorted.
func (s *Server) Paths() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.paths))
}

func (s *Server) registered(path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paths[path]
}

// NeedLeaderElection returns false: webhooks are served by every replica.
func (s *Server) NeedLeaderElection() bool { return false }

// Addr returns the address the Server listens on while it runs, nil otherwise.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Ready is a readiness check (manager.Check): nil once the Server listens with a
// certificate loaded, until Run returns; an error saying why not otherwise.
func (s *Server) Ready(*http.Request) error {
	if s == nil {
		return errors.New("no webhook server")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.addr == nil {
		return errors.New("the webhook server is not listening")
	}
	return nil
}

// Run loads the certificate, listens, and serves until ctx ends; then it stops
// listening, lets reviews in flight finish within ShutdownTimeout, and returns nil. It
// returns an error wrapping ErrCertificate when the certificate and key cannot be loaded,
// the listener's error when it cannot listen or serve, and one wrapping ErrAlreadyRunning
// when the Server runs already. It leaves no goroutine behind.
func (s *Server) Run(ctx context.Context) error {
	if s == nil {
		return fmt.Errorf("%w: Run of a nil Server", ErrInvalidOptions)
	}
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return ErrAlreadyRunning
	}
	s.running = true
	mux := s.muxLocked()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running, s.addr = false, nil
		s.mu.Unlock()
	}()
	logger := klog.FromContext(ctx)
	opts := withDefaults(s.opts)
	l := opts.Listener
	certs := &certReloader{cert: filepath.Join(opts.CertDir, opts.CertName), key: filepath.Join(opts.CertDir, opts.KeyName), logger: logger}
	if err := certs.load(); err != nil {
		if l != nil {
			_ = l.Close()
		}
		return err
	}
	if l == nil {
		var err error
		if l, err = net.Listen("tcp", net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port))); err != nil {
			return fmt.Errorf("webhook server: %w", err)
		}
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}, GetCertificate: certs.get}
	for _, o := range opts.TLSOpts {
		if o != nil {
			o(cfg)
		}
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) }, // its logger
		ErrorLog:          log.New(logWriter{logger}, "", 0),
	}
	s.mu.Lock()
	s.addr = l.Addr()
	s.mu.Unlock()
	logger.Info("Serving webhooks", "address", l.Addr().String(), "certificate", certs.cert, "paths", s.Paths())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(tls.NewListener(l, cfg)) }()
	select {
	case err := <-served:
		return fmt.Errorf("webhook server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Error(err, "Reviews in flight did not finish in time; closing their connections", "timeout", opts.ShutdownTimeout)
		_ = srv.Close()
	}
	<-served
	logger.Info("Stopped serving webhooks")
	return nil
}

// logWriter sends what net/http logs (TLS handshake errors of clients that do not trust
// the certificate, mostly) to the server's logger at verbosity 2, instead of stderr.
type logWriter struct{ logger klog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.logger.V(2).Info("Webhook server", "message", strings.TrimSpace(string(p)))
	return len(p), nil
}

// certReloader holds the serving certificate and key read from two files, and reads them
// again when a handshake finds that the files changed.
type certReloader struct {
	cert, key string
	logger    klog.Logger

	mu     sync.Mutex
	pair   *tls.Certificate
	loaded [2]stamp // of the files pair was read from
	failed [2]stamp // of files that did not load, logged once
}

// stamp is what a stat says of a file: a changed file has a new one.
type stamp struct {
	size int64
	mod  time.Time
}

func (c *certReloader) stamps() ([2]stamp, error) {
	var st [2]stamp
	for i, name := range []string{c.cert, c.key} {
		fi, err := os.Stat(name)
		if err != nil {
			return st, err
		}
		st[i] = stamp{fi.Size(), fi.ModTime()}
	}
	return st, nil
}

// load reads the pair, returning an error wrapping ErrCertificate when it does not load.
func (c *certReloader) load() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := c.stamps()
	if err == nil {
		err = c.readLocked(st)
	}
	if err != nil {
		return fmt.Errorf("%w: %s and %s: %w", ErrCertificate, c.cert, c.key, err)
	}
	return nil
}

func (c *certReloader) readLocked(st [2]stamp) error {
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		return err
	}
	c.pair, c.loaded = &pair, st
	return nil
}

// get is tls.Config.GetCertificate: the pair, read again first if the files changed.
func (c *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := c.stamps()
	if err == nil && st != c.loaded {
		if err = c.readLocked(st); err == nil {
			c.logger.Info("Serving the webhook certificate read again", "certificate", c.cert)
		}
	}
	if err != nil && st != c.failed {
		c.failed = st
		c.logger.Error(fmt.Errorf("%w: %w", ErrCertificate, err), "The webhook certificate files changed but do not load; serving the previous pair", "certificate", c.cert, "key", c.key)
	}
	return c.pair, nil
}
