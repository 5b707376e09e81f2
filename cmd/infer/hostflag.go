package main

import (
	"fmt"
	"strconv"

	ftsession "github.com/flextensor-go/flextensor/session"
	"github.com/spf13/pflag"
)

// hostThreads is --host-threads: unset (no host placement) or a worker
// count (0 = every core). It is a flag value of its own so that "given as
// 0" and "not given" differ, also when set through FT_HOST_THREADS or a
// config file.
type hostThreads struct {
	set bool
	n   int
}

func (h *hostThreads) String() string {
	if !h.set {
		return ""
	}
	return strconv.Itoa(h.n)
}

// Set parses a count; a negative one is refused naming the flag.
func (h *hostThreads) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("--host-threads %q: want a number of threads (0 = every core)", v)
	}
	if n < 0 {
		return fmt.Errorf("--host-threads %d is negative: want a number of threads (0 = every core)", n)
	}
	h.set, h.n = true, n
	return nil
}

func (h *hostThreads) Type() string { return "int" }

func registerHostThreads(fs *pflag.FlagSet, h *hostThreads) {
	fs.Var(h, "host-threads", "offload: let the planner compute layers on the host CPU with this many threads (0 = every core) while others stream to the GPU (single-sequence forwards; bench --batch shows the plan batches get, with no layer on the host; not with several devices)")
}

// applyHost sets the session options' host placement from --host-threads.
func (h hostThreads) apply(opts *ftsession.Options) {
	opts.HostPlacement, opts.HostThreads = h.set, h.n
}
