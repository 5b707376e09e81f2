package main

import (
	"io"
	"os"
	"sync"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// isTerminal reports whether w is a terminal (progress bars go only there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress draws one bar per stage on w ("weights" in bytes, "profiling" in
// passes) when w is a terminal, and nothing otherwise.
type progress struct {
	mu   sync.Mutex
	w    io.Writer
	on   bool
	bars map[string]*progressbar.ProgressBar
	// bytes shows every stage's counts as bytes (not only "weights").
	bytes bool
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, on: isTerminal(w) || os.Getenv("FT_FORCE_PROGRESS") == "1", bars: map[string]*progressbar.ProgressBar{}}
}

// update is an offload.Config.Progress function.
func (p *progress) update(stage string, done, total int64) {
	if p == nil || !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.bars[stage]
	if !ok {
		opts := []progressbar.Option{
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(stageLabel(stage)),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowCount(),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionThrottle(0),
		}
		if stage == "weights" || p.bytes {
			opts = append(opts, progressbar.OptionShowBytes(true))
		}
		b = progressbar.NewOptions64(total, opts...)
		p.bars[stage] = b
	}
	_ = b.Set64(done)
	if done >= total {
		_ = b.Finish()
		_ = b.Exit()
	}
}

func stageLabel(stage string) string {
	switch stage {
	case "weights":
		return "placing weights"
	case "profiling":
		return "profiling passes"
	}
	return stage
}
