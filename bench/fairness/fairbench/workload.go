package fairbench

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// Class is the service class of a request, as sent in x-request-class.
type Class int

const (
	// Interactive requests are latency sensitive.
	Interactive Class = 0
	// Batch requests are throughput oriented.
	Batch Class = 1
)

// String returns "interactive" or "batch".
func (c Class) String() string {
	if c == Batch {
		return "batch"
	}
	return "interactive"
}

// Request is one request of the simulation. The generator fills the first
// block; the runner fills the rest as the request goes through the gateway
// and the engine.
type Request struct {
	// ID numbers requests in generation order (unique in a run).
	ID int64
	// Team and Class are the request's headers.
	Team  string
	Class Class
	// Stream is the index of the workload that generated the request.
	Stream int
	// Client is the closed-loop client that sent it (-1 for open loops).
	Client int
	// User is the user the request names in its x-user header (the
	// workload's "user"; "" sends none): a user within its team.
	User string
	// Prompt and Output are the prompt and output lengths in tokens:
	// Output is what the model will generate (drawn from the workload's
	// distribution, at most MaxTokens), which no gateway knows in advance.
	Prompt, Output int
	// MaxTokens is the max_tokens the client sends, the workload's cap
	// (0: none sent; the engine then allows max_model_len − prompt).
	// Gateways see this, never Output.
	MaxTokens int
	// Arrival is when the request reached the gateway.
	Arrival time.Duration

	// Submitted is when the gateway submitted it to an engine (-1 before).
	Submitted time.Duration
	// FirstToken is when its first output token was produced (-1 before).
	FirstToken time.Duration
	// Finished is when its last token was produced (-1 before).
	Finished time.Duration
	// Priority is the vLLM priority it was submitted with.
	Priority int
	// Borrowing reports whether the plugin judged it above its team's
	// share (plugin gateways only).
	Borrowing bool
	// Replica is the engine replica it ran on.
	Replica int
	// Pool is the pool the gateway routed it to in a spill scenario (the
	// plugin's x-fairshare-pool); "" sends it to its team's pool.
	Pool string
	// SpilledFrom is the pool it was for when the plugin moved it to Pool
	// ("" otherwise).
	SpilledFrom string
	// Preemptions counts how often the engine preempted it.
	Preemptions int
	// HashIDs are the prompt's prefix block ids of a trace row (Mooncake
	// hash_ids, jsonl blocks; nil otherwise), given to the engine for its
	// prefix cache.
	HashIDs []uint64
	// CachedTokens is the prompt tokens the engine found in its prefix
	// cache (vLLM's num_cached_tokens; 0 without prefix caching).
	CachedTokens int
}

// TTFT returns the time from arrival at the gateway to the first token.
func (r *Request) TTFT() time.Duration { return r.FirstToken - r.Arrival }

// E2E returns the time from arrival at the gateway to the last token.
func (r *Request) E2E() time.Duration { return r.Finished - r.Arrival }

// Service returns the request's cost in VTC service units: input tokens
// weigh 1 and output tokens 2.
func (r *Request) Service() float64 { return ServiceUnits(r.Prompt, r.Output) }

// Input and output weights of VTC's service measure (Sheng et al., OSDI'24;
// the artifact's input_price=1, output_price=2).
const (
	InputWeight  = 1.0
	OutputWeight = 2.0
)

// ServiceUnits returns in×InputWeight + out×OutputWeight.
func ServiceUnits(in, out int) float64 {
	return float64(in)*InputWeight + float64(out)*OutputWeight
}

// streamRand returns the PCG stream of one (seed, label, index) triple: every
// workload and every closed-loop user has its own stream, so what one draws
// never shifts another's sequence (the same seed gives the same requests
// under every policy).
func streamRand(seed uint64, label string, idx int) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(label))
	return rand.New(rand.NewPCG(seed, h.Sum64()^uint64(idx)*0x9e3779b97f4a7c15))
}

