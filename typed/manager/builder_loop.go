package manager

import (
	"context"
	"fmt"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/nilness"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed"
)

// newLoop is NewLoop with predicates, which typed.NewLoop takes and NewLoop does not pass
// on yet; relate is Related with predicates. The Builder uses them. Once NewLoop and
// Related take trailing predicates themselves, they are calls to those, and this file
// goes.
func newLoop[T event.Object, L reflect.List](c *Cache[T, L], r typed.Reconciler[T], opts typed.Options, preds ...typed.Predicate[T]) (*Loop[T, L], error) {
	var zero T
	switch {
	case c == nil:
		return nil, fmt.Errorf("%w: NewLoop's cache of %T", typed.ErrNilArgument, zero)
	case nilness.IsNil(r):
		return nil, fmt.Errorf("%w: NewLoop's reconciler of %T", typed.ErrNilArgument, zero)
	}
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("%T", zero)
	}
	own, err := c.clone()
	if err != nil {
		return nil, err
	}
	l := &Loop[T, L]{cache: own, needs: &loopNeeds{name: opts.Name}}
	runs := make([]func(context.Context) error, len(own.members))
	for i, mb := range own.members {
		loop := typed.NewLoop(mb.ctrl, r, opts, preds...)
		l.loops = append(l.loops, loop)
		runs[i] = loop.Run
		l.needs.entries = append(l.needs.entries, mb.e)
	}
	m := c.m
	err = m.add(&runnable{name: "loop " + opts.Name, leader: true, r: RunnableFunc(func(ctx context.Context) error {
		return typed.RunAll(ctx, runs...)
	})})
	if err != nil {
		own.Release()
		return nil, err
	}
	m.mu.Lock()
	m.loops = append(m.loops, l.needs)
	m.mu.Unlock()
	return l, nil
}

func relate[S event.Object, SL reflect.List, T event.Object, L reflect.List](
	l *Loop[T, L], secondary *Cache[S, SL], keysOf func(S) []string, preds ...typed.Predicate[S],
) error {
	var zero S
	switch {
	case l == nil:
		return fmt.Errorf("%w: Related's loop, for %T", typed.ErrNilArgument, zero)
	case secondary == nil:
		return fmt.Errorf("%w: Related's cache of %T", typed.ErrNilArgument, zero)
	case keysOf == nil:
		return fmt.Errorf("%w: Related's mapping of %T", typed.ErrNilArgument, zero)
	case secondary.m != l.cache.m:
		return fmt.Errorf("related cache %s belongs to another manager than loop %q", secondary.Name(), l.needs.name)
	}
	own, err := secondary.clone()
	if err != nil {
		return err
	}
	for i, loop := range l.loops {
		mapping := keysOf
		if ns := l.cache.members[i].namespace; ns != "" {
			mapping = inNamespace(ns, keysOf)
		}
		for _, mb := range own.members {
			typed.Related(loop, mb.ctrl, mapping, preds...)
		}
	}
	m := l.cache.m
	m.mu.Lock()
	for _, mb := range own.members {
		l.needs.entries = append(l.needs.entries, mb.e)
	}
	m.mu.Unlock()
	return nil
}
