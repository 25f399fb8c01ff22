package shard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/typed/leaderelection"
)

// GroupLabel is the label of the Leases of a Sharder, its members' and its shards': its
// value is Options.Name.
const GroupLabel = "shard.typedinformer.io/group"

// Options configure a Sharder.
type Options struct {
	// Client manages the Leases, e.g. clientset.CoordinationV1().
	Client coordinationclient.LeasesGetter
	// Namespace holds the Leases.
	Namespace string
	// Name names the group of replicas that divide the shards: its Leases are
	// <Name>-shard-<i> for shard i and <Name>-member-<Identity> for each replica.
	Name string
	// Identity of this replica, unique in the group (a pod name). It names the member
	// Lease and is what shards are assigned to; the shards' Leases are held under it
	// with a random suffix per Run, so that a replica started again under the same
	// Identity waits for its predecessor's shards to be released or to expire.
	Identity string
	// Space is the shard space; 32 shards by UID when Space.Shards is zero.
	Space Space
	// LeaseDuration, RenewDeadline and RetryPeriod are those of leaderelection.Config,
	// for each shard's Lease and for the member Leases (leaderelection's defaults, 15s,
	// 10s and 2s, when zero). A
	// replica that cannot renew its member Lease for RenewDeadline gives up its shards;
	// the others take them over once its Leases have expired.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Metrics receives the shards held, moves and hand-over times; none when nil. A
	// panic in one of its calls is recovered and logged.
	Metrics Metrics
}

// Metrics receives a Sharder's gauges and counters. Every method carries the group's
// name (Options.Name), and no method name is used by another interface of the family
// (manager.Metrics: controller.Metrics and typed.Metrics), so one type can implement them
// all. Implementations must be safe for concurrent use.
type Metrics interface {
	// ShardsHeld is called with the number of shards whose work runs on this replica.
	ShardsHeld(group string, n int)
	// ShardMoved is called when this replica starts (gained) or stops (not gained)
	// working on a shard.
	ShardMoved(group string, shard int, gained bool)
	// HandOver is called once per gained shard with the time from this replica's
	// decision to take it (the first assignment that gave it the shard) to the shard's
	// work being ready (Shard.Ready: for Loop, its first reconcile, or its synced cache
	// when the shard is empty).
	HandOver(group string, shard int, d time.Duration)
	// ShardObjects is called every RetryPeriod, for each shard whose keys a Loop
	// reconciles, with the number of objects cached for it.
	ShardObjects(group string, shard int, n int)
	// ShardKeys is called with ShardObjects, with the number of the shard's keys queued
	// in the Loop (not counting those being reconciled).
	ShardKeys(group string, shard int, n int)
}

// Shard is a shard held by this replica, given to the work of a Sharder.
type Shard struct {
	// Index is the shard's number, in [0, Space.Shards).
	Index int
	// Space is the shard space.
	Space Space
	ready func()
	held  context.Context
}

// Held returns a context that ends when this replica no longer holds the shard's Lease: a
// renewal failed, or the shard moved away RenewDeadline ago. Work's own context ends
// first, as soon as the shard moves away (or Sharder.Run ends); until Held ends, work may
// finish handing the shard over, holding the Lease, which is released only once work
// returns. A Loop reconciles the deletions it has queued then (see
// typed.Loop.HandOver): the next owner lists the shard, and cannot know of them. A
// Shard not given by a Sharder holds nothing: its Held has ended.
func (s Shard) Held() context.Context {
	if s.held == nil {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx
	}
	return s.held
}

// Selector returns the shard's selector for ListOptions.ShardSelector.
func (s Shard) Selector() string { return s.Space.Selector([]int{s.Index}) }

// Ready says that the shard's work has taken it over (for a Loop, its first reconcile);
// the first call reports the hand-over time. It is safe to call any number of times.
func (s Shard) Ready() {
	if s.ready != nil {
		s.ready()
	}
}

