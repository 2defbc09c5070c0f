package trace_test

import (
	"fmt"
	"strings"

	"github.com/fairshare-wasm/fairshare/internal/trace"
)

func ExampleRead() {
	const azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
		"2023-11-16 18:17:03.9799600,4808,10\n" +
		"2023-11-16 18:17:04.0319600,3180,8\n" +
		"2023-11-16 18:17:05.5000000,900,250\n" +
		"2023-11-16 18:17:09.0000000,1200,30\n"
	// Skip the first half second, keep 5 s, replay twice as slowly, and
	// take every other row of the window from its second on (lines 4 and
	// 5 are in the window; a second team would take offset 0, line 4).
	spec := trace.Spec{File: "code.csv", Format: trace.Azure, Start: 0.5, Duration: 5, TimeScale: 2, Every: 2, Offset: 1}
	tr, err := trace.Read(strings.NewReader(azure), "code.csv", spec)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, q := range tr.Requests {
		fmt.Printf("line %d at %v: %d prompt, %d output tokens\n", q.Line, q.Arrival, q.Prompt, q.Output)
	}
	fmt.Println(tr.Stats())

	_, err = trace.Read(strings.NewReader("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,1,x\n"), "code.csv", spec)
	fmt.Println(err)
	// Output:
	// line 5 at 9.04008s: 1200 prompt, 30 output tokens
	// 1 requests in 10s: 0.10/s, inter-arrival CV 0.00, 0 to 0 a minute; prompt mean 1200 (median 1200, p99 1200), output mean 30 (median 30, p99 30)
	// code.csv:2: GeneratedTokens: "x" is not a non-negative integer
}
