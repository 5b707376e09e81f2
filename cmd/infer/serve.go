package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/flextensor-go/flextensor/kernels"
	"github.com/flextensor-go/flextensor/models/chat"
	"github.com/flextensor-go/flextensor/models/decoder"
	"github.com/flextensor-go/flextensor/models/generate"
	"github.com/flextensor-go/flextensor/models/kvcache"
	"github.com/flextensor-go/flextensor/models/tokenizer"
	"github.com/flextensor-go/flextensor/offload"
	"github.com/flextensor-go/flextensor/runtime"
	"github.com/flextensor-go/flextensor/serve"
	"github.com/spf13/pflag"
)

func init() {
	register(command{name: "serve", summary: "serve a model over an OpenAI-compatible HTTP API, batching requests", run: serveCmd,
		define: func(fs *pflag.FlagSet) { serveFlags(fs) }})
}

const serveUsage = `
infer serve runs an OpenAI-compatible HTTP server: POST /v1/chat/completions
and /v1/completions (streamed as server-sent events with "stream": true),
GET /v1/models, /health, Prometheus /metrics and a chat page at /.
Concurrent requests are batched: they join the running batch between steps
and share each pass over the weights, which is what lets an offloaded model
(--gpu-budget) serve many users. When the KV cache (--kv-cache) is full, new
requests wait in a queue of --queue; beyond it the server answers 429 with
Retry-After. SIGTERM or Ctrl-C stops accepting connections and lets
in-flight requests finish (up to --shutdown-timeout).

Chat requests are rendered with the checkpoint's chat template
(tokenizer_config.json); a checkpoint without one uses the Llama 3 format
when its tokenizer has the Llama 3 chat tokens, as run-model --chat does.
Otherwise (a base model; the bundled tiny model) there is no chat format:
/v1/chat/completions answers 400 (no_chat_template) and /v1/completions
takes plain prompts.

Usage:
  infer serve [--model DIR|ORG/NAME] [--host H] [--port P] [flags]

Examples:
  infer serve --port 8080
  infer serve --model Qwen/Qwen3-8B --device cuda:0 --gpu-budget 6GiB --kv-cache 4GiB --max-concurrency 64
  FT_API_KEY=secret infer serve --host 0.0.0.0
  curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16}'
`

type serveOptions struct {
	dev               deviceFlags
	host              string
	port              int
	apiKey            string
	modelName         string
	maxConcurrency    int
	queue             int
	maxBatchTokens    int
	maxContext        int
	defaultMaxTokens  int
	maxRequestBytes   int64
	readTimeout       time.Duration
	readHeaderTimeout time.Duration
	idleTimeout       time.Duration
	shutdownTimeout   time.Duration
	logFormat         string
	swapSpace         string // --swap-space: generate.Options.SwapBytes ("" the default)
}

func serveFlags(fs *pflag.FlagSet) *serveOptions {
	var o serveOptions
	fs.StringVar(&o.host, "host", "127.0.0.1", "address to listen on (0.0.0.0: every interface)")
	fs.IntVar(&o.port, "port", 8080, "TCP port to listen on (0: any free port, printed at start)")
	fs.StringVar(&o.apiKey, "api-key", "", "require \"Authorization: Bearer KEY\" on /v1/ requests (better given as FT_API_KEY)")
	fs.StringVar(&o.modelName, "served-model-name", "", "the model id the API reports and accepts (default: the checkpoint directory's name)")
	fs.IntVar(&o.maxConcurrency, "max-concurrency", 64, "most requests generating at once (in one batch); more wait in the queue")
	fs.IntVar(&o.queue, "queue", 256, "most requests waiting for a place in the batch; beyond it 429 Too Many Requests")
	fs.IntVar(&o.maxBatchTokens, "max-batch-tokens", 512, "most tokens in one forward (long prompts are prefilled in chunks between decode steps)")
	fs.IntVar(&o.maxContext, "max-context", 0, "most positions a request may reach, prompt and completion (default: the model's max_position_embeddings)")
	fs.IntVar(&o.defaultMaxTokens, "default-max-tokens", serve.DefaultMaxTokens, "completion limit of a request that gives no max_tokens (capped by the context and by what the KV cache holds for one request)")
	fs.Int64Var(&o.maxRequestBytes, "max-request-bytes", 4<<20, "largest request body accepted (413 beyond)")
	fs.DurationVar(&o.readTimeout, "read-timeout", 60*time.Second, "time to read a whole request")
	fs.DurationVar(&o.readHeaderTimeout, "read-header-timeout", 10*time.Second, "time to read a request's headers")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 120*time.Second, "keep-alive connections idle this long are closed")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "at SIGTERM, how long in-flight requests may take to finish before they are cancelled")
	fs.StringVar(&o.logFormat, "log-format", "json", "request log on stderr: json, text or off")
	fs.StringVar(&o.swapSpace, "swap-space", "", swapSpaceHelp)
	o.dev.register(fs)
	return &o
}

