// Package export carries the agent's windows out of pyobs, each exporter a
// real protocol behind one small Sink interface:
//
//   - OTLP (otlp.go): the OpenTelemetry profiles signal (the messages of
//     the collector's v0.165.0 release, encoded here by pbwire.go; the
//     tests decode them with the collector's pdata), protobuf over HTTP POST to
//     /v1development/profiles, or (otlpgrpc.go) the profiles service's
//     Export as one gRPC call written here on HTTP/2;
//   - Pyroscope (pyroscope.go): gzipped pprof to /ingest with
//     name{labels}, from, until and format=pprof;
//   - Prometheus (prom.go): a /metrics endpoint in the text exposition
//     format (promtext.go, written here) with stat's counters, the
//     verdicts as gauges, red's counters and histograms, pyobs's own cost
//     and its process_/go_ figures.
//
// A Queue sits between the agent and each push sink: bounded (a few
// windows), one goroutine per sink that retries with exponential backoff,
// the oldest window dropped (and counted) when the sink is down or slow for
// longer than the queue holds, so sampling never waits for a sink and
// memory never grows with the outage.
//
// Truth it reads: the windows the agent hands it, nothing else; a /metrics
// client changes nothing (GET /metrics only; every other path is 404).
//
// Price: per window, one conversion (microseconds per stack) and one
// request per push sink; /metrics costs a scrape's encoding.
//
// Cannot see: a window dropped for a dead sink is gone (counted in
// pyobs_export_dropped_windows_total, never re-sent); exports carry
// function names, files and lines, never locals or arguments.
package export
