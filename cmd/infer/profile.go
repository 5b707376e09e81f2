package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/flextensor-go/flextensor/offload"
	"github.com/spf13/pflag"
)

func init() {
	register(command{name: "profile", summary: "profile a model under a GPU budget and save the plan for fast restarts", run: profileCmd,
		define: func(fs *pflag.FlagSet) { profileFlags(fs) }})
}

const profileUsage = `
infer profile offloads a model under a device memory budget, runs the
discovery and profiling passes (a prefill of --context tokens, then decode
steps), and saves profile.json to --out. A later
  infer run-model --model DIR --profile PROFILE_DIR ...
skips discovery and profiling and reads each weight once, straight into device
or pinned memory.

Usage:
  infer profile --model DIR --gpu-budget X --out PROFILE_DIR [flags]

Examples:
  infer profile --model /tmp/llama3-8b --device cuda:0 --gpu-budget 8GiB --out /tmp/llama3-8b-8g
  infer profile --device cpu --device-memory 2MiB --gpu-budget 0.6 --out /tmp/tiny-profile
`

type profileOptions struct {
	d       deviceFlags
	out     string
	context int
}

func profileFlags(fs *pflag.FlagSet) *profileOptions {
	var o profileOptions
	o.d.register(fs)
	fs.StringVar(&o.out, "out", "", "profile directory to write (required)")
	fs.IntVar(&o.context, "context", 64, "prompt tokens of the profiling run")
	return &o
}

func profileCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("profile", profileUsage, stderr)
	o := profileFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	d, out, context := o.d, &o.out, &o.context
	d.progress = newProgress(stderr)
	if *out == "" {
		return usagef("--out is required")
	}
	if d.gpuBudget == "" {
		return usagef("--gpu-budget is required (the profile's plan is made for it)")
	}
	if *context <= 0 {
		return usagef("--context %d must be positive", *context)
	}
	if d.kvCache != "" {
		return usagef("--kv-cache applies to batched runs (run-model --batch-file, bench --batch)")
	}
	if err := d.checkOffloadFlags(); err != nil {
		return err
	}
	if strings.Contains(d.device, ",") || d.device == "cuda:all" {
		return usagef("--device %s: a profile holds one device's plan; profile one device (a sharded model plans each device when it opens)", d.device)
	}
	start := time.Now()
	if !d.progress.on {
		fmt.Fprintf(stderr, "profile: loading %s on %s under --gpu-budget %s\n", modelName(d.model), d.device, d.gpuBudget)
	}
	sess, err := openSession(d)
	if err != nil {
		return err
	}
	defer sess.Close()
	if need, ctxLen := *context+4, sess.Model.Cfg.MaxPositionEmbeddings; need > ctxLen {
		return usagef("--context %d: the profiling run needs %d positions (the prompt and 4 decode steps), more than the model's context of %d (max_position_embeddings); give --context %d or less",
			*context, need, ctxLen, ctxLen-4)
	}
	if !d.progress.on {
		fmt.Fprintf(stderr, "profile: discovery and profiling passes (a prefill of %d tokens, then decode steps)\n", *context)
	}
	// Discovery (the prefill) and two profiling passes (decode steps) lead
	// to INFERENCE; one more step checks the plan runs.
	if _, err := measureForwards(sess.Model, sess.Backend, "decode", 0, *context, 3, 1, 1, nil, nil); err != nil {
		return err
	}
	if err := offload.SaveProfile(*out, sess.Manager); err != nil {
		return err
	}
	plan, err := offload.GetOffloadManager(sess.Manager).Plan()
	if err != nil {
		return err
	}
	res := 0
	for _, r := range plan.Resident {
		if r {
			res++
		}
	}
	packed := ""
	if d.streamCodec == "exp4" {
		packed = ", streamed layers exp4-packed"
	}
	fmt.Fprintf(stdout, "wrote %s/%s: %d of %d units resident, %d transfer blocks%s, predicted forward %.3f ms (%v)\n",
		*out, offload.ProfileFileName, res, len(plan.Resident), plan.Slots, packed, plan.PredictedSec*1e3, time.Since(start).Round(time.Millisecond))
	return nil
}

// modelName is --model for messages ("" is the bundled model).
func modelName(model string) string {
	if model == "" {
		return bundledName
	}
	return model
}
