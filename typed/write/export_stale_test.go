package write

import "time"

// RememberedWrites returns how many objects' last writes the StatusWriter remembers.
func (w *StatusWriter[T, S]) RememberedWrites() int { return w.last.len() }

// RememberedWrites returns how many objects' last writes the Owned remembers.
func (o *Owned[O, T]) RememberedWrites() int { return o.last.len() }

// RememberedWrites returns how many objects' last writes the Finalizer remembers.
func (f *Finalizer[T]) RememberedWrites() int { return f.last.len() }

// BoundRememberedWrites sets how many writes the StatusWriter remembers, for how long,
// and its clock.
func (w *StatusWriter[T, S]) BoundRememberedWrites(limit int, maxAge time.Duration, now func() time.Time) {
	w.last.bound(limit, maxAge, now)
}

func (l *lastWrites[T]) bound(limit int, maxAge time.Duration, now func() time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.limit, l.maxAge, l.now = limit, maxAge, now
}
