package trace

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Spec selects a window of a trace file and shapes it. It is the "trace"
// object of a scenario file. Zero values of the optional fields mean their
// defaults, so a spec needs only file and format.
type Spec struct {
	// File is the trace file (relative paths resolve against Load's dir).
	File string `json:"file"`
	// Format is the file's format: azure, burstgpt, mooncake or jsonl.
	Format Format `json:"format"`
	// Start is where the window starts, in trace seconds after the
	// earliest row (default 0).
	Start float64 `json:"start_s,omitempty"`
	// Duration is the window's length in trace seconds (0: to the end).
	Duration float64 `json:"duration_s,omitempty"`
	// TimeScale stretches time: 2 replays the window twice as slowly
	// (0 means 1), at most MaxTimeScale.
	TimeScale float64 `json:"time_scale,omitempty"`
	// RateScale thins (< 1) or thickens (> 1) the arrivals, at most
	// MaxRateScale (0 means 1).
	RateScale float64 `json:"rate_scale,omitempty"`
	// Every takes every n-th row of the window (0 means 1).
	Every int `json:"every,omitempty"`
	// Offset is the first row taken, in [0, every): specs that differ only
	// in offset take disjoint rows.
	Offset int `json:"offset,omitempty"`
}

// MaxRateScale bounds rate_scale.
const MaxRateScale = 100

// MaxTimeScale bounds time_scale.
const MaxTimeScale = 20

// Validate checks the spec and returns every problem found, each with its
// field path under "trace".
func (s Spec) Validate() error { return s.ValidateAt("trace") }

// ValidateAt is Validate with the field paths under prefix (for a spec
// nested in a scenario, "workloads[2].trace" say).
func (s Spec) ValidateAt(prefix string) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", prefix, field, fmt.Sprintf(format, args...)))
	}
	if s.File == "" {
		bad("file", "must not be empty")
	}
	if !slices.Contains(Formats, s.Format) {
		bad("format", "must be one of azure, burstgpt, mooncake, jsonl, got %q", s.Format)
	}
	if !(s.Start >= 0 && s.Start <= maxSeconds) {
		bad("start_s", "must be in [0, %g], got %v", float64(maxSeconds), s.Start)
	}
	if !(s.Duration >= 0 && s.Duration <= maxSeconds) {
		bad("duration_s", "must be in [0, %g] (0: to the end), got %v", float64(maxSeconds), s.Duration)
	}
	if s.TimeScale != 0 && !(s.TimeScale > 0 && s.TimeScale <= MaxTimeScale) {
		bad("time_scale", "must be > 0, at most %d, got %v", MaxTimeScale, s.TimeScale)
	}
	if s.RateScale != 0 && !(s.RateScale > 0 && s.RateScale <= MaxRateScale) {
		bad("rate_scale", "must be > 0, at most %d, got %v", MaxRateScale, s.RateScale)
	}
	if s.Every < 0 {
		bad("every", "must be >= 1 (0: every row), got %d", s.Every)
	}
	if s.Offset < 0 || s.Offset >= s.every() {
		bad("offset", "must be in [0, every) = [0, %d), got %d", s.every(), s.Offset)
	}
	return errors.Join(errs...)
}

// every returns Every with its default.
func (s Spec) every() int {
	if s.Every <= 0 {
		return 1
	}
	return s.Every
}

// timeScale returns TimeScale with its default.
func (s Spec) timeScale() float64 {
	if s.TimeScale == 0 {
		return 1
	}
	return s.TimeScale
}

// rateScale returns RateScale with its default.
func (s Spec) rateScale() float64 {
	if s.RateScale == 0 {
		return 1
	}
	return s.RateScale
}

// span returns d trace seconds after time_scale.
func (s Spec) span(d float64) time.Duration {
	return time.Duration(math.Round(d * s.timeScale() * float64(time.Second)))
}

// Span writes the part of the trace s takes, "[start, end)" in seconds,
// each figure followed by unit (" s" or "s"); end is "end" for a window
// without a duration.
func (s Spec) Span(unit string) string {
	end := "end"
	if s.Duration > 0 {
		end = fmt.Sprintf("%g%s", s.Start+s.Duration, unit)
	}
	return fmt.Sprintf("[%g%s, %s)", s.Start, unit, end)
}

// Shaping writes how s reshapes the window, each setting that is not the
// default after ", ": time_scale, rate_scale, every and offset; "" when
// none is set.
func (s Spec) Shaping() string {
	d := ""
	if s.TimeScale != 0 && s.TimeScale != 1 {
		d += fmt.Sprintf(", time_scale %g", s.TimeScale)
	}
	if s.RateScale != 0 && s.RateScale != 1 {
		d += fmt.Sprintf(", rate_scale %g", s.RateScale)
	}
	if s.Every > 1 {
		d += fmt.Sprintf(", every %d offset %d", s.Every, s.Offset)
	}
	return d
}
