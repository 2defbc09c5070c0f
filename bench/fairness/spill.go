package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fairshare-wasm/fairshare/bench/fairness/fairbench"
)

// spillSummary introduces the spill-over targets of the summary.
const spillSummary = "The scenarios with pools (S8): plugin.wasm with the pools' `spill_to` (`" + fairbench.SpillColumn + "`) against the same configuration without it (`" + fairbench.NoSpillColumn + "`), both with flow control and `hold_headers` `\"on\"`, every request run by the engines of the pool the plugin named in `x-fairshare-pool`. The pools' counts are read from the plugin's records after every submission (the run fails if a pool has more than C borrowers, or a spilled request leaves its fallback past C). ✓ holds, ✗ fails."

// runSpill runs a spill scenario with its two columns (gws: spill,
// no-spill), writes its markdown and prints its targets.
func runSpill(s *fairbench.Scenario, gws []fairbench.NewGateway, seed uint64, out string) (*fairbench.SpillReport, error) {
	if len(gws) != 2 {
		return nil, fmt.Errorf("scenario %s has pools (spill): it needs -plugin wasm with -flow", s.Name)
	}
	t0 := time.Now()
	rep, err := fairbench.RunSpillScenario(s, gws[0], gws[1], fairbench.Modes, seed)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := fairbench.WriteSpill(&b, rep); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(out, s.Name+".md"), b.Bytes(), 0o644); err != nil {
		return nil, err
	}
	fmt.Printf("\n== %s (%s) [%.1fs]\n", s.Name, s.Title, time.Since(t0).Seconds())
	for _, m := range rep.Modes {
		for _, t := range rep.SpillTargets(m) {
			fmt.Println("  " + t.String())
		}
	}
	return rep, nil
}

// writeSpillTargets writes the spill targets of every spill report.
func writeSpillTargets(w io.Writer, reps []*fairbench.SpillReport) error {
	var b bytes.Buffer
	b.WriteString("| scenario | engine | target | bound | value | |\n|---|---|---|---|---|---|\n")
	for _, rep := range reps {
		for _, m := range rep.Modes {
			for _, t := range rep.SpillTargets(m) {
				op := "≥"
				if t.AtMost {
					op = "≤"
				}
				ok := "✓"
				if !t.OK() {
					ok = "✗"
				}
				fmt.Fprintf(&b, "| [%s](%s.md) | %s | %s | %s "+t.Format+" | "+t.Format+" | %s |\n", rep.Scenario.Name, rep.Scenario.Name, fairbench.ModeTitle(m), t.Name, op, t.Limit, t.Value, ok)
			}
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}
