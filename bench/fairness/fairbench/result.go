package fairbench

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Result is what one run of one scenario under one gateway measured. Rates
// and shares are over the measured window [Warmup, Duration); latencies are
// over the requests that arrived in it.
type Result struct {
	// Scenario, Policy and Mode name the run (Mode is the engine
	// behaviour: ModeVLLM or Mode45561).
	Scenario, Policy, Mode string
	// Window is the measured part of the run.
	From, To time.Duration
	// Teams holds one entry per team, in configuration order.
	Teams []TeamResult
	// Pool holds the pool-wide measures.
	Pool PoolResult
	// Bucket is the width of a throughput-series bucket.
	Bucket time.Duration
	// Series[i][b] is team i's service rate (units/s) in bucket b, from
	// the start of the run.
	Series [][]float64
	// TTFT[i] are the TTFTs of team i's interactive requests of the
	// window (censored at the end of the run for unfinished ones), for the
	// CDF charts; TTFTBatch the same for batch.
	TTFT, TTFTBatch [][]time.Duration
	// Spill is what a spill-aware gateway measured (SpillReporter), or
	// nil.
	Spill *SpillStats
	// Notes are the gateway's remarks on the run (Noter), or nil.
	Notes []string
	// Costs are the token counts of every finished request of the run (in
	// finish order), from which a report computes a gateway's usage and
	// the error of the plugin's entry-penalty estimate (costs.go).
	Costs []RequestCost
	// Capacity is, for a gateway that reports it (CapacityReporter) in a
	// scenario with capacity_from_engines, the C it decided against at
	// every sample, with the engines' C then; Ledger what it counted
	// against what the run served, in such a scenario or one with users
	// within teams. Both nil otherwise (elastic.go).
	Capacity []CapacitySample
	Ledger   *Ledger
	// Users holds one entry per user within a team (Scenario.Users: by
	// team in configuration order, then by user name), whatever the
	// gateway does with the x-user header; none if no workload names a
	// user.
	Users []UserResult
}

// UserResult are the measures of one user within a team: the requests
// of the window that carried the user in their x-user header.
type UserResult struct {
	// Team and User name the user.
	Team, User string
	// Service is the user's service in the window (in + 2·out tokens);
	// TeamShare is Service over its team's Service in the window.
	Service, TeamShare float64
	// Class holds the latency measures per class (Interactive, Batch), as
	// a team's.
	Class [2]ClassResult
}

// User returns the measures of the named user of team (nil if absent).
func (r *Result) User(team, user string) *UserResult {
	for i := range r.Users {
		if u := &r.Users[i]; u.Team == team && u.User == user {
			return u
		}
	}
	return nil
}

// TeamResult are one team's measures.
type TeamResult struct {
	// Team is the team name; Share its configured share.
	Team  string
	Share float64
	// Saturated reports whether the team counts as backlogged in the
	// share and Jain measures; Entitled is then its share normalised over
	// the saturated teams (0 otherwise).
	Saturated bool
	Entitled  float64
	// Fair is the team's max-min fair share of the saturated teams'
	// service in the window, given what each asked for: the saturated
	// teams' service divided by share, except that a team that asked for
	// less than that (Offered) is entitled to what it asked, and the rest
	// goes to the others by share (weighted water-filling, FairShares).
	// It equals Entitled when every saturated team asked for at least its
	// part, as closed-loop teams always do. The max share error and Jain
	// are measured against it. 0 for a team that is not saturated.
	Fair float64
	// Offered is the service (in + 2·out tokens) the team's requests
	// could take in the window: every request that arrived before its end
	// and had not finished before its start, whole; +Inf for a team with a
	// closed-loop workload (it always has work waiting) or none of whose
	// requests the collector saw; never less than Service.
	Offered float64
	// Service is the team's service in the window (in + 2·out tokens).
	Service float64
	// ServiceShare is Service over the pool's Service in the window;
	// SatShare is Service over the saturated teams' Service (0 if not
	// saturated).
	ServiceShare, SatShare float64
	// SeqShare is the team's part of the engine's sequence time in the
	// window (each request from its first scheduling to its finish), over
	// the saturated teams' if the team is saturated, else over all teams':
	// the resource a reservation in sequences divides, next to SatShare's
	// service.
	SeqShare float64
	// OutputTokens counts the team's output tokens in the window.
	OutputTokens int
	// WithinInFlight is the team's mean number of within-share requests
	// in flight over the window: every request the gateway did not send
	// as a borrower counts from its submission to its last token (to the
	// end of the run if it has none), whenever it arrived. Against the
	// team's reservation it is how much of the reservation the team's
	// own requests use.
	WithinInFlight float64
	// Preemptions counts the preemptions of the team's requests of the
	// window.
	Preemptions int
	// Borrowing counts the team's requests of the window that the plugin
	// sent as borrowers.
	Borrowing int
	// PromptTokens and CachedTokens count the prompt tokens of the team's
	// requests of the window and those the engine found in its prefix
	// cache.
	PromptTokens, CachedTokens int
	// Class holds the latency measures per class (Interactive, Batch).
	Class [2]ClassResult
}

