package plugin

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/fairshare-wasm/fairshare/fairshare"
)

// ConfigCheck is CheckConfig's verdict on a plugin configuration.
type ConfigCheck struct {
	// Problems are every problem the plugin would log at start, each
	// "field.path: what is wrong"; empty for a configuration the plugin
	// accepts.
	Problems []string
	// Warnings are what the plugin logs at start of an accepted
	// configuration (the Envoy settings it needs).
	Warnings []string
	// Summary is one line on an accepted configuration: its pools with
	// their capacity and teams, flow control on or off, and what happens
	// to teams the configuration does not name. "" when Problems is not
	// empty.
	Summary string
}

// CheckConfig validates a plugin configuration natively with the parser the
// plugin runs in proxy_on_configure (parse), so that a command-line tool
// (fairshare-run -check) answers exactly what the plugin would log, without
// starting a host: the problems with their field paths, a "did you mean" for
// a misspelt field, and the warnings of an accepted one.
func CheckConfig(data []byte) ConfigCheck {
	c, err := parse(data)
	if err != nil {
		if ce, ok := err.(*configError); ok {
			return ConfigCheck{Problems: ce.problems}
		}
		return ConfigCheck{Problems: []string{err.Error()}}
	}
	return ConfigCheck{Warnings: c.warnings(), Summary: c.summary()}
}

// summary describes an accepted configuration in one line.
func (c *config) summary() string {
	var b strings.Builder
	if len(c.pools) == 1 {
		b.WriteString("1 pool: ")
	} else {
		fmt.Fprintf(&b, "%d pools: ", len(c.pools))
	}
	for i := range c.pools {
		p := &c.pools[i]
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s capacity %d", p.name, p.capacity)
		if p.kvTokens > 0 {
			fmt.Fprintf(&b, " (%d KV tokens)", p.kvTokens)
		}
		if p.throughput > 0 {
			burst := p.throughputBurst
			if burst == 0 {
				burst = fairshare.DefaultThroughputBurst
			}
			fmt.Fprintf(&b, ", throughput %d cost units/s (burst %s)", p.throughput, burst)
		}
		if c.userHeader != "" {
			fmt.Fprintf(&b, ", users max %d (active %s, idle %s)", p.maxUsers, p.userActive, p.userIdle)
		}
		b.WriteString(", teams ")
		for j, t := range p.teams {
			if j > 0 {
				b.WriteString(" ")
			}
			b.WriteString(t.Name + " " + strconv.FormatFloat(100*t.Share, 'g', 4, 64) + "%")
		}
		if len(p.teams) == 0 {
			b.WriteString("none")
		}
	}
	if c.holding() {
		fmt.Fprintf(&b, "; flow control on (max_queue_time %s, queue_limit %d)", c.maxQueueTime, c.queueLimit)
	} else if c.maxQueueTime > 0 {
		b.WriteString("; flow control off (queue_limit 0: borrowers go to the engine at once)")
	} else {
		b.WriteString("; flow control off (max_queue_time 0s: borrowers go to the engine at once)")
	}
	if c.userHeader != "" {
		b.WriteString("; users within teams from " + c.userHeader)
		if c.userFromBody {
			b.WriteString(" (or the body's \"user\" without it)")
		}
	}
	if c.shadow {
		b.WriteString("; mode shadow: decided and reported, every request forwarded as sent (nothing held or refused for fairness)")
	}
	if c.rejectUnknown {
		b.WriteString("; teams not in a pool are refused (403)")
	} else {
		b.WriteString("; teams not in a pool borrow as " + unknownTeamMetricName)
	}
	return b.String()
}
