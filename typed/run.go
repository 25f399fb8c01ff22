package typed

import (
	"context"
	"errors"
	"sync"
)

// RunAll runs every function on its own goroutine with a context that is cancelled when
// ctx ends or any function returns an error, and returns once all have returned, with
// their errors joined. It is how a program runs its controllers and loops together:
//
//	typed.RunAll(ctx, configMaps.Run, secrets.Run, loop.Run)
func RunAll(ctx context.Context, fns ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(fns))
	for i, fn := range fns {
		wg.Go(func() {
			if errs[i] = fn(ctx); errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
