package serve

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus metrics, in a registry of its own
// (so that several servers in one process do not collide), served at
// /metrics with the Go runtime's and the process's.
type metrics struct {
	handler http.Handler

	tokens       prometheus.Counter
	tokensPerSec prometheus.Gauge
	ttft         prometheus.Histogram
	itl          prometheus.Histogram
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	inflight     prometheus.Gauge
	steps        prometheus.Counter
	stepTime     prometheus.Histogram
	offTransfer  prometheus.Counter
	offWait      prometheus.Counter
	offPasses    prometheus.Counter

	tokCount atomic.Int64 // tokens since the last rate window
	rateMu   sync.Mutex
	rateAt   time.Time
}

// latencyBuckets span 1 ms to about 65 s.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 17)

func newMetrics(s *Server) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{rateAt: time.Now()}
	f := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "flextensor", Name: name, Help: help}
	}
	gaugeFunc := func(name, help string, fn func() int) prometheus.GaugeFunc {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts(f(name, help)), func() float64 { return float64(fn()) })
	}
	counterFunc := func(name, help string, fn func() int64) prometheus.CounterFunc {
		return prometheus.NewCounterFunc(prometheus.CounterOpts(f(name, help)), func() float64 { return float64(fn()) })
	}
	m.tokens = prometheus.NewCounter(prometheus.CounterOpts(f("generated_tokens_total", "Tokens generated, all requests.")))
	m.tokensPerSec = prometheus.NewGauge(prometheus.GaugeOpts(f("generation_tokens_per_second", "Tokens generated per second over the last window of about a second.")))
	m.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "flextensor", Name: "time_to_first_token_seconds",
		Help: "From a request's arrival to its first generated token.", Buckets: latencyBuckets})
	m.itl = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "flextensor", Name: "inter_token_latency_seconds",
		Help: "Between a request's successive generated tokens.", Buckets: latencyBuckets})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts(f("http_requests_total", "HTTP requests by path and status code.")), []string{"path", "code"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "flextensor", Name: "http_request_duration_seconds",
		Help: "HTTP request durations by path.", Buckets: latencyBuckets}, []string{"path"})
	m.inflight = prometheus.NewGauge(prometheus.GaugeOpts(f("requests_in_flight", "Generation requests being served (running or waiting).")))
	m.steps = prometheus.NewCounter(prometheus.CounterOpts(f("scheduler_steps_total", "Scheduler steps (batched forwards).")))
	m.stepTime = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "flextensor", Name: "scheduler_step_seconds",
		Help: "Duration of a scheduler step (one batched forward and sampling).", Buckets: latencyBuckets})
	m.offTransfer = prometheus.NewCounter(prometheus.CounterOpts(f("offload_transfer_seconds_total", "Offload: host-to-device weight copy time, summed over measured passes.")))
	m.offWait = prometheus.NewCounter(prometheus.CounterOpts(f("offload_wait_seconds_total", "Offload: time compute stalled waiting for weight copies, summed over measured passes.")))
	m.offPasses = prometheus.NewCounter(prometheus.CounterOpts(f("offload_passes_total", "Offload: forward passes measured for the transfer and wait times.")))
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		gaugeFunc("queue_depth", "Requests waiting for admission (KV blocks or a sequence slot).", s.sched.Waiting),
		gaugeFunc("running_sequences", "Requests in the running batch.", s.sched.Running),
		gaugeFunc("kv_blocks_in_use", "Paged KV cache blocks held by sequences.", s.KVBlocksInUse),
		gaugeFunc("kv_blocks_total", "Paged KV cache blocks in all.", s.cache.TotalBlocks),
		counterFunc("scheduler_preemptions_total", "Running requests preempted (requeued: swapped out to host memory, or their KV blocks freed to prefill again) because the KV cache ran out of blocks.", s.sched.Preemptions),
		counterFunc("scheduler_graph_steps_total", "Scheduler steps of a request decoding alone that replayed a captured graph instead of a batched forward (unless FT_SCHED_GRAPH=0).", s.sched.GraphSteps),
		counterFunc("scheduler_solo_failures_total", "Requests decoding alone whose entry into captured-graph steps failed (too little device memory for the contiguous KV copy, a failed capture); they ran batched to their end.", s.sched.SoloFailures),
		counterFunc("scheduler_swaps_total", "Preemptions that swapped the request's KV blocks out to host memory (--swap-space) instead of recomputing them; preemptions minus swaps were recomputed.", s.sched.Swaps),
		counterFunc("scheduler_swap_failures_total", "Swap-outs that failed for another reason than a full swap area (host memory not taken, a failed copy); those preemptions were recomputed.", s.sched.SwapFailures),
		m.tokens, m.tokensPerSec, m.ttft, m.itl, m.requests, m.duration, m.inflight, m.steps, m.stepTime,
	)
	if s.opt.OffloadStats != nil {
		// Only where offload timing is measured (infer serve
		// --offload-timing on an offloaded model); elsewhere they would
		// read 0 as if measured.
		reg.MustRegister(m.offTransfer, m.offWait, m.offPasses)
	}
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return m
}

// token records a generated token at now; prev is the request's previous
// token's time (zero for its first), start its arrival.
func (m *metrics) token(now, prev, start time.Time) {
	if prev.IsZero() {
		m.ttft.Observe(now.Sub(start).Seconds())
	} else {
		m.itl.Observe(now.Sub(prev).Seconds())
	}
	m.tokens.Inc()
	m.tokCount.Add(1)
}

// stepDone records a scheduler step and refreshes the tokens/s window.
func (m *metrics) stepDone(d time.Duration) {
	m.steps.Inc()
	m.stepTime.Observe(d.Seconds())
	m.rateMu.Lock()
	defer m.rateMu.Unlock()
	if el := time.Since(m.rateAt); el >= time.Second {
		m.tokensPerSec.Set(float64(m.tokCount.Swap(0)) / el.Seconds())
		m.rateAt = time.Now()
	}
}

// idle zeroes the tokens/s gauge while no request runs.
func (m *metrics) idle() {
	m.rateMu.Lock()
	defer m.rateMu.Unlock()
	m.tokensPerSec.Set(0)
	m.tokCount.Store(0)
	m.rateAt = time.Now()
}

func (m *metrics) request(path string, code int, d time.Duration) {
	m.requests.WithLabelValues(path, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(path).Observe(d.Seconds())
}

func (m *metrics) requestStarted() { m.inflight.Inc() }
func (m *metrics) requestEnded()   { m.inflight.Dec() }

func (m *metrics) offload(transfer, wait time.Duration, passes int) {
	m.offTransfer.Add(transfer.Seconds())
	m.offWait.Add(wait.Seconds())
	m.offPasses.Add(float64(passes))
}
