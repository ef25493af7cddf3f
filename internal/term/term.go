// Package term is what pinctl shows on a terminal: text that came from a
// message, made safe to print (Printable, PrintableJSON); the one check of
// whether a file is a terminal (IsTerminal); and the one progress bar
// (Progress).
package term

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/mattn/go-isatty"
)

// IsTerminal reports whether f is open on a terminal: f is an *os.File (or
// anything else with a file descriptor) whose descriptor is a terminal,
// Cygwin's and MSYS's pseudo-terminals included. Anything else — a pipe, a
// regular file, /dev/null, a bytes.Buffer, nil — is not.
func IsTerminal(f any) bool {
	fd, ok := f.(interface{ Fd() uintptr })
	if !ok {
		return false
	}
	return isatty.IsTerminal(fd.Fd()) || isatty.IsCygwinTerminal(fd.Fd())
}

// Printable is s as it may be shown on a terminal: unchanged when it is
// valid UTF-8 made of printable characters only (strconv.IsPrint: letters,
// marks, numbers, punctuation, symbols and the ASCII space), else quoted and
// escaped as a Go string literal (strconv.Quote). No control character
// (ESC, CR, LF, NUL, DEL, the C1 set), format character (a bidi override)
// or invalid byte of s reaches the terminal, so a message cannot move the
// cursor, clear the screen or start a line of its own.
func Printable(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return s
	}
	return strconv.Quote(s)
}

// PrintableJSON rewrites JSON text that encoding/json produced (valid
// UTF-8, its strings' C0 controls escaped, no whitespace but the newline
// Encoder.Encode ends it with) so that, the newlines aside, every
// character strconv.IsPrint rejects is a \u escape: encoding/json leaves
// DEL, the C1 controls and format characters (a bidi override) raw, which
// can only be in strings. The JSON means the same. b is returned as it is
// when nothing needs escaping.
func PrintableJSON(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		// An invalid byte decodes as RuneError of size 1: escaped as
		// \ufffd, what encoding/json makes of it.
		if r == '\n' || (strconv.IsPrint(r) && (r != utf8.RuneError || size > 1)) {
			if out != nil {
				out = append(out, b[i:i+size]...)
			}
			i += size
			continue
		}
		if out == nil {
			out = append(make([]byte, 0, len(b)+16), b[:i]...)
		}
		if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += size
	}
	if out == nil {
		return b
	}
	return out
}
