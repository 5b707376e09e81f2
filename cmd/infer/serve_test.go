package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startServe runs infer serve on a free port with extra environment and
// returns the process, its address and its stderr.
func startServe(t *testing.T, env []string, args ...string) (*exec.Cmd, string, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(inferBinary(t), append([]string{"serve", "--port", "0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr := &syncBuffer{}
	pr, pw := io.Pipe()
	cmd.Stderr = io.MultiWriter(stderr, pw)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`listening on http://(\S+)`)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
				break
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case a := <-addr:
		return cmd, a, stderr
	case <-time.After(60 * time.Second):
		t.Fatalf("infer serve did not start:\n%s", stderr.String())
	}
	return nil, "", nil
}

// readmeCurls are the curl lines of the README's Serving section.
func readmeCurls(t *testing.T) []string {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i := strings.Index(text, "## Serving")
	if i < 0 {
		t.Fatal("README.md has no Serving section")
	}
	text = text[i:]
	if j := strings.Index(text[3:], "\n## "); j >= 0 {
		text = text[:j+3]
	}
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "curl ") {
			out = append(out, line)
		}
	}
	if len(out) < 5 {
		t.Fatalf("found %d curl examples in the README's Serving section", len(out))
	}
	return out
}

// TestServeProcess: infer serve as a process. The README's curl examples
// work as written (on the port the server got), flags come from FT_
// variables, and SIGTERM mid-stream lets the stream finish, then the
// server exits 0.
func TestServeProcess(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed: skipping the README curl examples")
	}
	// The chat examples need a checkpoint with a chat template (the
	// bundled model has none).
	cmd, addr, stderr := startServe(t, []string{"FT_MAX_CONCURRENCY=3", "FT_QUEUE=7"}, "--model", chatCheckpoint(t))
	if !strings.Contains(stderr.String(), "up to 3 requests at once") {
		t.Errorf("FT_MAX_CONCURRENCY=3 not applied:\n%s", stderr.String())
	}
	for _, line := range readmeCurls(t) {
		line = strings.ReplaceAll(line, "127.0.0.1:8080", addr)
		out, err := exec.Command("bash", "-c", strings.Replace(line, "curl ", curl+" --fail-with-body ", 1)).Output()
		if err != nil {
			t.Errorf("%s: %v\n%s", line, err, out)
			continue
		}
		s := strings.TrimSpace(string(out))
		switch {
		case strings.Contains(line, `"stream": true`):
			if !strings.HasSuffix(s, "data: [DONE]") || !strings.Contains(s, `"usage":{"prompt_tokens"`) {
				t.Errorf("%s: not a finished stream with usage:\n%s", line, s)
			}
		case strings.HasSuffix(line, "/metrics"):
			if !strings.Contains(s, "flextensor_generated_tokens_total") {
				t.Errorf("%s: no metrics:\n%.500s", line, s)
			}
		default:
			var v map[string]any
			if err := json.Unmarshal(out, &v); err != nil || v["error"] != nil {
				t.Errorf("%s: %v\n%s", line, err, s)
			}
		}
	}
	// SIGTERM with a request in flight: the stream finishes, then infer
	// exits 0.
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt": "Drain me", "max_tokens": 120, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(br)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Errorf("the stream in flight at SIGTERM did not finish: %v\n%s", err, rest)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("infer serve after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("infer serve did not exit after SIGTERM")
	}
	if !strings.Contains(stderr.String(), "in-flight requests drained") || !strings.Contains(stderr.String(), `"msg":"request"`) {
		t.Errorf("stderr lacks the drain message or the request log:\n%s", stderr.String())
	}
}

// TestServeFlags: bad serve flags are usage errors (exit 2) naming the flag.
func TestServeFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--port", "70000"}, "--port"},
		{[]string{"--max-concurrency", "0"}, "--max-concurrency"},
		{[]string{"--queue", "-1"}, "--queue"},
		{[]string{"--log-format", "xml"}, "--log-format"},
		{[]string{"--kv-cache", "lots"}, "--kv-cache"},
		{[]string{"--swap-space", "lots"}, "--swap-space"},
		{[]string{"--swap-space", "0.25"}, "--swap-space 0.25: give bytes"},
		{[]string{"--transfer-blocks", "2"}, "--transfer-blocks"},
		// Past the trained context (the tiny model's 256) answers are wrong.
		{[]string{"--max-context", "1000"}, "--max-context 1000 exceeds the model's trained context (max_position_embeddings 256"},
	} {
		var stdout, stderr strings.Builder
		code := runMain(append([]string{"serve", "--port", "0"}, c.args...), &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want 2 naming %s", c.args, code, stderr.String(), c.want)
		}
	}
}

// TestServeNoTokenizer: a checkpoint without tokenizer.json fails naming
// the file's real path, not the bundled model nor run-model's --token-ids.
func TestServeNoTokenizer(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors"} {
		data, err := os.ReadFile(filepath.Join("../../testdata/tiny-llama", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr strings.Builder
	code := runMain([]string{"serve", "--port", "0", "--model", dir}, &stdout, &stderr)
	msg := stderr.String()
	if code != 1 || !strings.Contains(msg, filepath.Join(dir, "tokenizer.json")) ||
		strings.Contains(msg, "bundled") || strings.Contains(msg, "--token-ids") {
		t.Errorf("serve without tokenizer.json: exit %d, stderr %q; want 1 naming %s", code, msg, filepath.Join(dir, "tokenizer.json"))
	}
}

// TestServeBudgetPreflight: an offload budget that the KV cache leaves no
// room for is refused at start (it used to start, report healthy, then
// fail every completion with a 500), naming the budget and the KV cache.
func TestServeBudgetPreflight(t *testing.T) {
	var stdout, stderr strings.Builder
	code := runMain([]string{"serve", "--port", "0", "--model", "../../testdata/tiny-llama", "--gpu-budget", "50MiB", "--device-memory", "64MiB"}, &stdout, &stderr)
	msg := stderr.String()
	if code != 1 || !strings.Contains(msg, "budget 50.00 MiB exceeds the free memory of cpu") || !strings.Contains(msg, "KV cache (512 blocks, 16.00 MiB)") {
		t.Errorf("serve --gpu-budget 50MiB --device-memory 64MiB: exit %d, stderr %q; want 1 naming the budget and the KV cache", code, msg)
	}
}
