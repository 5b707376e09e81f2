package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestTokenTrace: FT_TOKEN_TRACE=1 makes a hybrid run-model (CPU device,
// host threads) print one line a token, in order, each the sum of its
// forward, pick and outside times, with the engine's pass: the prompt's
// DISCOVERY pass first, two PROFILING passes, then INFERENCE under the plan
// for one token, every token from the eighth on steady; and a summary that
// counts steady and other tokens as the lines do. bench prints the same for
// its forwards, one line each (the context's prefill, the skipped and the
// timed ones; the untimed ones never steady). Unset prints none; another value is refused, naming it.
func TestTokenTrace(t *testing.T) {
	const newTokens = 16
	t.Setenv("FT_TOKEN_TRACE", "1")
	code, _, errOut := run(t, "run-model", "--device", "cpu", "--device-memory", "64MiB", "--gpu-budget", "0", "--host-threads", "1",
		"--token-ids", "37,235,396,72,255,393,203,133,335,448,144,129", "--ignore-eos", "--max-new-tokens", strconv.Itoa(newTokens))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	line := regexp.MustCompile(`^token-trace: token (\d+): ([0-9.]+) ms = forward ([0-9.]+) \+ pick ([0-9.]+) \+ outside ([0-9.]+); GC cycles \+\d+; pass (\d+) (\S+) T=(\d+)(.*)$`)
	var n, steady int
	for _, l := range strings.Split(errOut, "\n") {
		if !strings.HasPrefix(l, "token-trace: token ") {
			continue
		}
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("trace line %q does not parse", l)
		}
		n++
		if tok, _ := strconv.Atoi(m[1]); tok != n {
			t.Fatalf("line %d names token %d: %q", n, tok, l)
		}
		if pass, _ := strconv.Atoi(m[6]); pass != n {
			t.Fatalf("token %d ran pass %d, want the engine's pass %d: %q", n, pass, n, l)
		}
		f := func(i int) float64 { v, _ := strconv.ParseFloat(m[i], 64); return v }
		if d := f(2) - f(3) - f(4) - f(5); d < -0.02 || d > 0.02 {
			t.Errorf("token %d: %.2f ms is not forward + pick + outside (%.2f + %.2f + %.2f)", n, f(2), f(3), f(4), f(5))
		}
		phase, tokens, rest := m[7], m[8], m[9]
		switch {
		case n == 1:
			if phase != "DISCOVERY" || tokens != "12" {
				t.Fatalf("token 1: %q, want the prompt's 12 tokens in DISCOVERY", l)
			}
		case n <= 3:
			if phase != "PROFILING" || tokens != "1" {
				t.Fatalf("token %d: %q, want PROFILING of one token", n, l)
			}
		default:
			if phase != "INFERENCE" || tokens != "1" || !strings.Contains(rest, "for T=1") {
				t.Fatalf("token %d: %q, want INFERENCE under the plan for one token", n, l)
			}
		}
		if strings.HasSuffix(rest, ", steady") {
			steady++
		} else if n >= 8 {
			t.Fatalf("token %d is not steady: %q", n, l)
		}
	}
	if n != newTokens {
		t.Fatalf("%d token lines, want %d:\n%s", n, newTokens, errOut)
	}
	sum := regexp.MustCompile(`token-trace: tokens steady: (\d+), median [0-9.]+ ms .*; others: (\d+), median`).FindStringSubmatch(errOut)
	if sum == nil {
		t.Fatalf("no summary line:\n%s", errOut)
	}
	if s, _ := strconv.Atoi(sum[1]); s != steady {
		t.Fatalf("summary counts %s steady tokens, the lines %d", sum[1], steady)
	}
	if o, _ := strconv.Atoi(sum[2]); o != newTokens-steady {
		t.Fatalf("summary counts %s other tokens, want %d", sum[2], newTokens-steady)
	}

	code, _, errOut = run(t, "bench", "--device", "cpu", "--device-memory", "64MiB", "--budgets", "0", "--context", "16", "--iters", "3",
		"--host-threads", "1")
	if code != 0 {
		t.Fatalf("bench: exit %d: %s", code, errOut)
	}
	// Two rows (0 and 0+host): the prefill, 2 warm-up + 2 engine passes
	// (+4 host measuring ones on the host row) skipped, 3 timed.
	if got, want := strings.Count(errOut, "token-trace: forward "), (1+4+3)+(1+8+3); got != want {
		t.Fatalf("bench printed %d forward lines, want %d:\n%s", got, want, errOut)
	}
	if got := strings.Count(errOut, "token-trace: forwards steady: "); got != 2 {
		t.Fatalf("bench printed %d summaries, want one a row:\n%s", got, errOut)
	}

	t.Setenv("FT_TOKEN_TRACE", "")
	code, _, errOut = run(t, "run-model", "--token-ids", "1,2", "--max-new-tokens", "2")
	if code != 0 || strings.Contains(errOut, "token-trace") {
		t.Fatalf("unset: exit %d, stderr %q: want no trace", code, errOut)
	}
	t.Setenv("FT_TOKEN_TRACE", "yes")
	code, _, errOut = run(t, "run-model", "--token-ids", "1,2", "--max-new-tokens", "2")
	if code != 2 || !strings.Contains(errOut, "FT_TOKEN_TRACE") {
		t.Fatalf("FT_TOKEN_TRACE=yes: exit %d, stderr %q: want a usage error naming it", code, errOut)
	}
}

// TestTokenTraceResident: without an offload manager, only the timed steps
// are steady: bench's context prefill and warm-up forwards and run-model's
// prompt forward are counted with the others and marked untimed.
func TestTokenTraceResident(t *testing.T) {
	t.Setenv("FT_TOKEN_TRACE", "1")
	summary := regexp.MustCompile(`token-trace: (\w+)s steady: (\d+), median [0-9.]+ ms .*; others: (\d+), median`)
	check := func(what, errOut string, lines, steady int) {
		t.Helper()
		if got := strings.Count(errOut, "token-trace: "+what+" "); got != lines {
			t.Fatalf("%d %s lines, want %d:\n%s", got, what, lines, errOut)
		}
		if got := strings.Count(errOut, "; untimed\n"); got != lines-steady {
			t.Fatalf("%d untimed lines, want %d:\n%s", got, lines-steady, errOut)
		}
		m := summary.FindStringSubmatch(errOut)
		if m == nil || m[1] != what {
			t.Fatalf("no %s summary:\n%s", what, errOut)
		}
		if s, o := m[2], m[3]; s != strconv.Itoa(steady) || o != strconv.Itoa(lines-steady) {
			t.Fatalf("summary counts %s steady and %s others, want %d and %d:\n%s", s, o, steady, lines-steady, errOut)
		}
	}
	code, _, errOut := run(t, "bench", "--device", "cpu", "--budgets", "resident", "--context", "8", "--warmup", "2", "--iters", "3")
	if code != 0 {
		t.Fatalf("bench: exit %d: %s", code, errOut)
	}
	check("forward", errOut, 1+2+3, 3) // the prefill and 2 warm-ups untimed

	code, _, errOut = run(t, "run-model", "--device", "cpu", "--token-ids", "5,6,7", "--ignore-eos", "--max-new-tokens", "5")
	if code != 0 {
		t.Fatalf("run-model: exit %d: %s", code, errOut)
	}
	check("token", errOut, 5, 4) // the prompt's forward untimed
}