// ClassResult are the latency measures of one team's requests of one class.
type ClassResult struct {
	// Requests counts the requests of the window; Unfinished those without
	// a last token at the end of the run (their latencies enter the
	// percentiles censored at the end of the run, as lower bounds).
	Requests, Unfinished int
	// NoToken counts the requests without a first token at the end.
	NoToken int
	// TTFT and E2E percentiles.
	TTFTp50, TTFTp99, E2Ep50, E2Ep99 time.Duration
	// Within counts the requests that were within their team's share on
	// arrival: sent to the engine at once and not as borrowers (under a
	// gateway without shares, every request it does not queue), and
	// WithinTTFTp50 and WithinTTFTp99 are their median and p99 TTFT.
	Within                       int
	WithinTTFTp50, WithinTTFTp99 time.Duration
	// Held counts the requests that waited at the gateway (submitted after
	// their arrival); Waitp99 is the p99 of the time every request spent
	// at the gateway (censored at the end for one never submitted).
	Held    int
	Waitp99 time.Duration
	// NeverSent counts the requests still at the gateway at the end of
	// the run (never submitted to an engine).
	NeverSent int
}

// PoolResult are the pool-wide measures.
type PoolResult struct {
	// ServiceRate is the pool's service in units/s; TokenRate its output
	// tokens/s.
	ServiceRate, TokenRate float64
	// KVUtil and SlotUtil are the time-averaged fractions of KV blocks and
	// of sequence slots (max_num_seqs) in use, over the window.
	KVUtil, SlotUtil float64
	// Preemptions counts every preemption of requests of the window.
	Preemptions int
	// Jain is Jain's index on the saturated teams' share-normalised
	// service (SatShare / Entitled).
	Jain float64
	// Gap is VTC's service gap: the largest difference in service (in +
	// 2·out tokens, each team's divided by share×N so that equal shares
	// read as plain tokens) that two teams accumulated over an interval in
	// which both were backlogged. See ServiceGap.
	Gap float64
	// MaxInFlight is the most requests in flight at the engines (sent,
	// not finished) at any moment of the run; MaxBorrowing the most of
	// them sent as borrowers (Request.Borrowing).
	MaxInFlight, MaxBorrowing int
}

// collector accumulates a run's measures as events happen.
type collector struct {
	s        *Scenario
	teams    []string
	idx      map[string]int
	from, to time.Duration
	bucket   time.Duration

	series  [][]float64
	service []float64 // window
	seqTime []float64 // window: sequence-seconds, first scheduling to finish
	cum     []float64 // whole run, for the gap samples
	tokens  []int
	waiting []int
	samples []GapSample
	norm    []float64

	utilN          int
	kvSum, slotSum float64
	maxInFlight    int
	borrowing      int // borrowers in flight now
	maxBorrowing   int

	// users are the scenario's users within teams (Scenario.Users),
	// userIdx their index, userService their service in the window.
	users       []TeamUser
	userIdx     map[TeamUser]int
	userService []float64
}

