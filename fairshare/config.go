package fairshare

import (
	"encoding/binary"
	"math"
	"time"
)

// Bounds that keep every computation finite. They are far outside any
// sensible configuration; values beyond them are clamped.
const (
	minWeight   = 1e-9
	maxWeight   = 1e9
	maxShare    = 1e9
	maxUsage    = 1e200
	maxCapacity = 1 << 30
)

// TeamConfig is one team of a pool.
type TeamConfig struct {
	// Name identifies the team (the value of the team header). It must not
	// be "" nor UnknownTeam; duplicates after the first are ignored.
	Name string
	// Share is the team's fraction of the pool, normally in (0, 1] with the
	// shares of a pool summing to at most 1 (see Apportion). Negative, NaN
	// and infinite values count as 0; values above 1e9 count as 1e9.
	Share float64
	// Weight divides the team's usage before ranking, as Kueue's
	// LocalQueue fairSharing.weight does: a team of weight 2 is treated as
	// if it had used half as much. 0 (the zero value), negative, NaN and
	// infinite values mean 1; others are clamped into [1e-9, 1e9].
	Weight float64
}

// Config is the configuration of one pool.
type Config struct {
	// Capacity is C, the pool's sustainable concurrency (requests in
	// flight). Negative values count as 0; values above 2^30 are clamped.
	Capacity int
	// Teams lists the teams in display order (Snapshot follows it).
	Teams []TeamConfig
	// HalfLife is the half-life of usage decay; 0 disables decay (usage
	// accumulates forever). Negative values count as 0.
	HalfLife time.Duration
	// EntryPenalty charges a request's estimated cost to its team's usage
	// at Acquire and settles it at Release, as Kueue's admission fair
	// sharing does.
	EntryPenalty bool
	// HolderTimeout is how long a holder (one Wasm VM) may go unseen before
	// it is presumed dead and its requests in flight become phantoms. 0
	// disables leases: holders never expire.
	HolderTimeout time.Duration
	// RequestTimeout is the longest a request can run. A dead holder's
	// requests stay counted as phantoms for this long after the holder was
	// presumed dead (0 drops them at once), and a request that a live
	// holder has not released one to two RequestTimeouts after it was
	// granted is dropped as a lost release (0 disables that: a lost
	// release then holds its slot for good). See leases.go.
	RequestTimeout time.Duration
}

// cleanWeight maps a configured weight onto the one the pool uses.
func cleanWeight(w float64) float64 {
	if math.IsNaN(w) || math.IsInf(w, 0) || w <= 0 {
		return 1
	}
	return min(max(w, minWeight), maxWeight)
}

// cleanDuration maps negative durations to 0.
func cleanDuration(d time.Duration) time.Duration {
	return max(d, 0)
}

// cleanCapacity clamps a capacity into [0, 2^30].
func cleanCapacity(c int) int {
	return min(max(c, 0), maxCapacity)
}

// teams returns the usable teams of c: named, not UnknownTeam, first of
// their name, with clean shares and weights.
func (c Config) teams() []TeamConfig {
	out := make([]TeamConfig, 0, len(c.Teams))
	for _, t := range c.Teams {
		if t.Name == "" || t.Name == UnknownTeam {
			continue
		}
		dup := false
		for _, o := range out {
			if o.Name == t.Name {
				dup = true
				break
			}
		}
		if dup {
			continue
		}
		out = append(out, TeamConfig{Name: t.Name, Share: cleanShare(t.Share), Weight: cleanWeight(t.Weight)})
	}
	return out
}

// Fingerprint returns a stable 64-bit hash (FNV-1a) of the configuration
// as the pool applies it: equivalent configurations (Weight 0 and 1, a
// negative and a zero HalfLife, a duplicate team) have equal fingerprints,
// and the value is the same in every process and version of this package
// (it depends on the configuration only, not on the record layout). A pool stores the fingerprint of the
// configuration it was built from, so the plugin can tell when to
// Reconfigure. Cost: O(total length of the team names).
func (c Config) Fingerprint() uint64 {
	// fingerprintVersion was the record version when the hash was
	// defined; it stays 1 so fingerprints survive layout changes.
	const fingerprintVersion = 1
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	var buf [8]byte
	word := func(v uint64) {
		binary.LittleEndian.PutUint64(buf[:], v)
		for _, b := range buf {
			h = (h ^ uint64(b)) * prime
		}
	}
	word(fingerprintVersion)
	word(uint64(cleanCapacity(c.Capacity)))
	word(uint64(cleanDuration(c.HalfLife)))
	word(uint64(cleanDuration(c.HolderTimeout)))
	word(uint64(cleanDuration(c.RequestTimeout)))
	if c.EntryPenalty {
		word(1)
	} else {
		word(0)
	}
	teams := c.teams()
	word(uint64(len(teams)))
	for _, t := range teams {
		word(uint64(len(t.Name)))
		for i := 0; i < len(t.Name); i++ {
			h = (h ^ uint64(t.Name[i])) * prime
		}
		word(math.Float64bits(t.Share))
		word(math.Float64bits(t.Weight))
	}
	return h
}
