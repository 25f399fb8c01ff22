package reflect

import (
	goreflect "reflect"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/watchlist"

	"github.com/typedinformer/typedinformer/internal/guard"
)

// WatchListStall bounds the silence of a watch-list's initial events: a stream that
// delivers no event for this long, in real time, before the bookmark that ends
// its initial events, is taken for a ListerWatcher that does not honour sendInitialEvents
// (a hand-written one over a fake, say). The reflector reports ErrWatchListStalled and
// lists with paged lists from then on. A server streams its initial events back to back
// (an empty collection ends at once), so a real stream is never this quiet.
const WatchListStall = 30 * time.Second

// WatchListUnsupported reports whether lw says it cannot serve the watch-list protocol,
// so that a reflector with Options.WatchList lists with paged lists instead of waiting
// for initial events that would never end. It says so when lw:
//
//   - implements IsWatchListSemanticsUnSupported() bool, as client-go's fake clientset,
//     dynamic and metadata fakes and object tracker do, and it returns true (its answer
//     is final, false included; see k8s.io/client-go/util/watchlist);
//   - is a client built on client-go's testing.Fake (it has its Invokes method), as the
//     typed clients of client-go's and of every generated fake clientset are: their
//     object tracker accepts a watch-list request and never sends its initial events;
//   - is a type of one of client-go's fake packages (k8s.io/client-go/.../fake), such as
//     the dynamic and metadata fakes' resource clients, for the same reason.
//
// A nil or typed-nil lw supports nothing to refuse: the answer is false. The library's
// own adapters (the Manager's caches, client.Dynamic) answer for what they wrap.
func WatchListUnsupported(lw any) bool {
	if guard.IsNil(lw) {
		return false
	}
	if _, ok := lw.(interface{ IsWatchListSemanticsUnSupported() bool }); ok {
		return watchlist.DoesClientNotSupportWatchListSemantics(lw)
	}
	if _, ok := lw.(interface {
		Invokes(k8stesting.Action, runtime.Object) (runtime.Object, error)
	}); ok {
		return true
	}
	t := goreflect.TypeOf(lw)
	if t.Kind() == goreflect.Pointer {
		t = t.Elem()
	}
	pkg := t.PkgPath()
	return strings.HasPrefix(pkg, "k8s.io/client-go/") && strings.HasSuffix(pkg, "/fake")
}
