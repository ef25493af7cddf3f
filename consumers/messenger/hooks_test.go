package messenger

import (
	"context"
	"sync"
	"testing"

	"github.com/google/uuid"
)

// Tests run in parallel, each on its own chats: the package's single hook
// dispatches on the chat id.
var (
	hooks       sync.Map // chat id → func(context.Context)
	installHook sync.Once
)

// onBeforeWrite runs fn whenever the handler is about to write chatID,
// until the test ends.
func onBeforeWrite(t *testing.T, chatID uuid.UUID, fn func(ctx context.Context)) {
	installHook.Do(func() {
		f := func(ctx context.Context, id uuid.UUID) {
			if h, ok := hooks.Load(id); ok {
				h.(func(context.Context))(ctx)
			}
		}
		testHookBeforeWrite.Store(&f)
	})
	hooks.Store(chatID, fn)
	t.Cleanup(func() { hooks.Delete(chatID) })
}