// Sharder divides the shards of a Space among the live replicas of a group, through
// Leases only, and runs work for each shard while this replica holds that shard's Lease.
//
// Membership: each replica renews a member Lease every RetryPeriod; the live members are
// those whose Lease this replica saw renewed within its duration. Assignment: every
// replica computes Assign over the live members, so all agree once they see the same
// members. Ownership: a replica campaigns for the Lease of each shard assigned to it,
// with leaderelection.Config, and runs the shard's work only while it holds the Lease.
//
// Hand-over is exclusive: when a shard is no longer assigned to this replica, its work's
// context is cancelled, the Sharder waits for the work to return (a Loop lets its
// in-flight reconciles finish, and reconciles its queued deletions while Shard.Held
// lasts), and only then releases the Lease; the new owner acquires it only then, or once
// it has expired if the old owner died or was cut off. A replica
// that cannot renew a shard's Lease within RenewDeadline cancels that shard's work, as a
// leader does (see leaderelection.Config for the bound on LeaseDuration).
type Sharder struct {
	opts Options
	// metrics calls Options.Metrics, recovering a panic in it: its calls come from
	// campaigns' goroutines and from reconciles (Shard.Ready).
	metrics guard.Metrics[Metrics]

	mu      sync.Mutex
	running bool
	members []string            // live members at the last assignment
	owners  []string            // the last assignment
	work    map[int]*campaign   // shards campaigned for or stopping
	seen    map[string]observed // member Leases by name
	// shardSeen are the shards' Leases by shard, as last listed; a shard with none has
	// no Lease yet.
	shardSeen map[int]observedShard
	leading   map[int]struct{}      // shards whose work runs
	ownLease  *coordinationv1.Lease // this replica's member Lease as last written
	// holder is this Run's identity in the shards' Leases: Identity and a random suffix,
	// so that a replica started again under the same Identity (a StatefulSet's pod,
	// force-deleted while cut off and maybe still working) takes none of its
	// predecessor's shards as its own; it waits for their release or expiry.
	holder  string
	renewed time.Time // when the member Lease was last renewed

	collecting sync.WaitGroup // deletions of the Leases of replicas gone for good
	logged     []int          // the shards held, as last logged
}

// observed is what this replica last saw of a member Lease, and when it saw it change.
type observed struct {
	identity string
	renew    string // the Lease's resourceVersion
	duration time.Duration
	// at is when the member last renewed, as seen from here; since is when this replica
	// saw that renewal, which only its own clock says.
	at, since time.Time
}

// observedShard is a shard's Lease as this replica last listed it, and when it saw it
// change.
type observedShard struct {
	lease *coordinationv1.Lease
	at    time.Time
}

// campaign is this replica's pursuit of one shard.
type campaign struct {
	cancel  context.CancelFunc // ends the election: the Lease is released once work returns
	done    chan struct{}
	decided time.Time

	// leaveCtx ends when the shard moves away (or Run ends): work's context ends then,
	// and the election once work has returned, or at the latest when hardStop fires.
	leaveCtx context.Context
	leave    context.CancelFunc
	// Guarded by Sharder.mu.
	leaving  bool
	leading  bool        // work has started
	hardStop *time.Timer // ends the election RenewDeadline after leaving
}

// New returns a Sharder with opts, or an error wrapping ErrInvalidOptions.
func New(opts Options) (*Sharder, error) {
	if opts.Space.Shards == 0 {
		opts.Space.Shards = 32
	}
	opts.LeaseDuration = cmp.Or(opts.LeaseDuration, leaderelection.DefaultLeaseDuration)
	opts.RenewDeadline = cmp.Or(opts.RenewDeadline, leaderelection.DefaultRenewDeadline)
	opts.RetryPeriod = cmp.Or(opts.RetryPeriod, leaderelection.DefaultRetryPeriod)
	var errs []error
	if err := opts.Space.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch {
	case guard.IsNil(opts.Client):
		errs = append(errs, errors.New("no Lease client"))
	case opts.Identity == "":
		errs = append(errs, errors.New("no identity"))
	case opts.Name == "":
		errs = append(errs, errors.New("no name"))
	}
	for _, name := range []string{memberLease(opts.Name, opts.Identity), shardLease(opts.Name, opts.Space.Shards-1)} {
		for _, msg := range validation.IsDNS1123Subdomain(name) {
			errs = append(errs, fmt.Errorf("lease name %q: %s", name, msg))
		}
	}
	for _, msg := range validation.IsValidLabelValue(opts.Name) {
		errs = append(errs, fmt.Errorf("name %q as a label value: %s", opts.Name, msg))
	}
	if opts.RetryPeriod <= 0 || opts.RenewDeadline >= opts.LeaseDuration || opts.RetryPeriod >= opts.RenewDeadline {
		errs = append(errs, errors.New("need 0 < RetryPeriod < RenewDeadline < LeaseDuration"))
	}
	if opts.LeaseDuration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("%w: %v", leaderelection.ErrLeaseDuration, opts.LeaseDuration))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	opts.Client = guard.Leases(opts.Client)
	return &Sharder{opts: opts, metrics: guard.NewMetrics(opts.Metrics, "sharder", opts.Name)}, nil
}

