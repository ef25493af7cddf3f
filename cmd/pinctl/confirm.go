package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/pin-platform/pin/internal/term"
)

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
	if !term.IsTerminal(stdin) {
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