func serveCmd(args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("serve", serveUsage, stderr)
	o := serveFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	o.dev.progress = newProgress(stderr)
	switch {
	case o.port < 0 || o.port > 65535:
		return usagef("--port %d is not a TCP port (0-65535)", o.port)
	case o.maxConcurrency <= 0:
		return usagef("--max-concurrency %d must be positive", o.maxConcurrency)
	case o.queue <= 0:
		return usagef("--queue %d must be positive", o.queue)
	case o.maxBatchTokens <= 0:
		return usagef("--max-batch-tokens %d must be positive", o.maxBatchTokens)
	case o.maxContext < 0:
		return usagef("--max-context %d is negative", o.maxContext)
	case o.defaultMaxTokens <= 0:
		return usagef("--default-max-tokens %d must be positive", o.defaultMaxTokens)
	case o.maxRequestBytes <= 0:
		return usagef("--max-request-bytes %d must be positive", o.maxRequestBytes)
	case o.readTimeout <= 0 || o.readHeaderTimeout <= 0 || o.idleTimeout <= 0 || o.shutdownTimeout <= 0:
		return usagef("--read-timeout, --read-header-timeout, --idle-timeout and --shutdown-timeout must be positive")
	}
	if _, _, err := parseSwapSpace(o.swapSpace); err != nil {
		return err
	}
	var logger *slog.Logger
	switch o.logFormat {
	case "json":
		logger = slog.New(slog.NewJSONHandler(stderr, nil))
	case "text":
		logger = slog.New(slog.NewTextHandler(stderr, nil))
	case "off":
	default:
		return usagef("--log-format %q: want json, text or off", o.logFormat)
	}
	if err := o.dev.checkOffloadFlags(); err != nil {
		return err
	}
	// Bind before loading, so that a taken port fails at once.
	ln, err := net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.port)))
	if err != nil {
		return usagef("--host %s --port %d: %v", o.host, o.port, err)
	}
	defer ln.Close()
	sess, err := openSession(o.dev)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := sess.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	m, b := sess.Model, sess.Backend
	if trained := m.Cfg.MaxPositionEmbeddings; trained > 0 && o.maxContext > trained {
		return usagef("--max-context %d exceeds the model's trained context (max_position_embeddings %d in %s): positions past it give wrong answers",
			o.maxContext, trained, sess.describe("config.json"))
	}
	tok, err := loadServeTokenizer(sess)
	if err != nil {
		return err
	}
	tmpl, stops, note, err := serveChatTemplate(sess.Dir, tok)
	if err != nil {
		return sess.rewriteBundled(err)
	}
	maxContext := o.maxContext
	if maxContext == 0 {
		maxContext = m.Cfg.MaxPositionEmbeddings
	}
	blocks, err := serveKVBlocks(o.dev.kvCache, m, b, o.maxConcurrency, maxContext)
	if err != nil {
		return err
	}
	cache, err := m.NewPagedCache(b, blocks, 0)
	if err != nil {
		return fmt.Errorf("--kv-cache: %w", err)
	}
	defer cache.Close()
	if sess.Manager != "" {
		// The offload plan is made after profiling, on the first requests:
		// a budget that the KV cache left no room for fails here instead.
		if err := offload.GetOffloadManager(sess.Manager).CheckDeviceFit(); err != nil {
			return fmt.Errorf("the offload budget and the KV cache (%d blocks, %s) do not fit the device together: %w; give a smaller --gpu-budget or --kv-cache",
				blocks, runtime.FormatBytes(cache.Bytes()), err)
		}
	}
	name := o.modelName
	if name == "" {
		name = filepath.Base(sess.Dir)
		if sess.bundled {
			name = "tiny-llama"
		} else if o.dev.model != "" && !isDir(o.dev.model) {
			name = o.dev.model // ORG/NAME from the Hugging Face cache
		}
	}
	opt := serve.Options{
		ModelName: name, Tokenizer: tok, Template: tmpl, StopTokens: stops, APIKey: o.apiKey,
		DefaultMaxTokens: o.defaultMaxTokens, MaxRequestBytes: o.maxRequestBytes, Logger: logger, ReadTimeout: o.readTimeout,
		ReadHeaderTimeout: o.readHeaderTimeout, IdleTimeout: o.idleTimeout, DrainTimeout: o.shutdownTimeout,
	}
	if sess.Manager != "" && o.dev.offloadTiming {
		opt.OffloadStats = offloadStats(sess.Manager)
	}
	if sess.Manager != "" {
		opt.Failed = offload.GetOffloadManager(sess.Manager).Failed
	}
	swap, err := swapSpaceBytes(o.swapSpace, b.Device(), cache.Bytes())
	if err != nil {
		return err
	}
	srv, err := serve.New(m, b, cache, generate.Options{MaxSeqs: o.maxConcurrency, MaxQueue: o.queue,
		MaxBatchTokens: o.maxBatchTokens, MaxContext: maxContext, SwapBytes: swap}, opt)
	if err != nil {
		return err
	}
	defer srv.Close() // after Serve, before the cache closes
	// A drain may take up to --shutdown-timeout after SIGTERM; the signal
	// watcher's hard stop waits that long and a little more.
	defer func(g time.Duration) { interruptGrace = g }(interruptGrace)
	interruptGrace = o.shutdownTimeout + 5*time.Second
	if note != "" {
		fmt.Fprintf(stderr, "infer serve: %s\n", note)
	}
	err = srv.Serve(cmdCtx, ln, func(addr net.Addr) {
		fmt.Fprintf(stderr, "infer serve: %s on %s, KV cache %d blocks (%s), swap space %s, up to %d requests at once; listening on http://%s\n",
			name, sess.Device.Name(), blocks, runtime.FormatBytes(cache.Bytes()), runtime.FormatBytes(swap), o.maxConcurrency, addr)
	})
	if errors.Is(err, serve.ErrDrainTimeout) {
		// The stop was asked for, and cancelling what outlasts
		// --shutdown-timeout is what that flag promises: not a failure
		// (exit 0, so that a supervisor does not take it for a crash).
		fmt.Fprintf(stderr, "infer serve: stopped; %v (--shutdown-timeout)\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(stderr, "infer serve: stopped; in-flight requests drained")
	return nil
}

// loadServeTokenizer loads the model's tokenizer.json, which the server
// needs for text prompts, chat and its answers' text.
func loadServeTokenizer(sess *session) (*tokenizer.Tokenizer, error) {
	path := filepath.Join(sess.Dir, "tokenizer.json")
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no tokenizer at %s: infer serve needs the checkpoint's tokenizer.json (for text prompts, chat and the answers' text)", sess.describe("tokenizer.json"))
	}
	tok, err := loadTokenizer(path)
	if err != nil {
		return nil, sess.rewriteBundled(err)
	}
	return tok, nil
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// serveKVBlocks sizes the server's KV cache: --kv-cache, else a quarter of
// a device with a memory limit, else room for maxSeqs contexts of
// maxContext positions, at most a quarter of a GPU's memory (2 GiB on a
// device that does not say its size).
func serveKVBlocks(flag string, m *decoder.Model, b kernels.Backend, maxSeqs, maxContext int) (int, error) {
	if flag != "" {
		return kvCacheBlocksFromFlag(flag, m, b)
	}
	cfg := m.PagedConfig(0, 0)
	if limit := b.Device().Memory().Limit; limit > 0 {
		return max(cfg.BlocksForBudget(limit/4, b.ActDType()), 1), nil
	}
	per := (maxContext + kvcache.DefaultBlockSize - 1) / kvcache.DefaultBlockSize
	budget := int64(2 << 30) // a device that does not say its size
	if capacity := offload.DeviceCapacity(b.Device()); capacity > 0 {
		budget = capacity / 4 // a GPU: up to a quarter of it
	}
	return max(min(maxSeqs*per, cfg.BlocksForBudget(budget, b.ActDType())), 1), nil
}