func memberLease(group, identity string) string { return group + "-member-" + identity }
func shardLease(group string, i int) string     { return group + "-shard-" + strconv.Itoa(i) }

// Space returns the Sharder's shard space.
func (s *Sharder) Space() Space { return s.opts.Space }

// Identity returns this replica's identity.
func (s *Sharder) Identity() string { return s.opts.Identity }

// Held returns the shards whose work runs on this replica now, in order.
func (s *Sharder) Held() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heldLocked()
}

func (s *Sharder) heldLocked() []int {
	held := make([]int, 0, len(s.leading))
	for i := range s.leading {
		held = append(held, i)
	}
	slices.Sort(held)
	return held
}

// Members returns the live members this replica saw at its last assignment, in order.
func (s *Sharder) Members() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.members)
}

// Run divides the shards with the other replicas until ctx ends, calling work for each
// shard while this replica holds it, with a context cancelled when the shard moves away,
// its Lease cannot be renewed, or ctx ends. work must return soon after its context is
// cancelled, having finished what it started: only then is the shard's Lease released.
// A panic in work is recovered and logged, and the shard is campaigned for again.
//
// When ctx ends, Run hands every shard over as if it moved away: it cancels every
// shard's work, waits for it (for RenewDeadline at most if the work waits on Shard.Held),
// releases the shards' Leases, deletes this replica's member Lease so that the others
// take its shards at once, and returns with no goroutine left. It returns an error wrapping controller.ErrAlreadyRunning if
// the Sharder runs.
func (s *Sharder) Run(ctx context.Context, work func(ctx context.Context, sh Shard)) error {
	if work == nil {
		return fmt.Errorf("%w: nil work", controller.ErrNilArgument)
	}
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return fmt.Errorf("sharder %q: %w", s.opts.Name, controller.ErrAlreadyRunning)
	}
	s.running = true
	s.work, s.seen, s.leading = map[int]*campaign{}, map[string]observed{}, map[int]struct{}{}
	s.shardSeen = nil
	s.members, s.owners, s.ownLease, s.renewed, s.logged = nil, nil, nil, time.Time{}, nil
	s.holder = s.opts.Identity + "_" + string(uuid.NewUUID())
	s.mu.Unlock()
	logger := klog.FromContext(ctx).WithValues("sharder", s.opts.Name, "identity", s.opts.Identity)
	ctx = klog.NewContext(ctx, logger)
	defer s.stop(ctx)

	wait.JitterUntilWithContext(ctx, func(ctx context.Context) { s.tick(ctx, work) }, s.opts.RetryPeriod, 0.2, true)
	return nil
}

