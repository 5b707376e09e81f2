package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// inferBinary builds the command once for tests that run it as a process.
func inferBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "infer-test-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "infer")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = err
			t.Logf("go build: %s", out)
		}
	})
	if binErr != nil {
		t.Fatalf("building infer: %v", binErr)
	}
	return binPath
}

// TestProgressOnlyOnTerminal: the progress bars for placing weights and for
// the profiling passes are drawn when stderr is a terminal (a pty here) and
// not at all in a pipe.
func TestProgressOnlyOnTerminal(t *testing.T) {
	bin := inferBinary(t)
	args := []string{"run-model", "--token-ids", "1,2,3", "--max-new-tokens", "4", "--device-memory", "8MiB", "--gpu-budget", "0.2"}

	cmd := exec.Command(bin, args...)
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	defer ptmx.Close()
	cmd.Stdout, cmd.Stderr = tty, tty
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	var term bytes.Buffer
	done := make(chan struct{})
	go func() { term.ReadFrom(ptmx); close(done) }()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("on a pty: %v\n%s", err, term.String())
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	for _, want := range []string{"placing weights", "profiling passes", "generated:"} {
		if !strings.Contains(term.String(), want) {
			t.Errorf("terminal output lacks %q:\n%q", want, term.String())
		}
	}

	var out, errOut bytes.Buffer
	cmd = exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("in a pipe: %v", err)
	}
	if strings.Contains(errOut.String(), "placing weights") || strings.Contains(errOut.String(), "profiling") || strings.Contains(errOut.String(), "\r") {
		t.Errorf("progress drawn into a pipe: %q", errOut.String())
	}
	if !strings.Contains(out.String(), "generated:") {
		t.Errorf("stdout in a pipe: %q", out.String())
	}
}