// serveChatTemplate is the chat template the server renders messages
// with, the ids of its end tokens, and a note when it is not the
// checkpoint's own: the checkpoint's template, else the Llama 3 format for
// a Llama 3 instruct tokenizer, else none (nil), as run-model --chat and
// tokenize --messages decide, so that /v1/chat/completions refuses a
// checkpoint the CLI refuses rather than render a format the model was not
// trained on.
func serveChatTemplate(dir string, tok *tokenizer.Tokenizer) (*chat.Template, []int32, string, error) {
	tmpl, err := chatTemplate(dir, tok)
	note := ""
	if err != nil {
		if !errors.As(err, new(usageError)) {
			return nil, nil, "", err
		}
		return nil, nil, "the checkpoint has no chat_template and its tokenizer lacks the Llama 3 chat tokens, so there is no chat format: /v1/chat/completions answers 400; use /v1/completions with plain prompts", nil
	} else if _, ferr := os.Stat(filepath.Join(dir, "tokenizer_config.json")); errors.Is(ferr, fs.ErrNotExist) {
		note = "the checkpoint has no tokenizer_config.json; chat messages use the built-in Llama 3 format"
	}
	var stops []int32
	for _, end := range tmpl.EndTexts() {
		if id, ok := tok.TokenID(end); ok {
			stops = append(stops, int32(id))
		}
	}
	return tmpl, stops, note, nil
}

// offloadStats reads the offload manager's measured transfer and wait
// times since the last call (the scheduling goroutine calls it between
// forwards) and starts a new window.
func offloadStats(manager string) func() (time.Duration, time.Duration, int) {
	return func() (time.Duration, time.Duration, int) {
		rep, err := offload.CollectOffloadTiming(manager)
		if err != nil || rep == nil {
			return 0, 0, 0
		}
		offload.ResetOffloadTiming(manager)
		ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
		return ms(rep.TotalTransferSum()), ms(rep.TotalWaitSum()), rep.NumPasses()
	}
}