// Sample draws one length from the distribution with r.
func (d LengthDist) Sample(r *rand.Rand) int {
	var x float64
	switch d.Dist {
	case DistUniform:
		return d.Min + r.IntN(d.Max-d.Min+1)
	case DistLogNormal:
		s2 := math.Log(1 + d.CV*d.CV)
		mu := math.Log(d.Mean) - s2/2
		x = math.Exp(mu + math.Sqrt(s2)*r.NormFloat64())
	case DistExp:
		x = d.Mean * r.ExpFloat64()
	default:
		x = d.Mean
	}
	n := int(math.Round(x))
	lo := d.Min
	if lo < 1 {
		lo = 1
	}
	if n < lo {
		n = lo
	}
	if d.Max > 0 && n > d.Max {
		n = d.Max
	}
	return n
}

// drawRequest returns a request of workload w with its random fields
// drawn from r: class, prompt and real output length (cut at the
// workload's max_tokens, as the engine would), and max_tokens.
func drawRequest(w *WorkloadSpec, r *rand.Rand) *Request {
	class := Batch
	if r.Float64() < w.Interactive {
		class = Interactive
	}
	q := &Request{Team: w.Team, User: w.User, Class: class, Prompt: w.Prompt.Sample(r), Output: w.Output.Sample(r), MaxTokens: w.MaxTokens}
	if q.MaxTokens > 0 && q.Output > q.MaxTokens {
		q.Output = q.MaxTokens
	}
	return q
}

// OpenLoopArrivals returns the requests of the open-loop and burst
// generators of s (closed loops are generated as the run goes), sorted by
// arrival time then stream. IDs are not set. The result depends only on the
// scenario and the seed.
func OpenLoopArrivals(s *Scenario, seed uint64) []*Request {
	var out []*Request
	end := Sec(s.Duration)
	for i := range s.Workloads {
		w := &s.Workloads[i]
		stop := end
		if w.Stop > 0 && Sec(w.Stop) < stop {
			stop = Sec(w.Stop)
		}
		r := streamRand(seed, "workload/"+w.Team, w.randIndex(i))
		switch w.Kind {
		case KindPoisson:
			t := Sec(w.Start)
			for {
				t += time.Duration(r.ExpFloat64() / w.Rate * float64(time.Second))
				if t >= stop {
					break
				}
				q := drawRequest(w, r)
				q.Stream, q.Client, q.Arrival = i, -1, t
				out = append(out, q)
			}
		case KindTrace:
			out = traceArrivals(out, s, i, seed, stop)
		case KindBurst:
			for k := 0; k < w.Count; k++ {
				q := drawRequest(w, r)
				q.Stream, q.Client, q.Arrival = i, -1, Sec(w.Start)
				out = append(out, q)
			}
		}
	}
	sort.SliceStable(out, func(a, b int) bool {
		if out[a].Arrival != out[b].Arrival {
			return out[a].Arrival < out[b].Arrival
		}
		return out[a].Stream < out[b].Stream
	})
	return out
}

// closedUser is one user of a closed-loop workload.
type closedUser struct {
	w      *WorkloadSpec
	stream int
	user   int
	rand   *rand.Rand
	stop   time.Duration
}

// next returns the user's next request arriving at t, or nil past the stop.
func (u *closedUser) next(t time.Duration) *Request {
	if t >= u.stop {
		return nil
	}
	q := drawRequest(u.w, u.rand)
	q.Stream, q.Client, q.Arrival = u.stream, u.user, t
	return q
}

// closedUsers returns the users of the closed-loop workloads of s.
func closedUsers(s *Scenario, seed uint64) []*closedUser {
	var out []*closedUser
	end := Sec(s.Duration)
	for i := range s.Workloads {
		w := &s.Workloads[i]
		if w.Kind != KindClosed {
			continue
		}
		stop := end
		if w.Stop > 0 && Sec(w.Stop) < stop {
			stop = Sec(w.Stop)
		}
		for k := 0; k < w.Concurrency; k++ {
			out = append(out, &closedUser{w: w, stream: i, user: k, rand: streamRand(seed, "closed/"+w.Team, w.randIndex(i)*100003+k), stop: stop})
		}
	}
	return out
}
