package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
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