func newCollector(s *Scenario) *collector {
	c := &collector{s: s, teams: s.TeamNames(), idx: map[string]int{}, from: Sec(s.Warmup), to: Sec(s.Duration)}
	for i, t := range c.teams {
		c.idx[t] = i
	}
	n := len(c.teams)
	c.seqTime = make([]float64, n)
	c.bucket = bucketFor(Sec(s.Duration))
	nb := int((Sec(s.Duration) + c.bucket - 1) / c.bucket)
	c.series = make([][]float64, n)
	for i := range c.series {
		c.series[i] = make([]float64, nb)
	}
	c.service, c.cum, c.tokens, c.waiting = make([]float64, n), make([]float64, n), make([]int, n), make([]int, n)
	c.norm = make([]float64, n)
	for i, t := range s.Teams {
		c.norm[i] = t.Share * float64(n)
	}
	c.users = s.Users()
	c.userIdx = map[TeamUser]int{}
	for u, tu := range c.users {
		c.userIdx[tu] = u
	}
	c.userService = make([]float64, len(c.users))
	return c
}

// bucketFor picks a round bucket width giving about 60 buckets.
func bucketFor(d time.Duration) time.Duration {
	for _, b := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second, 30 * time.Second} {
		if d/b <= 80 {
			return b
		}
	}
	return time.Minute
}

func (c *collector) arrive(r *Request) { c.waiting[c.idx[r.Team]]++ }
func (c *collector) admit(r *Request)  { c.waiting[c.idx[r.Team]]-- }

// serve records service units of team i at t.
func (c *collector) serve(i int, t time.Duration, units float64) {
	c.cum[i] += units
	if b := int(t / c.bucket); b < len(c.series[i]) {
		c.series[i][b] += units / c.bucket.Seconds()
	}
	if t >= c.from && t < c.to {
		c.service[i] += units
	}
}

// token records the k-th output token (1-based) of r at t; the first also
// accounts the prompt.
func (c *collector) token(r *Request, k int, t time.Duration) {
	i := c.idx[r.Team]
	u := OutputWeight
	if k == 1 {
		u += float64(r.Prompt) * InputWeight
	}
	c.serve(i, t, u)
	if t >= c.from && t < c.to {
		c.tokens[i]++
		if k, ok := c.userIdx[TeamUser{r.Team, r.User}]; ok {
			c.userService[k] += u
		}
	}
}

// occupy records that r held an engine sequence from admitted (its first
// scheduling) to finished: the part inside the window counts to its
// team's sequence time (a preempted request's gaps count too).
func (c *collector) occupy(r *Request, admitted, finished time.Duration) {
	a, f := max(admitted, c.from), min(finished, c.to)
	if f > a {
		c.seqTime[c.idx[r.Team]] += (f - a).Seconds()
	}
}

// sample records the pool's state at t (every sampling period).
func (c *collector) sample(t time.Duration, kvFrac, slotFrac float64) {
	if t < c.from || t >= c.to {
		return
	}
	c.utilN++
	c.kvSum += kvFrac
	c.slotSum += slotFrac
	g := GapSample{Service: make([]float64, len(c.teams)), Backlogged: make([]bool, len(c.teams))}
	for i := range c.teams {
		g.Service[i] = c.cum[i] / c.norm[i]
		g.Backlogged[i] = c.waiting[i] > 0
	}
	c.samples = append(c.samples, g)
}

