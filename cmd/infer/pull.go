package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/flextensor-go/flextensor/loader/hub"
	"github.com/spf13/pflag"
)

func init() {
	register(command{name: "pull", summary: "download a checkpoint from the Hugging Face Hub into its cache", run: pullCmd,
		define: func(fs *pflag.FlagSet) { pullFlags(fs) }})
}

const pullUsage = `
infer pull downloads a model repo's checkpoint files (config, tokenizer,
*.safetensors) from the Hugging Face Hub into the Hugging Face cache
($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub), laid out
as huggingface_hub lays it out, so that --model ORG/NAME finds it and other
tools share it. Each file is checked against the Hub's size and sha256; an
interrupted pull resumes where it stopped. Files already cached are not
fetched again. The snapshot directory is printed on stdout.

HF_TOKEN (or the token file $HF_HOME/token) is sent for gated and private
models; HF_ENDPOINT replaces https://huggingface.co (a mirror).

Usage:
  infer pull ORG/NAME[@REVISION] [--revision R] [--all-files]

Examples:
  infer pull Qwen/Qwen3-8B
  infer pull meta-llama/Llama-3.1-8B-Instruct --revision main
  infer run-model --model Qwen/Qwen3-8B --prompt "Hello"
`

type pullOptions struct {
	revision string
	allFiles bool
}

func pullFlags(fs *pflag.FlagSet) *pullOptions {
	var o pullOptions
	fs.StringVar(&o.revision, "revision", "", "branch, tag or commit to pull (default main)")
	fs.BoolVar(&o.allFiles, "all-files", false, "fetch every file of the revision, not just the checkpoint's")
	return &o
}

func pullCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("pull", pullUsage, stderr)
	o := pullFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	switch fs.NArg() {
	case 0:
		return usagef("give the model to pull: infer pull ORG/NAME")
	case 1:
	default:
		return usagef("unexpected argument %q (one model per pull)", fs.Arg(1))
	}
	if err := applyDefaults(fs, "pull"); err != nil {
		return err
	}
	repo, rev, err := hub.ParseName(fs.Arg(0))
	if err != nil {
		return usageError{err}
	}
	if o.revision != "" {
		if fs.Arg(0) != repo && rev != o.revision {
			return usagef("revision given twice: %q in the name and --revision %q", rev, o.revision)
		}
		rev = o.revision
	}
	ctx := cmdCtx // cancelled by Ctrl-C or SIGTERM
	bar := newProgress(stderr)
	bar.bytes = true
	res, err := hub.Pull(ctx, repo, rev, hub.Options{
		AllFiles: o.allFiles,
		Progress: func(file string, done, total int64) {
			if total > 0 {
				bar.update(file, done, total)
			}
		},
	})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: partial downloads are kept; run the same pull to resume", errInterrupted)
		}
		return err
	}
	fmt.Fprintf(stderr, "pulled %s@%s (commit %s): %d files, %d downloaded (%s)\n",
		repo, rev, res.Commit, len(res.Files), res.Downloaded, pullSize(res.Bytes))
	fmt.Fprintln(stdout, res.Dir)
	return nil
}

// pullSize prints n in B, KiB, MiB or GiB.
func pullSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 2 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %s", v, []string{"KiB", "MiB", "GiB"}[i])
}
