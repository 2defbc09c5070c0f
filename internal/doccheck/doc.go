// Package doccheck holds tests over the repository's own text: that no
// tracked file cites notes users do not have (see doccheck_test.go), and
// that the figures the prose quotes from docs/results are what the
// results say.
package doccheck