// result computes the Result from the requests of the run (all of them;
// the ones that arrived in the window count) at the end time end.
func (c *collector) result(reqs []*Request, end time.Duration) *Result {
	s := c.s
	res := &Result{Scenario: s.Name, From: c.from, To: c.to, Bucket: c.bucket, Series: c.series}
	sat := map[string]bool{}
	for _, t := range s.Saturated {
		sat[t] = true
	}
	if len(sat) == 0 {
		for _, t := range c.teams {
			sat[t] = true
		}
	}
	var total, satTotal, satShares, seqTotal, satSeq float64
	for i, t := range s.Teams {
		total += c.service[i]
		seqTotal += c.seqTime[i]
		if sat[t.Name] {
			satTotal += c.service[i]
			satShares += t.Share
			satSeq += c.seqTime[i]
		}
	}
	n := len(c.teams)
	res.TTFT, res.TTFTBatch = make([][]time.Duration, n), make([][]time.Duration, n)
	acc := make([][2]classAcc, n)
	uacc := make([][2]classAcc, len(c.users))
	res.Teams = make([]TeamResult, n)
	for i, t := range s.Teams {
		tr := TeamResult{Team: t.Name, Share: t.Share, Saturated: sat[t.Name], Service: c.service[i], OutputTokens: c.tokens[i]}
		if total > 0 {
			tr.ServiceShare = c.service[i] / total
		}
		if seqTotal > 0 {
			tr.SeqShare = c.seqTime[i] / seqTotal
		}
		if tr.Saturated {
			tr.Entitled = t.Share / satShares
			if satTotal > 0 {
				tr.SatShare = c.service[i] / satTotal
			}
			if satSeq > 0 {
				tr.SeqShare = c.seqTime[i] / satSeq
			}
		}
		res.Teams[i] = tr
	}
	if span := (c.to - c.from).Seconds(); span > 0 {
		for _, r := range reqs {
			if r.Borrowing || r.Submitted < 0 {
				continue
			}
			fin := r.Finished
			if fin < 0 {
				fin = end
			}
			if a, f := max(r.Submitted, c.from), min(fin, c.to); f > a {
				res.Teams[c.idx[r.Team]].WithinInFlight += (f - a).Seconds() / span
			}
		}
	}
	for _, r := range reqs {
		if r.Arrival < c.from || r.Arrival >= c.to {
			continue
		}
		i := c.idx[r.Team]
		tr := &res.Teams[i]
		tr.Preemptions += r.Preemptions
		tr.PromptTokens += r.Prompt
		tr.CachedTokens += r.CachedTokens
		res.Pool.Preemptions += r.Preemptions
		if r.Borrowing {
			tr.Borrowing++
		}
		acc[i][r.Class].add(r, end)
		if u, ok := c.userIdx[TeamUser{r.Team, r.User}]; ok {
			uacc[u][r.Class].add(r, end)
		}
	}
	for i := range res.Teams {
		for k := range 2 {
			res.Teams[i].Class[k] = acc[i][k].result()
		}
		res.TTFT[i] = acc[i][Interactive].ttft
		res.TTFTBatch[i] = acc[i][Batch].ttft
	}
	res.Users = make([]UserResult, len(c.users))
	for u, tu := range c.users {
		ur := UserResult{Team: tu.Team, User: tu.User, Service: c.userService[u]}
		if t := c.service[c.idx[tu.Team]]; t > 0 {
			ur.TeamShare = ur.Service / t
		}
		for k := range 2 {
			ur.Class[k] = uacc[u][k].result()
		}
		res.Users[u] = ur
	}
	w := (c.to - c.from).Seconds()
	res.Pool.ServiceRate = total / w
	tok := 0
	for _, k := range c.tokens {
		tok += k
	}
	res.Pool.TokenRate = float64(tok) / w
	if c.utilN > 0 {
		res.Pool.KVUtil = c.kvSum / float64(c.utilN)
		res.Pool.SlotUtil = c.slotSum / float64(c.utilN)
	}
	offered := make([]float64, n)
	seen := make([]bool, n)
	for _, r := range reqs {
		i := c.idx[r.Team]
		seen[i] = true
		switch {
		case r.Client >= 0:
			offered[i] = math.Inf(1)
		case r.Arrival < c.to && (r.Finished < 0 || r.Finished >= c.from):
			offered[i] += float64(r.Prompt)*InputWeight + float64(r.Output)*OutputWeight
		}
	}
	var shares, caps []float64
	var satIdx []int
	for i := range res.Teams {
		if !seen[i] {
			offered[i] = math.Inf(1) // nothing known of its requests: unbounded
		}
		// A team asked for at least what it was served.
		offered[i] = max(offered[i], c.service[i])
		res.Teams[i].Offered = offered[i]
		if res.Teams[i].Saturated {
			satIdx = append(satIdx, i)
			shares = append(shares, res.Teams[i].Share)
			caps = append(caps, offered[i])
		}
	}
	for k, f := range FairShares(satTotal, shares, caps) {
		res.Teams[satIdx[k]].Fair = f
	}
	var xs []float64
	for _, tr := range res.Teams {
		if tr.Saturated && tr.Fair > 0 {
			xs = append(xs, tr.SatShare/tr.Fair)
		}
	}
	res.Pool.Jain = Jain(xs)
	for _, r := range reqs {
		if r.Finished >= 0 {
			res.Costs = append(res.Costs, RequestCost{Team: c.idx[r.Team], Class: r.Class, Finished: r.Finished, Window: r.Arrival >= c.from && r.Arrival < c.to,
				Prompt: r.Prompt, Cached: r.CachedTokens, Output: r.Output, MaxTokens: r.MaxTokens})
		}
	}
	slices.SortStableFunc(res.Costs, func(a, b RequestCost) int { return cmp.Compare(a.Finished, b.Finished) })
	res.Pool.Gap = ServiceGap(c.samples)
	res.Pool.MaxInFlight, res.Pool.MaxBorrowing = c.maxInFlight, c.maxBorrowing
	if math.IsNaN(res.Pool.Gap) {
		res.Pool.Gap = 0
	}
	return res
}

