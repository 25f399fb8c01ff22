package typed

// Tombstones returns how many deletions' last states the running Loop keeps; 0 when it is
// not running, since a Run keeps nothing once it has returned.
func (l *Loop[T, L]) Tombstones() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.run == nil {
		return 0
	}
	return len(l.run.tombstones)
}

// LastKnown returns the last state the running Loop keeps for a deleted key.
func (l *Loop[T, L]) LastKnown(key string) (T, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var zero T
	if l.run == nil {
		return zero, false
	}
	obj, ok := l.run.tombstones[key]
	return obj, ok
}

// ScheduledRetries returns how many keys have a retry or requeue scheduled.
func (l *Loop[T, L]) ScheduledRetries() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.run == nil {
		return 0
	}
	return len(l.run.retries)
}
