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
	// drawing is the number of bars drawn and not finished: their line
	// must be ended before other output.
	drawing int
}

// progresses are the progress outputs of the running command (endProgress).
var progresses struct {
	sync.Mutex
	list []*progress
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, on: isTerminal(w) || os.Getenv("FT_FORCE_PROGRESS") == "1", bars: map[string]*progressbar.ProgressBar{}}
	progresses.Lock()
	progresses.list = append(progresses.list, p)
	progresses.Unlock()
	return p
}

// endProgress ends the line of every bar still drawn, so that what is
// printed next (an error, an interruption) starts on a line of its own.
func endProgress() {
	progresses.Lock()
	defer progresses.Unlock()
	for _, p := range progresses.list {
		p.mu.Lock()
		if p.drawing > 0 {
			io.WriteString(p.w, "\n")
			p.drawing = 0
		}
		p.mu.Unlock()
	}
	progresses.list = nil
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
		p.drawing++
	}
	if b.IsFinished() {
		return
	}
	_ = b.Set64(done)
	if done >= total {
		_ = b.Finish()
		_ = b.Exit()
		p.drawing--
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
