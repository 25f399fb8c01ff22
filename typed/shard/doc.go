// Package shard spreads the keys of a controller over several replicas, with the
// Kubernetes API alone: Leases for membership and ownership, and the API server's shard
// selectors (KEP-5866, ListOptions.ShardSelector, alpha feature gate ShardedListAndWatch
// in Kubernetes v1.36) so that each replica lists and watches only its own objects.
//
// # Shards
//
// A Space divides the 64-bit FNV-1a hash of each object's UID (or namespace, to keep a
// namespace's objects together) into a power of two of equal ranges, as the server's
// shardRange function does. Filter makes a ListerWatcher of some shards: it sends the
// selector, and filters again on the client with the same hash, so that a server with
// the gate off, or older, gives the same objects (all of them cross the network then).
//
// # Ownership
//
// A Sharder gives each shard to one live replica of a group. Each replica renews a member
// Lease; every replica computes the same assignment from the live members (Assign:
// rendezvous hashing, capped so that no replica holds more than one shard above an even
// share, within ceil(1.5*S/N); each replica's cap falls at a member count of its own, so
// that a join or a leave moves on average about a share, at most 2.5 times it); and a
// replica works on a shard only while it holds that
// shard's Lease, campaigned for with leaderelection.Config. A shard moves by hand-over:
// the old owner stops taking the shard's keys, lets its in-flight reconciles finish, and
// only then releases the Lease; the new owner acquires it then, or once it expires if the
// old owner died or was cut off (which stops its work when it cannot renew, as a leader
// does). So no key is reconciled by two replicas at once (DESIGN 14), provided reconciles
// return soon after their context is cancelled and LeaseDuration leaves room for them
// (see leaderelection.Config.RenewDeadline). By UID, that holds per object: a name deleted
// and created again under a new UID can be in two shards for a while (see ByUID).
//
// # Loops
//
// A Loop is one typed.Loop, with one queue and one set of workers for the replica,
// over the caches of the shards held, read as one Source whose parts are the shards
// (typed.Parts). Gaining a shard acquires its cache, and once the shard's caches have
// synced its keys join the Loop: every key in it is reconciled, at the priority of an
// initial list. Losing one ends its reconciles' context, drops its queued keys
// unreconciled but for deletions, which the Loop reconciles while this replica still
// holds the shard's Lease (typed.Loop.HandOver; DESIGN 15: the next owner cannot know of
// them), then releases its cache. An object that leaves this replica's scope because its
// shard moved gets no event at all: it is not deleted, its cache is simply gone (DESIGN
// 17). An object never leaves a shard by itself, since its UID and namespace never
// change. NewLoop refuses a nil Manager, Sharder, ListerWatcher, reconciler or predicate
// with an error, before any shard is held.
//
// Each shard's cache is a list and a watch of its own, acquired from the Manager's shared
// caches with the shard's selector in its key: every Loop of the kind on the same Sharder
// reads the same one, and a Related cache of all objects (ByUID) is the Manager's own. A
// replica holding k shards opens k watches, each of 1/S of the objects when the server filters. When it does not (gate
// off), each watch receives every object and the client drops the others, so a replica
// receives k times what one unsharded watch would: turn the gate on, or use few shards.
package shard
