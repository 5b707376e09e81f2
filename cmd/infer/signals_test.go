package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// longContextModel is the tiny checkpoint with a context of a million
// positions (RoPE works at any position), so that generation and decode
// benchmarks run long enough to be interrupted.
func longContextModel(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"model.safetensors", "tokenizer.json"} {
		abs, err := filepath.Abs(filepath.Join("../../testdata/tiny-llama", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := os.ReadFile("../../testdata/tiny-llama/config.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg = bytes.Replace(cfg, []byte(`"max_position_embeddings": 256`), []byte(`"max_position_embeddings": 1000000`), 1)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// syncBuffer is a bytes.Buffer safe for a reader goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// leftovers lists the bundled-model directories left in dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "flextensor-tiny-llama-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSignalsAtEachPhase: SIGINT and SIGTERM stop every command at every
// phase promptly, with exit 130 (SIGINT) or 143 (SIGTERM), a message
// saying so, and no temporary directory left behind: between generated
// tokens, between bench forwards, before loading (a phase that checks
// for the signal) and in the middle of loading (a phase that cannot check:
// the process removes its temporary files and exits after the grace
// period, or at once on a second signal).
func TestSignalsAtEachPhase(t *testing.T) {
	bin := inferBinary(t)
	long := longContextModel(t)
	cases := []struct {
		name   string
		args   []string
		stall  string        // FT_TEST_STALL
		ready  string        // text on stdout or stderr that says the phase is reached ("" = any stdout)
		sigs   []os.Signal   // sent one after the other
		code   int           // exit code
		want   string        // in stderr
		within time.Duration // from the first signal to the exit
	}{
		{"generate SIGINT", []string{"run-model", "--model", long, "--prompt", "Hello", "--max-new-tokens", "20000", "--ignore-eos",
			"--device-memory", "256MiB", "--gpu-budget", "1MiB"}, "", "", []os.Signal{syscall.SIGINT}, 130,
			"interrupted; device and pinned memory released", 2 * time.Second},
		{"generate SIGTERM", []string{"run-model", "--model", long, "--prompt", "Hello", "--max-new-tokens", "20000", "--ignore-eos"},
			"", "", []os.Signal{syscall.SIGTERM}, 143, "terminated (SIGTERM); device and pinned memory released", 2 * time.Second},
		{"bench iterations SIGINT", []string{"bench", "--mode", "prefill", "--tokens", "64", "--iters", "1000000", "--budgets", "0"},
			"", "budget", []os.Signal{syscall.SIGINT}, 130, "interrupted", 2 * time.Second},
		{"bench decode SIGTERM", []string{"bench", "--model", long, "--context", "8", "--iters", "20000", "--budgets", "resident"},
			"", "budget", []os.Signal{syscall.SIGTERM}, 143, "terminated (SIGTERM)", 2 * time.Second},
		{"profile before loading SIGINT", []string{"profile", "--device-memory", "4MiB", "--gpu-budget", "0.5", "--out", t.TempDir()},
			"open", "stalled at open", []os.Signal{syscall.SIGINT}, 130, "interrupted", 2 * time.Second},
		{"run-model before loading SIGTERM", []string{"run-model", "--token-ids", "1,2"},
			"open", "stalled at open", []os.Signal{syscall.SIGTERM}, 143, "terminated (SIGTERM)", 2 * time.Second},
		{"loading SIGTERM (grace period)", []string{"run-model", "--token-ids", "1,2"},
			"load", "stalled at load", []os.Signal{syscall.SIGTERM}, 143, "did not stop within 3s), temporary files removed", interruptGrace + 2*time.Second},
		{"loading twice SIGINT", []string{"profile", "--device-memory", "4MiB", "--gpu-budget", "0.5", "--out", t.TempDir()},
			"load", "stalled at load", []os.Signal{syscall.SIGINT, syscall.SIGINT}, 130, "(a second signal), temporary files removed", 2 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmp := t.TempDir()
			cmd := exec.Command(bin, c.args...)
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "FT_TEST_STALL="+c.stall)
			var stdout, stderr syncBuffer
			outR, outW := io.Pipe()
			cmd.Stdout, cmd.Stderr = outW, &stderr
			ready := make(chan struct{})
			var once sync.Once
			go func() {
				r := bufio.NewReader(outR)
				for {
					b, err := r.ReadByte()
					if err != nil {
						return
					}
					stdout.Write([]byte{b})
					if c.ready == "" || strings.Contains(stdout.String(), c.ready) {
						once.Do(func() { close(ready) })
					}
				}
			}()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			deadline := time.After(60 * time.Second)
		wait:
			for {
				select {
				case <-ready:
					break wait
				case <-deadline:
					cmd.Process.Kill()
					t.Fatalf("phase not reached; stdout %q, stderr %q", stdout.String(), stderr.String())
				case <-time.After(20 * time.Millisecond):
					if c.ready != "" && strings.Contains(stderr.String(), c.ready) {
						break wait
					}
				}
			}
			if c.ready == "budget" {
				time.Sleep(300 * time.Millisecond) // into the iterations
			}
			sent := time.Now()
			for i, s := range c.sigs {
				if i > 0 {
					time.Sleep(200 * time.Millisecond)
				}
				if err := cmd.Process.Signal(s); err != nil {
					t.Fatal(err)
				}
			}
			err := cmd.Wait()
			outW.Close()
			took := time.Since(sent)
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.code || !strings.Contains(stderr.String(), c.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr.String(), c.code, c.want)
			}
			if took > c.within {
				t.Errorf("took %v after the signal to exit, want under %v", took, c.within)
			}
			if left := leftovers(t, tmp); len(left) > 0 {
				t.Errorf("temporary files left behind: %v", left)
			}
		})
	}
}