// tick renews this replica's membership, reads the others', and starts or stops shards.
func (s *Sharder) tick(ctx context.Context, work func(context.Context, Shard)) {
	logger := klog.FromContext(ctx)
	now := time.Now()
	if err := s.heartbeat(ctx, now); err != nil && ctx.Err() == nil {
		logger.Error(err, "renewing the member lease failed")
	}
	// One list gives the members' Leases and the shards', all labelled with the group.
	list, err := s.opts.Client.Leases(s.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: GroupLabel + "=" + s.opts.Name})
	if err == nil && list == nil {
		err = errors.New("listing the leases returned nothing")
	}
	// Leases are seen as of when the List returned, never earlier: a Lease written
	// during a slow heartbeat must not look older than it is to takeOver.
	now = time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reapLocked()
	if err != nil {
		if ctx.Err() == nil {
			logger.Error(err, "listing the leases failed; keeping the last assignment")
		}
		if now.Sub(s.renewed) < s.opts.RenewDeadline {
			return
		}
		// Cut off for RenewDeadline: the others may take this replica's shards.
	}
	if err == nil {
		for _, l := range s.observeLocked(list.Items, now) {
			s.collecting.Go(func() { s.collect(ctx, l) })
		}
		s.observeShardsLocked(list.Items, now)
	}
	members := s.liveLocked(now)
	if !slices.Equal(members, s.members) {
		logger.Info("members changed", "members", members)
	}
	s.members = members
	s.owners = Assign(s.opts.Space.Shards, members)
	if held := s.heldLocked(); !slices.Equal(held, s.logged) {
		logger.Info("shards held", "shards", held, "count", len(held), "of", s.opts.Space.Shards)
		s.logged = held
	}
	for i := range s.opts.Space.Shards {
		mine := s.owners != nil && s.owners[i] == s.opts.Identity
		c := s.work[i]
		switch {
		case mine && c == nil:
			s.startLocked(ctx, i, now, work)
		case !mine && c != nil && !c.leaving:
			logger.V(2).Info("shard assigned elsewhere; handing it over", "shard", i, "to", s.ownerLocked(i))
			s.leaveLocked(c)
		}
	}
}

func (s *Sharder) ownerLocked(i int) string {
	if s.owners == nil {
		return ""
	}
	return s.owners[i]
}

// leaveLocked hands c's shard over: its work's context ends, and the election once the
// work has returned, so that the Lease is released only then; work may use Shard.Held to
// finish the hand-over, for RenewDeadline at most. A campaign whose work has not started
// ends at once.
func (s *Sharder) leaveLocked(c *campaign) {
	c.leaving = true
	c.leave()
	if !c.leading {
		c.cancel()
		return
	}
	c.hardStop = time.AfterFunc(s.opts.RenewDeadline, c.cancel)
}

// reapLocked forgets the campaigns that have ended.
func (s *Sharder) reapLocked() {
	for i, c := range s.work {
		select {
		case <-c.done:
			delete(s.work, i)
		default:
		}
	}
}

// heartbeat creates or renews this replica's member Lease.
func (s *Sharder) heartbeat(ctx context.Context, now time.Time) error {
	leases := s.opts.Client.Leases(s.opts.Namespace)
	s.mu.Lock()
	lease := s.ownLease
	s.mu.Unlock()
	var err error
	if lease == nil {
		lease, err = leases.Get(ctx, memberLease(s.opts.Name, s.opts.Identity), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			lease, err = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
				Name: memberLease(s.opts.Name, s.opts.Identity), Namespace: s.opts.Namespace,
			}}, nil
		}
		if err != nil {
			return err
		}
	}
	lease = lease.DeepCopy()
	if lease.Labels == nil {
		lease.Labels = map[string]string{}
	}
	lease.Labels[GroupLabel] = s.opts.Name
	renew := metav1.NewMicroTime(now)
	seconds := int32(s.opts.LeaseDuration / time.Second)
	lease.Spec.HolderIdentity = &s.opts.Identity
	lease.Spec.LeaseDurationSeconds = &seconds
	lease.Spec.RenewTime = &renew
	if lease.ResourceVersion == "" {
		lease.Spec.AcquireTime = &renew
		lease, err = leases.Create(ctx, lease, metav1.CreateOptions{})
	} else {
		lease, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.ownLease = nil // read it again next time
		return err
	}
	s.ownLease, s.renewed = lease, now
	return nil
}