// classAcc gathers the latencies of one class of a group of requests (a
// team's, a user's) of the window.
type classAcc struct {
	cr                      ClassResult
	ttft, e2e, within, wait []time.Duration
}

// add counts r, which arrived in the window, at the run's end end (the
// censoring time of what never happened).
func (a *classAcc) add(r *Request, end time.Duration) {
	cr := &a.cr
	cr.Requests++
	ft, fin := r.FirstToken, r.Finished
	if ft < 0 {
		cr.NoToken++
		ft = end
	}
	if fin < 0 {
		cr.Unfinished++
		fin = end
	}
	a.ttft = append(a.ttft, ft-r.Arrival)
	if !r.Borrowing && r.Submitted == r.Arrival {
		a.within = append(a.within, ft-r.Arrival)
	}
	sub := r.Submitted
	if sub < 0 {
		sub = end
		cr.NeverSent++
	}
	if sub > r.Arrival {
		cr.Held++
	}
	a.wait = append(a.wait, sub-r.Arrival)
	a.e2e = append(a.e2e, fin-r.Arrival)
}

// result sorts the latencies (ttft stays sorted, for the CDF charts) and
// returns the class's measures.
func (a *classAcc) result() ClassResult {
	cr := a.cr
	slices.Sort(a.ttft)
	slices.Sort(a.e2e)
	slices.Sort(a.within)
	slices.Sort(a.wait)
	cr.TTFTp50 = percentileSorted(a.ttft, 0.5)
	cr.TTFTp99 = percentileSorted(a.ttft, 0.99)
	cr.E2Ep50 = percentileSorted(a.e2e, 0.5)
	cr.E2Ep99 = percentileSorted(a.e2e, 0.99)
	cr.Within = len(a.within)
	cr.WithinTTFTp50 = percentileSorted(a.within, 0.5)
	cr.WithinTTFTp99 = percentileSorted(a.within, 0.99)
	cr.Waitp99 = percentileSorted(a.wait, 0.99)
	return cr
}

// FairShares divides total among teams by share, capping each at what it
// asked for (caps; +Inf for no cap) and giving what a capped team leaves
// to the others by share: weighted max-min fairness (water-filling). It
// returns each team's part of total (summing to 1 when total > 0 and the
// caps allow it). When the caps sum to less than total, every team gets
// its cap over their sum. Ties (equal cap/share) are capped together.
// Cost: O(n log n).
func FairShares(total float64, shares, caps []float64) []float64 {
	n := len(shares)
	out := make([]float64, n)
	if n == 0 || total <= 0 {
		return out
	}
	var sumCaps float64
	for _, c := range caps {
		sumCaps += c
	}
	if sumCaps <= total {
		for i, c := range caps {
			out[i] = c / sumCaps
		}
		return out
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	level := func(i int) float64 {
		if shares[i] <= 0 {
			return math.Inf(1)
		}
		return caps[i] / shares[i]
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(level(a), level(b)) })
	left, w := total, 0.0
	for _, i := range order {
		w += shares[i]
	}
	for k, i := range order {
		if w <= 0 {
			break
		}
		if caps[i] <= left*shares[i]/w {
			out[i] = caps[i] / total
			left -= caps[i]
			w -= shares[i]
			continue
		}
		for _, j := range order[k:] {
			out[j] = left * shares[j] / w / total
		}
		break
	}
	return out
}
