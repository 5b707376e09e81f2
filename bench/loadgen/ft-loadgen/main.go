// Command ft-loadgen puts a load on an OpenAI-compatible server (infer
// serve or another): concurrent streaming clients for a duration, then
// tokens/s, time-to-first-token and inter-token percentiles, and errors.
//
//	go run ./bench/loadgen/ft-loadgen --url http://127.0.0.1:8080 --clients 200 --duration 60s
//
// It exits 1 when a request failed (429s and --disconnect-every hang-ups
// are not failures).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/flextensor-go/flextensor/bench/loadgen"
)

func main() {
	var o loadgen.Options
	flag.StringVar(&o.URL, "url", "http://127.0.0.1:8080", "the server's base URL")
	flag.StringVar(&o.APIKey, "api-key", os.Getenv("OPENAI_API_KEY"), "Bearer key (default $OPENAI_API_KEY)")
	flag.StringVar(&o.Model, "model", "", "the requests' model field (default: left out)")
	flag.IntVar(&o.Clients, "clients", 16, "concurrent streaming clients")
	flag.DurationVar(&o.Duration, "duration", 30*time.Second, "how long clients start new requests")
	flag.IntVar(&o.Requests, "requests", 0, "requests per client (0: as many as the duration allows)")
	flag.IntVar(&o.PromptWords, "prompt-words", 16, "prompt length in words (about a token each)")
	flag.IntVar(&o.MaxTokens, "max-tokens", 32, "max_tokens of each request")
	flag.BoolVar(&o.Completions, "completions", false, "use /v1/completions instead of /v1/chat/completions")
	flag.Float64Var(&o.Temperature, "temperature", 0.7, "sampling temperature (each request seeded)")
	flag.IntVar(&o.DisconnectEvery, "disconnect-every", 0, "every n-th request hangs up after its first token (0: none)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "ft-loadgen: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(os.Stderr, "ft-loadgen: %d clients for %v against %s\n", o.Clients, o.Duration, o.URL)
	rep, err := loadgen.Run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ft-loadgen:", err)
		os.Exit(2)
	}
	rep.Format(os.Stdout)
	if rep.Failed > 0 {
		os.Exit(1)
	}
}
