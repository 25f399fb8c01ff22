package shard

import "errors"

// ErrOtherShard is reported, wrapped, when a Related mapping sharded by namespace maps an
// object to a key in another shard than the object's.
var ErrOtherShard = errors.New("related object mapped to a key of another shard")

// ErrInvalidOptions is returned, wrapped, by New for options that cannot work.
var ErrInvalidOptions = errors.New("invalid sharding options")