// observeLocked records the member Leases listed, noting when each was last renewed as
// seen from here: clocks of different machines are never compared, as in client-go's
// leader election. It returns the Leases of members gone for good: unrenewed for
// collectAfter lease durations, as seen from here.
func (s *Sharder) observeLocked(leases []coordinationv1.Lease, now time.Time) (gone []coordinationv1.Lease) {
	seen := make(map[string]observed, len(leases))
	for _, l := range leases {
		if !strings.HasPrefix(l.Name, s.opts.Name+"-member-") {
			continue // a shard's Lease
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.RenewTime == nil {
			continue
		}
		o := observed{identity: *l.Spec.HolderIdentity, renew: l.ResourceVersion, at: now, since: now, duration: s.opts.LeaseDuration}
		if l.Spec.LeaseDurationSeconds != nil {
			o.duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		switch prior, ok := s.seen[l.Name]; {
		case ok && prior.renew == o.renew:
			o.at, o.since = prior.at, prior.since
		case !ok && l.Spec.RenewTime.Time.Before(now):
			// Seen for the first time, by a replica that just started: the member's own
			// clock says when it last renewed. Trusting it for liveness only spares a
			// newcomer a lease duration of counting a dead member as live, and so of
			// leaving unworked the shards it would assign to it; a clock behind ours at
			// worst counts a live member dead for a while, which moves no shard from it,
			// as shards' Leases are only ever taken over on this replica's own clock.
			o.at = l.Spec.RenewTime.Time
		}
		seen[l.Name] = o
		if now.Sub(o.since) > collectAfter*o.duration {
			gone = append(gone, l)
		}
	}
	s.seen = seen
	return gone
}

// collectAfter is how many lease durations a member Lease stays unrenewed before a
// replica deletes it: replicas named after pods get new names when they restart, and a
// Lease left by each crash would pile up. A replica whose Lease was deleted while it was
// cut off creates it again.
const collectAfter = 3

// collect deletes the member Lease of a replica gone for good, unless it has been renewed
// since it was read (the precondition on its resourceVersion).
func (s *Sharder) collect(ctx context.Context, l coordinationv1.Lease) {
	rv := l.ResourceVersion
	err := s.opts.Client.Leases(s.opts.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	switch {
	case err == nil:
		klog.FromContext(ctx).Info("deleted the member lease of a replica gone for good", "lease", l.Name)
	case !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil:
		klog.FromContext(ctx).Error(err, "deleting the member lease of a replica gone for good", "lease", l.Name)
	}
}

// observeShardsLocked records the shards' Leases listed, and when each was seen to
// change, as observeLocked does for the members'.
func (s *Sharder) observeShardsLocked(leases []coordinationv1.Lease, now time.Time) {
	seen := make(map[int]observedShard, s.opts.Space.Shards)
	prefix := s.opts.Name + "-shard-"
	for _, l := range leases {
		i, err := strconv.Atoi(strings.TrimPrefix(l.Name, prefix))
		if !strings.HasPrefix(l.Name, prefix) || err != nil || i < 0 || i >= s.opts.Space.Shards {
			continue
		}
		o := observedShard{lease: l.DeepCopy(), at: now}
		if prior, ok := s.shardSeen[i]; ok && prior.lease.ResourceVersion == l.ResourceVersion {
			o.at = prior.at
		}
		seen[i] = o
	}
	s.shardSeen = seen
}

// liveLocked returns the live members, in order: the others whose Lease was renewed
// within its duration, and this replica while its own renewals succeed.
func (s *Sharder) liveLocked(now time.Time) []string {
	var live []string
	for name, o := range s.seen {
		if name == memberLease(s.opts.Name, s.opts.Identity) {
			continue
		}
		if now.Sub(o.at) < o.duration {
			live = append(live, o.identity)
		}
	}
	if !s.renewed.IsZero() && now.Sub(s.renewed) < s.opts.RenewDeadline {
		live = append(live, s.opts.Identity)
	}
	slices.Sort(live)
	return slices.Compact(live)
}

// startLocked campaigns for shard i and runs work while holding it.
func (s *Sharder) startLocked(ctx context.Context, i int, now time.Time, work func(context.Context, Shard)) {
	// Run's end does not end the election at once: stop hands every shard over first.
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	leaveCtx, leave := context.WithCancel(context.Background())
	c := &campaign{cancel: cancel, done: make(chan struct{}), decided: now, leaveCtx: leaveCtx, leave: leave}
	s.work[i] = c
	le := leaderelection.Config{
		Client:        s.opts.Client,
		Namespace:     s.opts.Namespace,
		Name:          shardLease(s.opts.Name, i),
		Identity:      s.holder,
		LeaseDuration: s.opts.LeaseDuration,
		RenewDeadline: s.opts.RenewDeadline,
		RetryPeriod:   s.opts.RetryPeriod,
	}
	seen, listed := s.shardSeen[i]
	logger := klog.FromContext(ctx).WithValues("shard", i)
	// Each shard's election logs its routine steps (acquired, renewed, released) at
	// verbosity 2: with 32 shards at verbosity 0 they would bury everything else. The
	// Sharder logs the shards held as they change instead; errors stay errors.
	ectx := klog.NewContext(cctx, logger.V(2))
	go func() {
		defer close(c.done)
		defer cancel()
		defer leave()
		defer func() {
			s.mu.Lock()
			if c.hardStop != nil {
				c.hardStop.Stop()
			}
			s.mu.Unlock()
		}()
		took, ok := s.prepare(ectx, i, seen, listed)
		if !ok {
			return // campaigned for again at a later tick
		}
		if err := le.Run(ectx, func(ctx context.Context) { s.lead(klog.NewContext(ctx, logger), i, c, work) }); err != nil {
			logger.Error(err, "campaigning for a shard failed")
		}
		if took != nil {
			// Stopped before the elector could release what takeOver acquired: the next
			// owner would wait for it to expire.
			s.release(klog.NewContext(ctx, logger), took)
		}
	}()
}

// prepare readies shard i's Lease for the campaign. A Lease that does not exist is
// created free, with the group's label: replicas racing to create it in client-go's
// elector would log errors, and the Sharder lists its Leases by that label. A
// Lease held by another replica is taken over once this replica has seen it unchanged
// for its duration, with its resourceVersion as a precondition (see takeOver): client-go's
// elector would start watching it only now, and wait a duration of its own, doubling the
// hand-over after a crash, since this replica decided to take the shard only once the
// owner's member Lease had gone unrenewed for as long. The holder, if alive, stopped
// working on the shard a RenewDeadline after its last renewal, as a leader does.
//
// It returns the Lease as takeOver wrote it, or nil, and false when the Lease is not
// ready: the elector would create it without the label.
func (s *Sharder) prepare(ctx context.Context, i int, seen observedShard, listed bool) (*coordinationv1.Lease, bool) {
	if listed {
		return s.takeOver(ctx, i, seen), true
	}
	leases := s.opts.Client.Leases(s.opts.Namespace)
	_, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Name: shardLease(s.opts.Name, i), Labels: map[string]string{GroupLabel: s.opts.Name},
	}}, metav1.CreateOptions{})
	if err == nil {
		return nil, true
	}
	if !apierrors.IsAlreadyExists(err) {
		if ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "creating the shard's lease failed")
		}
		return nil, false
	}
	// Not listed by the group's label, yet there: created since the list, or without the
	// label (by an older version, or by hand).
	l, err := leases.Get(ctx, shardLease(s.opts.Name, i), metav1.GetOptions{})
	if err != nil || l.Labels[GroupLabel] == s.opts.Name {
		return nil, err == nil
	}
	l = l.DeepCopy()
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[GroupLabel] = s.opts.Name
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		if !apierrors.IsConflict(err) && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "labelling the shard's lease failed")
		}
		return nil, false
	}
	return nil, true
}

