package serve_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flextensor-go/flextensor/models/generate"
	"github.com/flextensor-go/flextensor/serve"
)

// TestOpenAINodeClient runs the official OpenAI library for Node (the npm
// package openai, installed into a temporary directory) against the
// server: testdata/openai_client.mjs completes, streams, lists the models
// and checks that each error arrives as an exception of its class (a 429
// from a second server whose queue is full). It is skipped, saying why,
// when node or npm is missing or the install fails (no registry).
func TestOpenAINodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: skipping the OpenAI Node client test")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed: skipping the OpenAI Node client test")
	}
	dir := t.TempDir()
	script, err := os.ReadFile("testdata/openai_client.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "openai_client.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name": "serve-test", "private": true, "type": "module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "openai@6")
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		t.Skipf("npm install openai failed (no registry?): skipping the OpenAI Node client test: %v\n%s", err, out)
	}

	ts := newServer(t, serverConfig{opt: serve.Options{APIKey: "sekret"}})
	// A second server whose queue is full: its engine does not run, and
	// one request waits in its queue of one.
	busy := newServer(t, serverConfig{noStart: true, sched: generate.Options{MaxSeqs: 1, MaxQueue: 1}})
	go func() {
		resp, err := http.Post(busy.url("/v1/completions"), "application/json", strings.NewReader(`{"prompt": "a", "max_tokens": 2}`))
		if err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, 5*time.Second, "a request to wait in the busy server's queue", func() bool { return busy.Scheduler().Waiting() == 1 })

	run := exec.CommandContext(ctx, node, "openai_client.mjs", ts.http.URL, busy.http.URL)
	run.Dir = dir
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("the OpenAI Node client failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), `"ok":true`) {
		t.Fatalf("unexpected output:\n%s", out)
	}
	t.Logf("node: %s", strings.TrimSpace(string(out)))
}
