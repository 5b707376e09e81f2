package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	flextensor "github.com/flextensor-go/flextensor"
)

// Signals. A command runs under a context that SIGINT (Ctrl-C) and SIGTERM
// cancel. The long phases check it (between generated tokens, between
// forwards of bench and profile, between the set-up steps of a session) and
// return errInterrupted; the command's deferred Close releases device and
// pinned memory and removes the extracted bundled model, and infer exits
// 130 (SIGINT) or 143 (SIGTERM). A phase that cannot be stopped part-way
// (one long copy or kernel) gets interruptGrace; after it, or at a second
// signal, the process removes its temporary files and exits at once with
// the same code (the operating system and the GPU driver reclaim the
// memory of an exiting process).

// interruptGrace is how long a command may take to stop after a signal.
var interruptGrace = 3 * time.Second

// interrupts tracks the signals of one runMain.
type interrupts struct {
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	sig    os.Signal // the first signal, nil if none
	ch     chan os.Signal
	done   chan struct{}
}

// cmdCtx is the context of the running command (context.Background outside
// runMain): cancelled by SIGINT or SIGTERM.
var cmdCtx = context.Background()

// currentInterrupts is the running runMain's, for exitCode.
var currentInterrupts *interrupts

// watchSignals starts catching SIGINT and SIGTERM for one command; stop
// ends it.
func watchSignals(stderr io.Writer, name string) *interrupts {
	in := &interrupts{ch: make(chan os.Signal, 4), done: make(chan struct{})}
	in.ctx, in.cancel = context.WithCancel(context.Background())
	signal.Notify(in.ch, os.Interrupt, syscall.SIGTERM)
	cmdCtx, currentInterrupts = in.ctx, in
	go func() {
		var timer <-chan time.Time
		for {
			select {
			case <-in.done:
				return
			case s := <-in.ch:
				in.mu.Lock()
				first := in.sig == nil
				if first {
					in.sig = s
				}
				in.mu.Unlock()
				if first {
					in.cancel()
					timer = time.After(interruptGrace)
					continue
				}
				in.hardExit(stderr, name, "a second signal")
			case <-timer:
				in.hardExit(stderr, name, fmt.Sprintf("it did not stop within %v", interruptGrace))
			}
		}
	}()
	return in
}

// hardExit removes the temporary files and exits with the signal's code.
func (in *interrupts) hardExit(stderr io.Writer, name, why string) {
	flextensor.RemoveExtracted()
	fmt.Fprintf(stderr, "infer %s: %s; stopped at once (%s), temporary files removed\n", name, in.describe(), why)
	os.Exit(in.code())
}

func (in *interrupts) stop() {
	signal.Stop(in.ch)
	close(in.done)
	in.cancel()
	cmdCtx, currentInterrupts = context.Background(), nil
}

// signal is the first signal caught, nil when none.
func (in *interrupts) signal() os.Signal {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.sig
}

// code is the exit code: 128 + the signal number (130 for SIGINT, 143 for
// SIGTERM).
func (in *interrupts) code() int {
	if s, ok := in.signal().(syscall.Signal); ok && s == syscall.SIGTERM {
		return 143
	}
	return 130
}

func (in *interrupts) describe() string {
	if s, ok := in.signal().(syscall.Signal); ok && s == syscall.SIGTERM {
		return "terminated (SIGTERM)"
	}
	return "interrupted"
}

// interrupted returns errInterrupted when the command's context is
// cancelled, nil otherwise: the check the long phases make.
func interrupted() error {
	if cmdCtx.Err() != nil {
		return errInterrupted
	}
	return nil
}

// stallForTest blocks at a named phase when FT_TEST_STALL names it, so that
// process tests can signal a command there: "open" waits (before the model
// is opened) until the command's context is cancelled, as a phase that
// checks it would; "load" blocks regardless (after the bundled model is
// extracted), as one long copy would, leaving the stop to interruptGrace.
func stallForTest(phase string, stderr io.Writer) error {
	if os.Getenv("FT_TEST_STALL") != phase {
		return nil
	}
	fmt.Fprintf(stderr, "stalled at %s\n", phase)
	if phase == "load" {
		for { // only the process's exit ends this
			time.Sleep(time.Hour)
		}
	}
	<-cmdCtx.Done()
	return errInterrupted
}
