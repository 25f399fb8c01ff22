package typed

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/typedinformer/typedinformer/controller"
)

// RunAll runs every function on its own goroutine with a context that is cancelled when
// ctx ends or any function returns an error, and returns once all have returned, with
// their errors joined; a nil function is an error wrapping controller.ErrNilArgument. It is how a
// program runs its controllers and loops together:
//
//	typed.RunAll(ctx, configMaps.Run, secrets.Run, loop.Run)
func RunAll(ctx context.Context, fns ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(fns))
	for i, fn := range fns {
		if fn == nil {
			errs[i] = fmt.Errorf("%w: RunAll's function %d", controller.ErrNilArgument, i)
			cancel()
			continue
		}
		wg.Go(func() {
			if errs[i] = fn(ctx); errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
