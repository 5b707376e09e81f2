package main

import (
	"strings"
	"testing"
)

// The flags that package session rejects are usage errors (exit 2) named
// after the flags.
func TestSessionFlagErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run-model", "--token-ids", "1", "--strict"}, "--strict applies with --profile only"},
		{[]string{"run-model", "--token-ids", "1", "--transfer-blocks", "-1"}, "--transfer-blocks -1"},
		{[]string{"run-model", "--token-ids", "1", "--device", "cuda:0", "--device-memory", "1MiB"}, "--device-memory applies to --device cpu only"},
		{[]string{"bench", "--gpu-budget", "1MiB"}, "--gpu-budget and --profile do not apply"},
		{[]string{"bench", "--device", "tpu"}, `--device "tpu"`},
	}
	for _, c := range cases {
		code, _, errOut := run(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 mentioning %q", c.args, code, errOut, c.want)
		}
	}
}
