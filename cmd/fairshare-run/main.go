// Command fairshare-run is the `make run` experience: it starts a local
// proxy (the project's proxy-wasm host on wazero, running plugin.wasm with a
// fairshare configuration) in front of a simulated vLLM, one engine per pool
// of the configuration with the pool's capacity as max_num_seqs, or a real
// vLLM URL; drives a short demo load in every pool, in which one team
// floods; and shows a live per-team view of every pool: requests in flight
// within share and borrowing, the priorities the plugin gave them, tokens/s,
// time to first token, and the plugin's usage, level fairshare and rank. At
// the end (or on Ctrl-C) it prints a summary.
//
// Usage:
//
//	fairshare-run [-wasm plugin.wasm] [-config file.json] [-upstream URL]
//	              [-listen 127.0.0.1:10000] [-admin 127.0.0.1:9901|off]
//	              [-vms 2] [-duration 30s] [-no-load]
//	              [-model name] [-drain 15s] [-view auto|live|lines]
//	              [-time-scale 1] [-v]
//	fairshare-run -check file.json
//	              [-trace FILE -trace-format F [-trace-start s] [-trace-duration s]
//	               [-trace-time-scale x] [-trace-rate-scale x] [-trace-every n]
//	               [-trace-offset k] [-trace-teams a=0.5,b=0.3,c=0.2:batch]
//	               [-trace-requests n]]
//
// make run builds plugin.wasm and runs this command; its variables UPSTREAM,
// CONFIG and NO_LOAD set -upstream, -config and -no-load, and RUN_ARGS
// passes any other flag. Under make, on a terminal, the command takes the
// terminal's foreground so that Ctrl-C stops it (with its summary) and not
// make.
//
// -check validates a configuration file with the plugin's own parser
// (plugin.CheckConfig, natively: no proxy, no Wasm) and exits: 0 with a
// one-line summary, 1 with every problem and its field path, a misspelt
// field with the field it probably means. Without -check, the configuration
// of a run is checked the same way before anything starts.
//
// -admin is the local proxy's admin port (admin.go): GET /stats/prometheus
// answers the plugin's metrics as Envoy's admin serves them with
// envoy.yaml's stats_tags; "off" serves none. With -replicas each proxy
// has its own, on consecutive ports.
//
// Without -config it uses an embedded demo configuration (the example
// configuration with the changes the banner lists). The local proxy buffers
// request bodies up to the configuration's max_body_bytes. With -no-load it
// sends nothing itself, prints curl commands to try, and shows the live view
// of whatever traffic arrives until Ctrl-C.
//
// The demo teams of each pool are its teams by decreasing share: the
// largest sends steady interactive requests within its share, the second
// joins after a quarter of the run, the smallest floods with batch requests
// far above its share, so most of them borrow and yield to the others. The
// client counts scale with the pool's capacity. -model restricts the demo to
// the pool serving that model.
//
// With -trace the load is a trace window instead (trace.go): every row one
// streaming request at its arrival time, of its prompt length and with its
// output length as max_tokens, split among -trace-teams by weight, sent to
// the first pool (or -model's) until the window, -trace-requests or
// -duration ends; the summary says which window was replayed, how many
// rows were sent, and their rate and inter-arrival CV.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	restore := takeTerminal()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills the process the usual way
	}()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	restore()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case err != nil:
		fmt.Fprintln(os.Stderr, "fairshare-run:", err)
		os.Exit(1)
	}
}

