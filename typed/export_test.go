package typed

// Tombstones returns how many deletions' last states the running Loop keeps; 0 when it is
// not running, since a Run keeps nothing once it has returned.
func (l *Loop[T]) Tombstones() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.run == nil {
		return 0
	}
	return len(l.run.tombstones)
}

// LastKnown returns the last state the running Loop keeps for a deleted key.
func (l *Loop[T]) LastKnown(key string) (T, bool) {
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
func (l *Loop[T]) ScheduledRetries() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.run == nil {
		return 0
	}
	return len(l.run.retries)
}

// Queued returns how many keys the running Loop has queued at live and at sync priority.
func (l *Loop[T]) Queued() (live, sync int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.run == nil {
		return 0, 0
	}
	return l.run.q.queued()
}

func (q *keyQueue) queued() (live, sync int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.waiting[livePriority].Len(), q.waiting[syncPriority].Len()
}

// LiveInARow is how many live keys the queue hands out in a row while sync keys wait.
const LiveInARow = liveInARow

// Queue is the Loop's key queue, for tests of its contract.
type Queue struct{ q *keyQueue }

// NewQueue returns an empty Queue.
func NewQueue() Queue { return Queue{newKeyQueue(false)} }

// Add queues key at live priority when live, at sync priority otherwise.
func (q Queue) Add(key string, live bool) { q.q.Add(key, priorityOf(!live)) }

// Get hands out the next key and whether it was queued at live priority.
func (q Queue) Get() (key string, live, shutdown bool) {
	key, p, shutdown := q.q.Get()
	return key, p == livePriority, shutdown
}

// Done marks key as processed.
func (q Queue) Done(key string) { q.q.Done(key) }

// ShutDown shuts the queue down.
func (q Queue) ShutDown() { q.q.ShutDown() }

// Len returns how many keys are queued.
func (q Queue) Len() int { return q.q.Len() }

// Pending reports whether key is queued or being processed.
func (q Queue) Pending(key string) bool { return q.q.Pending(key) }