// takeOver takes shard i's Lease, held by another replica, once it has stayed unchanged
// for its duration since this replica first saw it so (seen.at). It watches the Lease
// every RetryPeriod until then, and leaves it to the elector as soon as the Lease is free
// or ours, or changes: its holder is alive and renews it, and will hand it over. It
// returns the Lease it wrote, or nil.
func (s *Sharder) takeOver(ctx context.Context, i int, seen observedShard) *coordinationv1.Lease {
	leases := s.opts.Client.Leases(s.opts.Namespace)
	logger := klog.FromContext(ctx)
	l := seen.lease
	for {
		holder, seconds := "", int32(0)
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		if l.Spec.LeaseDurationSeconds != nil {
			seconds = *l.Spec.LeaseDurationSeconds
		}
		if holder == "" || holder == s.holder || l.ResourceVersion != seen.lease.ResourceVersion {
			return nil
		}
		if time.Since(seen.at) >= time.Duration(seconds)*time.Second {
			break
		}
		t := time.NewTimer(s.opts.RetryPeriod)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		var err error
		if l, err = leases.Get(ctx, shardLease(s.opts.Name, i), metav1.GetOptions{}); err != nil {
			return nil // the elector reads it again
		}
	}
	l = l.DeepCopy()
	renew := metav1.NewMicroTime(time.Now())
	duration := int32(s.opts.LeaseDuration / time.Second)
	transitions := int32(1)
	if l.Spec.LeaseTransitions != nil {
		transitions = *l.Spec.LeaseTransitions + 1
	}
	from := *l.Spec.HolderIdentity
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = &s.holder, &duration
	l.Spec.AcquireTime, l.Spec.RenewTime, l.Spec.LeaseTransitions = &renew, &renew, &transitions
	took, err := leases.Update(ctx, l, metav1.UpdateOptions{})
	switch {
	case err == nil:
		logger.Info("took over the expired lease of a shard", "from", from)
		return took
	case !apierrors.IsConflict(err) && ctx.Err() == nil:
		logger.Error(err, "taking over the expired lease of a shard failed; campaigning for it", "from", from)
	}
	return nil
}