// options are the command-line flags.
type options struct {
	wasm      string
	config    string
	upstream  string
	listen    string
	admin     string // -admin: the admin port's address, "off" for none
	model     string
	vms       int
	noLoad    bool
	duration  time.Duration
	drain     time.Duration
	view      string
	timeScale float64
	verbose   bool
	replicas  int
	tr        traceOptions
	check     string // -check: validate this configuration file and exit
	// engines is -engines: the engines in service over time in the
	// simulator of every capacity_from pool (elastic.go).
	engines []engineStep

	// The demo load's end on events (tests only, no flag; see loadEnd).
	// Zero and nil: the load ends at duration, as the command's always
	// does. Otherwise duration is the least the load runs: it goes on
	// until every team of the demo has completed at least minDone
	// requests and pending returns "", or for loadGuard more at most.
	minDone int
	// pending, when set, says what the demo's end still waits for (e.g.
	// "research to borrow"), given the teams' figures so far; "" once
	// nothing.
	pending func(teams []teamView) string
	// loadGuard bounds the wait past duration (0: loadHangGuard).
	loadGuard time.Duration
}

// Default flag values.
const (
	defaultListen   = "127.0.0.1:10000"
	defaultVMs      = 2
	defaultDuration = 30 * time.Second
	defaultDrain    = 15 * time.Second
	// refreshLive and refreshLines are the view's refresh periods on a
	// terminal and otherwise.
	refreshLive  = 500 * time.Millisecond
	refreshLines = 5 * time.Second
)

// defaultWasm is the -wasm default: $FAIRSHARE_WASM (set by make run) or
// plugin.wasm in the working directory.
func defaultWasm() string {
	if p := os.Getenv("FAIRSHARE_WASM"); p != "" {
		return p
	}
	return "plugin.wasm"
}

