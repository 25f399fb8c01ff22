package shard

import (
	"context"
	"sync"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// parts reads the caches of the shards a replica works on as one source of events and
// objects (a typed.Source): a handler added to it is added to the cache of each shard
// that joins, and removed from it when the shard leaves. A shard joins once its caches
// have synced, so that its keys reach a Loop only with the whole of its view.
type parts[S event.Object] struct {
	mu       sync.Mutex
	caches   map[int]*manager.Cache[S]
	handlers map[*partHandler[S]]struct{}
}

// partHandler is a handler added to parts, with its registration in each shard's cache.
type partHandler[S event.Object] struct {
	name string
	h    controller.Handler[S]
	regs map[int]*controller.Registration
}

func newParts[S event.Object]() *parts[S] {
	return &parts[S]{caches: map[int]*manager.Cache[S]{}, handlers: map[*partHandler[S]]struct{}{}}
}

// synced is the channel of a registration that has synced from the start: each shard's
// cache has synced before it joins.
var synced = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// AddHandler adds h to the cache of every shard that has joined and of every shard that
// joins until its Registration is removed. The Registration has synced at once.
func (p *parts[S]) AddHandler(name string, h controller.Handler[S]) (*controller.Registration, error) {
	ph := &partHandler[S]{name: name, h: h, regs: map[int]*controller.Registration{}}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, c := range p.caches {
		reg, err := c.AddHandler(name, h)
		if err != nil {
			for _, r := range ph.regs {
				r.Remove()
			}
			return nil, err
		}
		ph.regs[i] = reg
	}
	p.handlers[ph] = struct{}{}
	return controller.NewRegistration(synced, func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		n := 0
		for _, r := range ph.regs {
			n += r.Pending()
		}
		return n
	}, func() {
		p.mu.Lock()
		delete(p.handlers, ph)
		regs := ph.regs
		ph.regs = nil
		p.mu.Unlock()
		for _, r := range regs {
			r.Remove()
		}
	}), nil
}

// join adds shard i's cache c, and every handler to it; on an error (the cache was
// released) c is not added.
func (p *parts[S]) join(i int, c *manager.Cache[S]) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	added := map[*partHandler[S]]*controller.Registration{}
	for ph := range p.handlers {
		reg, err := c.AddHandler(ph.name, ph.h)
		if err != nil {
			for _, r := range added {
				r.Remove()
			}
			return err
		}
		added[ph] = reg
	}
	for ph, reg := range added {
		ph.regs[i] = reg
	}
	p.caches[i] = c
	return nil
}

// leave removes shard i's cache and the handlers' registrations in it.
func (p *parts[S]) leave(i int) {
	p.mu.Lock()
	var regs []*controller.Registration
	for ph := range p.handlers {
		if r, ok := ph.regs[i]; ok {
			regs = append(regs, r)
			delete(ph.regs, i)
		}
	}
	delete(p.caches, i)
	p.mu.Unlock()
	for _, r := range regs {
		r.Remove()
	}
}

// Get returns the object of key from the cache of the shard that holds it.
func (p *parts[S]) Get(key string) (S, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.caches {
		if obj, ok := c.Get(key); ok {
			return obj, true
		}
	}
	var zero S
	return zero, false
}

// Watermarks returns the caches of every shard joined that hold namespace's objects, so
// that a Loop over the shards reads its own writes (typed.Consistent).
func (p *parts[S]) Watermarks(namespace string) []eventcache.Watermarked {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []eventcache.Watermarked
	for _, c := range p.caches {
		out = append(out, c.Watermarks(namespace)...)
	}
	return out
}

// Fence does nothing: each shard's caches are fenced as the shard joins (RunShard), and
// the Loop's Run, which starts with the first shard, finds none joined yet.
func (p *parts[S]) Fence(context.Context) error { return nil }

// lens returns the number of objects in each shard's cache.
func (p *parts[S]) lens() map[int]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[int]int, len(p.caches))
	for i, c := range p.caches {
		out[i] = c.Len()
	}
	return out
}
