package term

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// assertPrintable fails unless out is valid UTF-8 whose every character
// but the newline is printable (strconv.IsPrint).
func assertPrintable(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s: invalid UTF-8 in the output:\n%q", what, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if i := strings.IndexFunc(l, func(r rune) bool { return !strconv.IsPrint(r) }); i >= 0 {
			t.Errorf("%s: raw %U in line %q", what, []rune(l[i:])[0], l)
		}
	}
}

func TestPrintable(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain text", "Квартиры у парка", "emoji 😀", "a\tb", "\x1b[2J", "a\r\nb", "\x00", "\x7f",
		"\u009b", "\u202e", "\u2028", "\xff\xfe", "\U000e0001"} {
		got := Printable(s)
		if strings.IndexFunc(got, func(r rune) bool { return !strconv.IsPrint(r) }) >= 0 || !utf8.ValidString(got) {
			t.Errorf("Printable(%q) = %q: not printable", s, got)
		}
		if got != s {
			if u, err := strconv.Unquote(got); err != nil || u != s {
				t.Errorf("Printable(%q) = %q, which does not unquote to it", s, got)
			}
		} else if s == "a\tb" || s == "\x7f" {
			t.Errorf("Printable(%q) left it as it is", s)
		}

		b, err := json.Marshal(map[string]string{s: s})
		if err != nil {
			t.Fatal(err)
		}
		j := PrintableJSON(append(b, '\n'))
		if !bytes.HasSuffix(j, []byte("}\n")) || bytes.Count(j, []byte("\n")) != 1 {
			t.Errorf("PrintableJSON(%s) = %s: not one line", b, j)
		}
		assertPrintable(t, "PrintableJSON", string(j))
		var back map[string]string
		if err := json.Unmarshal(j, &back); err != nil {
			t.Errorf("PrintableJSON(%s) = %s: %v", b, j, err)
		} else if want := string([]rune(s)); back[want] != want { // an invalid byte reads back as U+FFFD
			t.Errorf("PrintableJSON(%s) = %s reads back as %q", b, j, back)
		}
	}
}

// Neither a pipe, a regular file, /dev/null (a character device that is no
// terminal) nor a writer without a file is a terminal. (A pseudo-terminal
// is: cmd/pinctl's confirmation test runs on one.)
func TestIsTerminalIsFalseOffATerminal(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	var nilFile *os.File
	for name, f := range map[string]any{"a pipe": w, "a regular file": file, os.DevNull: null, "a buffer": new(bytes.Buffer), "nil": nil, "a nil *os.File": nilFile} {
		if IsTerminal(f) {
			t.Errorf("%s is taken for a terminal", name)
		}
	}
}