// parseFlags parses args into options; errors go to stderr.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("fairshare-run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "fairshare-run: plugin.wasm in a local proxy in front of a (simulated) vLLM, with a demo load\n"+
			"from three teams (or a trace window: -trace) and a live per-team view. Ctrl-C stops it.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.wasm, "wasm", defaultWasm(), "the plugin module to run (make build makes plugin.wasm; default $FAIRSHARE_WASM if set)")
	fs.StringVar(&o.config, "config", "", "plugin configuration JSON file (default: the embedded demo configuration)")
	fs.StringVar(&o.upstream, "upstream", "", "base URL of a real vLLM server, e.g. http://127.0.0.1:8000 (default: start the embedded simulator)")
	fs.StringVar(&o.listen, "listen", defaultListen, "address of the local proxy")
	fs.StringVar(&o.admin, "admin", defaultAdmin, "address of the local proxy's admin port, which serves the plugin's metrics at /stats/prometheus as Envoy's admin does (off: none)")
	fs.StringVar(&o.model, "model", "", "model name the demo requests (default: the configuration's first model)")
	fs.IntVar(&o.vms, "vms", defaultVMs, "worker VMs of the proxy (Envoy's --concurrency)")
	fs.BoolVar(&o.noLoad, "no-load", false, "serve the proxy only (no demo load); print curl commands and wait for Ctrl-C")
	fs.DurationVar(&o.duration, "duration", defaultDuration, "length of the demo load")
	fs.DurationVar(&o.drain, "drain", defaultDrain, "how long to wait for requests in flight after the load stops before cancelling them")
	fs.StringVar(&o.view, "view", "auto", "live view: auto (in place on a terminal, lines otherwise), live or lines")
	fs.Float64Var(&o.timeScale, "time-scale", defaultTimeScale, "simulator only: wall-clock seconds per simulated second (2 runs the engine at half speed)")
	fs.BoolVar(&o.verbose, "v", false, "print the plugin's warnings and errors to stderr")
	fs.StringVar(&o.tr.file, "trace", "", "replay this trace file instead of the demo load (testdata/traces has windows of the Azure and Mooncake traces); needs -trace-format")
	fs.StringVar(&o.tr.format, "trace-format", "", "-trace's format: azure, burstgpt, mooncake or jsonl")
	fs.Float64Var(&o.tr.start, "trace-start", 0, "-trace: start of the window, in trace seconds after its first row")
	fs.Float64Var(&o.tr.duration, "trace-duration", 0, "-trace: length of the window in trace seconds (0: to the end)")
	fs.Float64Var(&o.tr.timeScale, "trace-time-scale", 0, "-trace: stretch the trace's time (2: half the rate; 0 means 1); the simulator's -time-scale applies on top")
	fs.Float64Var(&o.tr.rateScale, "trace-rate-scale", 0, "-trace: thin (< 1) or thicken (> 1) the arrivals (0 means 1)")
	fs.IntVar(&o.tr.every, "trace-every", 0, "-trace: take every n-th row of the window (0 means 1)")
	fs.IntVar(&o.tr.offset, "trace-offset", 0, "-trace: the first row taken, in [0, every)")
	fs.StringVar(&o.tr.teams, "trace-teams", "", "-trace: split the rows among teams by weight, e.g. search=0.5,chat=0.3,research=0.2:batch (each row goes to one team by a fixed hash of its line, so each team replays a thinning of the trace; class interactive unless :batch, a jsonl row's class wins); default: the pool's teams by share")
	fs.IntVar(&o.tr.requests, "trace-requests", 0, "-trace: send at most this many requests (0: the whole window, until -duration)")
	fs.StringVar(&o.check, "check", "", "validate this plugin configuration file with the plugin's own parser and exit (0: valid, with a one-line summary; 1: every problem with its field path); starts nothing")
	fs.IntVar(&o.replicas, "replicas", 1, "local proxies sharing every pool through an embedded etcd (the plugin's cluster block); the demo load is split 70/20/10 with 3, evenly otherwise")
	enginesFlag := fs.String("engines", "", "simulator only, for the pools with capacity_from: engines in service at the start and from each time on, e.g. 2,10s=4,20s=1 (the plugin reads them from the engines' /metrics)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	if o.engines, err = parseEngines(*enginesFlag); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q (flags only; see -h)", fs.Args())
	}
	switch {
	case o.vms < 1:
		return o, fmt.Errorf("-vms must be at least 1, got %d", o.vms)
	case o.replicas < 1 || o.replicas > maxReplicas:
		return o, fmt.Errorf("-replicas must be in [1, %d], got %d", maxReplicas, o.replicas)
	case o.duration <= 0 && !o.noLoad:
		return o, fmt.Errorf("-duration must be positive, got %v", o.duration)
	case o.view != "auto" && o.view != "live" && o.view != "lines":
		return o, fmt.Errorf("-view must be auto, live or lines, got %q", o.view)
	case !(o.timeScale > 0):
		return o, fmt.Errorf("-time-scale must be positive, got %v", o.timeScale)
	case o.tr.requests < 0:
		return o, fmt.Errorf("-trace-requests must be >= 0, got %d", o.tr.requests)
	}
	if o.tr.file == "" {
		if o.tr != (traceOptions{}) {
			return o, fmt.Errorf("-trace-* flags need -trace FILE")
		}
		return o, nil
	}
	if o.noLoad {
		return o, fmt.Errorf("-trace and -no-load exclude each other")
	}
	if err := o.tr.spec().ValidateAt("-trace"); err != nil {
		return o, err
	}
	if o.tr.teams != "" {
		if _, err := parseTraceTeams(o.tr.teams); err != nil {
			return o, err
		}
	}
	return o, nil
}

// run is the whole command: parse the flags, start the upstream and the
// proxy, run the demo (or serve only) until it ends or ctx is cancelled,
// print the summary and shut everything down. A cancelled ctx (Ctrl-C) is a
// clean stop, not an error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.check != "" {
		return checkFile(o.check, stdout)
	}
	r, err := start(ctx, o, stdout, stderr)
	if err != nil {
		if ctx.Err() != nil {
			return nil // Ctrl-C while starting
		}
		return err
	}
	defer r.close()
	if o.noLoad {
		r.serveOnly(ctx, isTerminal(stdout, o.view))
		return nil
	}
	r.demo(ctx, isTerminal(stdout, o.view))
	return nil
}

// isTerminal reports whether the live view redraws in place: -view live,
// or -view auto with w a character device.
func isTerminal(w io.Writer, view string) bool {
	switch view {
	case "live":
		return true
	case "lines":
		return false
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb"
}
