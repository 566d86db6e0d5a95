// Package report turns counters into the USE tables and verdicts that
// pyobs prints: the shapes of the JSON documents (docs/json.md), the rules
// that name a verdict (each with the numbers that triggered it and the
// threshold it crossed), and the text renderings.
package report