// release frees a shard's Lease as takeOver wrote it, as client-go's elector releases
// one, unless it has been written since (the elector renewed or released it): its
// resourceVersion is the precondition.
func (s *Sharder) release(ctx context.Context, took *coordinationv1.Lease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.RenewDeadline)
	defer cancel()
	l := took.DeepCopy()
	now, free, second := metav1.NewMicroTime(time.Now()), "", int32(1)
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.AcquireTime, l.Spec.RenewTime = &free, &second, &now, &now
	switch _, err := s.opts.Client.Leases(s.opts.Namespace).Update(ctx, l, metav1.UpdateOptions{}); {
	case err == nil:
		klog.FromContext(ctx).V(2).Info("released the lease taken over")
	case !apierrors.IsConflict(err):
		klog.FromContext(ctx).Error(err, "releasing the lease taken over failed; the next owner takes it once it expires")
	}
}

// lead runs work for shard i while this replica holds its Lease: ctx ends when it is lost
// (or the hand-over's time is up); work's context ends then, or when the shard moves
// away. Once work has returned, the election ends and the Lease is released.
func (s *Sharder) lead(ctx context.Context, i int, c *campaign, work func(context.Context, Shard)) {
	logger := klog.FromContext(ctx)
	defer c.cancel()
	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	defer context.AfterFunc(c.leaveCtx, stopWork)()
	var once sync.Once
	sh := Shard{Index: i, Space: s.opts.Space, held: ctx, ready: func() {
		once.Do(func() {
			d := time.Since(c.decided)
			logger.V(2).Info("shard taken over", "handOver", d)
			s.metrics.Call(ctx, "HandOver", func(m Metrics) { m.HandOver(s.opts.Name, i, d) })
		})
	}}
	s.setLeading(i, c, true)
	defer s.setLeading(i, c, false)
	defer guard.LogPanic(logger, nil, "shard work panicked")
	work(klog.NewContext(wctx, logger), sh)
}

func (s *Sharder) setLeading(i int, c *campaign, on bool) {
	s.mu.Lock()
	c.leading = on
	if on {
		s.leading[i] = struct{}{}
	} else {
		delete(s.leading, i)
	}
	n := len(s.leading)
	s.mu.Unlock()
	s.metrics.Call(context.Background(), "ShardMoved", func(m Metrics) { m.ShardMoved(s.opts.Name, i, on) })
	s.metrics.Call(context.Background(), "ShardsHeld", func(m Metrics) { m.ShardsHeld(s.opts.Name, n) })
}

// stop ends every shard's work, waits for the Leases' release, and deletes this
// replica's member Lease.
func (s *Sharder) stop(ctx context.Context) {
	s.mu.Lock()
	campaigns := make([]*campaign, 0, len(s.work))
	for _, c := range s.work {
		if !c.leaving {
			s.leaveLocked(c)
		}
		campaigns = append(campaigns, c)
	}
	s.mu.Unlock()
	for _, c := range campaigns {
		<-c.done
	}
	s.collecting.Wait()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.RenewDeadline)
	defer cancel()
	err := s.opts.Client.Leases(s.opts.Namespace).Delete(dctx, memberLease(s.opts.Name, s.opts.Identity), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		klog.FromContext(ctx).Error(err, "deleting the member lease failed; the others take this replica's shards once it expires")
	}
	s.mu.Lock()
	s.running = false
	s.work, s.leading = nil, nil
	s.mu.Unlock()
}
