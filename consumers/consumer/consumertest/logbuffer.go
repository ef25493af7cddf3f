package consumertest

import (
	"bytes"
	"encoding/json"
	"sync"
)

// LogBuffer collects a consumer's JSON log lines; the runtime's goroutines
// may write to it concurrently.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns the lines written so far that are JSON objects, decoded,
// for which keep (nil: every line) is true.
func (b *LogBuffer) Lines(keep func(map[string]any) bool) []map[string]any {
	b.mu.Lock()
	data := bytes.Clone(b.buf.Bytes())
	b.mu.Unlock()
	var out []map[string]any
	for _, line := range bytes.Split(data, []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		if keep == nil || keep(m) {
			out = append(out, m)
		}
	}
	return out
}
