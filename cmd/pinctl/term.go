package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// printable is s as it may be shown on a terminal: unchanged when it is
// valid UTF-8 made of printable characters only (strconv.IsPrint: letters,
// marks, numbers, punctuation, symbols and the ASCII space), else quoted and
// escaped as a Go string literal (strconv.Quote). No control character
// (ESC, CR, LF, NUL, DEL, the C1 set), format character (a bidi override)
// or invalid byte of s reaches the terminal, so a message cannot move the
// cursor, clear the screen or start a line of its own.
func printable(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return s
	}
	return strconv.Quote(s)
}

// printableJSON rewrites JSON text that encoding/json produced (valid
// UTF-8, its strings' C0 controls escaped, no whitespace but the newline
// Encoder.Encode ends it with) so that, the newlines aside, every
// character strconv.IsPrint rejects is a \u escape: encoding/json leaves
// DEL, the C1 controls and format characters (a bidi override) raw, which
// can only be in strings. The JSON means the same.
func printableJSON(b []byte) []byte {
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

// confirmation is how a command that changes something (group reset, dlq
// replay) gets the operator's go-ahead once it has printed what it will do.
// With --yes (yes) nothing is asked: ask is nil. When stdin is a terminal,
// ask prints the question and [y/N] on out and reads the answer from
// stdin: true for y or yes. Otherwise (a script, a pipe) it is a usage
// error naming --yes: a script must say so.
func confirmation(command string, yes bool, stdin io.Reader, out io.Writer) (ask func(question string) (bool, error), err error) {
	if yes {
		return nil, nil
	}
	f, isFile := stdin.(*os.File)
	if !isFile || !dlqIsTerminal(f) {
		return nil, usageError(command + ": stdin is not a terminal: pass --yes to confirm")
	}
	return func(question string) (bool, error) {
		fmt.Fprintf(out, "%s [y/N] ", question)
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return false, err
		}
		a := strings.ToLower(strings.TrimSpace(line))
		return a == "y" || a == "yes", nil
	}, nil
}
