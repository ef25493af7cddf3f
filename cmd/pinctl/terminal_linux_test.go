//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/google/uuid"

	"github.com/pin-platform/pin/consumers/kafkatest"
	"github.com/pin-platform/pin/internal/dlq/dlqtest"
	"github.com/pin-platform/pin/internal/group/grouptest"
	"github.com/pin-platform/pin/internal/term"
)

// openTerminal returns the terminal end of a new pseudo-terminal whose
// input already holds typed, as a command's stdin: the command sees a
// terminal and reads what the operator typed.
func openTerminal(t *testing.T, typed string) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open a pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { _ = ptmx.Close() })
	var unlock int32
	if err := ioctl(ptmx, syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		t.Fatalf("unlock the pseudo-terminal: %v", err)
	}
	var n uint32
	if err := ioctl(ptmx, syscall.TIOCGPTN, unsafe.Pointer(&n)); err != nil {
		t.Fatalf("number of the pseudo-terminal: %v", err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open the terminal end: %v", err)
	}
	t.Cleanup(func() { _ = tty.Close() })
	if !term.IsTerminal(tty) {
		t.Fatal("the terminal end of a pseudo-terminal is not a terminal")
	}
	if _, err := ptmx.WriteString(typed); err != nil {
		t.Fatalf("type %q: %v", typed, err)
	}
	return tty
}

func ioctl(f *os.File, req uintptr, arg unsafe.Pointer) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(arg))
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// On a terminal, dlq replay and group reset print what they will do, ask,
// and do nothing unless the answer is yes.
func TestConfirmationOnATerminal(t *testing.T) {
	t.Parallel()

	replayOnTerminal := func(t *testing.T, typed string) (out *bytes.Buffer, produced int, err error) {
		t.Helper()
		kc := dlqtest.NewCluster(t, dlqtest.DeadLetter{DLQPartition: 0, SrcPartition: 2, SrcOffset: 8, Code: "CODE_A", ID: uuid.New(), Key: "k"})
		out = new(bytes.Buffer)
		err = dlqReplayCmd(context.Background(), []string{"--brokers", kc.Bootstrap, "--topic", dlqtest.DLQ}, openTerminal(t, typed), out, new(bytes.Buffer))
		for _, want := range []string{
			"replay 1 message(s) from " + dlqtest.DLQ + " to " + grouptest.Topic + " partition 2\n",
			"produce these messages to their source topic? [y/N] ",
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, out.String())
			}
		}
		return out, kc.Count(t, grouptest.Topic), err
	}

	t.Run("dlq replay declined: nothing produced", func(t *testing.T) {
		t.Parallel()
		out, produced, err := replayOnTerminal(t, "n\n")
		if err == nil || !strings.Contains(err.Error(), "not confirmed: nothing produced") {
			t.Fatalf("dlq replay answered n: error %v, want not confirmed\n%s", err, out)
		}
		if produced != 0 {
			t.Fatalf("the source topic holds %d messages after a declined replay, want 0", produced)
		}
		if !strings.Contains(out.String(), "selected 1, replayed 0, refused 0, failed 0") {
			t.Errorf("counts:\n%s", out)
		}
	})

	t.Run("dlq replay confirmed: produced", func(t *testing.T) {
		t.Parallel()
		out, produced, err := replayOnTerminal(t, "y\n")
		if err != nil || produced != 1 || !strings.Contains(out.String(), "selected 1, replayed 1, refused 0, failed 0") {
			t.Fatalf("dlq replay answered y: %v, %d produced\n%s", err, produced, out)
		}
	})

	t.Run("group reset declined: nothing committed", func(t *testing.T) {
		t.Parallel()
		kc := grouptest.NewTopic(t, kafkatest.NewCluster, 2)
		var out bytes.Buffer
		err := groupResetCmd(context.Background(), []string{"--brokers", kc.Bootstrap, "--group", grouptest.Group, "--topic", grouptest.Topic, "--to-earliest"},
			openTerminal(t, "\n"), &out, &out)
		if err == nil || !strings.Contains(err.Error(), "not confirmed: nothing committed") {
			t.Fatalf("group reset answered nothing: error %v, want not confirmed\n%s", err, out.String())
		}
		if !strings.Contains(out.String(), "commit these offsets for group "+grouptest.Group+"? [y/N] ") {
			t.Errorf("no question:\n%s", out.String())
		}
		grouptest.WantCommitted(t, kc, 2)
	})
}
