package export

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// OTLPGRPC sends each window as an ExportProfilesServiceRequest to an
// OpenTelemetry Collector's OTLP/gRPC receiver (port 4317 by default):
// grpc://HOST:PORT in clear, grpcs://HOST:PORT over TLS (system roots).
type OTLPGRPC struct {
	target string
	conn   *grpc.ClientConn
	client pprofileotlp.GRPCClient
}

// newOTLPGRPC dials lazily: a collector that is down now is a failed
// export later (queued, retried, counted), not a refused start.
func newOTLPGRPC(u *url.URL, raw string) (*OTLPGRPC, error) {
	if u.Host == "" {
		return nil, fmt.Errorf("--otlp %q: no host", raw)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("--otlp %q: a gRPC endpoint has no path (the service is opentelemetry.proto.collector.profiles)", raw)
	}
	creds := insecure.NewCredentials()
	if u.Scheme == "grpcs" {
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	}
	conn, err := grpc.NewClient(u.Host, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("--otlp %q: %w", raw, err)
	}
	return &OTLPGRPC{target: u.Scheme + "://" + u.Host, conn: conn, client: pprofileotlp.NewGRPCClient(conn)}, nil
}

// Name implements Sink.
func (o *OTLPGRPC) Name() string { return "otlp " + o.target }

// Export implements Sink.
func (o *OTLPGRPC) Export(ctx context.Context, w *Window) error {
	resp, err := o.client.Export(ctx, pprofileotlp.NewExportRequestFromProfiles(ToOTLP(w)))
	if err != nil {
		return fmt.Errorf("can't export window %d to %s: %w", w.Seq, o.target, err)
	}
	if ps := resp.PartialSuccess(); ps.RejectedProfiles() > 0 {
		return fmt.Errorf("%s rejected %d profiles of window %d: %s", o.target, ps.RejectedProfiles(), w.Seq, ps.ErrorMessage())
	}
	return nil
}

// Close releases the connection.
func (o *OTLPGRPC) Close() error { return o.conn.Close() }
