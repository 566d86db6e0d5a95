package export

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// OTLPGRPC sends each window as an ExportProfilesServiceRequest to an
// OpenTelemetry Collector's OTLP/gRPC receiver (port 4317 by default):
// grpc://HOST:PORT in clear (HTTP/2 without TLS), grpcs://HOST:PORT over
// TLS (system roots). The one unary call is written here on net/http's
// HTTP/2 (the gRPC wire format: a 5-byte prefix, the message, grpc-status
// in the trailers): a gRPC library's package initialisation cost every
// pyobs command ~0.9 ms at start (GODEBUG=inittrace=1).
type OTLPGRPC struct {
	target string // scheme://host, for messages
	url    string // the Export method's URL
	tr     *http.Transport
	client *http.Client
}

// exportPath is the service's Export method.
const exportPath = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"

// newOTLPGRPC connects lazily: a collector that is down now is a failed
// export later (queued, retried, counted), not a refused start.
func newOTLPGRPC(u *url.URL, raw string) (*OTLPGRPC, error) {
	if u.Host == "" {
		return nil, fmt.Errorf("--otlp %q: no host", raw)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("--otlp %q: a gRPC endpoint has no path (the service is opentelemetry.proto.collector.profiles)", raw)
	}
	// HTTP/2 only: over TLS, or over plain TCP with prior knowledge (h2c)
	// as gRPC's insecure credentials speak it.
	var protos http.Protocols
	scheme := "https"
	if u.Scheme == "grpc" {
		scheme = "http"
		protos.SetUnencryptedHTTP2(true)
	} else {
		protos.SetHTTP2(true)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}, Protocols: &protos}
	return &OTLPGRPC{target: u.Scheme + "://" + u.Host, url: scheme + "://" + u.Host + exportPath, tr: tr, client: &http.Client{Transport: tr}}, nil
}

// Name implements Sink.
func (o *OTLPGRPC) Name() string { return "otlp " + o.target }

// Export implements Sink.
func (o *OTLPGRPC) Export(ctx context.Context, w *Window) error {
	// ProfilesData and ExportProfilesServiceRequest share their wire
	// format (the HTTP sink posts the same bytes).
	msg := ToOTLP(w)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.url, bytes.NewReader(grpcFrame(msg)))
	if err != nil {
		return fmt.Errorf("can't export window %d to %s: %w", w.Seq, o.target, err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	resp, err := o.client.Do(req)
	if err != nil {
		return fmt.Errorf("can't export window %d to %s: %w", w.Seq, o.target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("can't export window %d to %s: reading the answer: %w", w.Seq, o.target, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("can't export window %d to %s: HTTP %s", w.Seq, o.target, resp.Status)
	}
	status, text := resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
	if status == "" { // a trailers-only answer: the status comes with the headers
		status, text = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	if t, err := url.PathUnescape(text); err == nil {
		text = t
	}
	switch status {
	case "0":
	case "":
		return fmt.Errorf("can't export window %d to %s: no gRPC status in the answer", w.Seq, o.target)
	default:
		return fmt.Errorf("can't export window %d to %s: gRPC status %s: %s", w.Seq, o.target, status, text)
	}
	rejected, why, err := partialSuccess(body)
	if err != nil {
		return fmt.Errorf("window %d to %s: %w", w.Seq, o.target, err)
	}
	if rejected > 0 {
		return fmt.Errorf("%s rejected %d profiles of window %d: %s", o.target, rejected, w.Seq, why)
	}
	return nil
}

// Close releases the connection.
func (o *OTLPGRPC) Close() error {
	o.tr.CloseIdleConnections()
	return nil
}

// grpcFrame is one uncompressed gRPC message: flag 0, its length (big
// endian), the message.
func grpcFrame(msg []byte) []byte {
	b := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:5], uint32(len(msg)))
	copy(b[5:], msg)
	return b
}

var errAnswer = errors.New("malformed ExportProfilesServiceResponse")

// partialSuccess reads an ExportProfilesServiceResponse in its gRPC frame
// (an empty body: none): partial_success (field 1) {rejected_profiles
// (1, int64), error_message (2, string)}; other fields are skipped.
func partialSuccess(b []byte) (rejected int64, why string, err error) {
	if len(b) == 0 {
		return 0, "", nil
	}
	if len(b) < 5 || b[0] != 0 {
		return 0, "", fmt.Errorf("%w: not an uncompressed gRPC message", errAnswer)
	}
	n := binary.BigEndian.Uint32(b[1:5])
	if uint64(n) != uint64(len(b)-5) {
		return 0, "", fmt.Errorf("%w: %d bytes announced, %d sent", errAnswer, n, len(b)-5)
	}
	err = protoFields(b[5:], func(num int, wire int, v uint64, data []byte) error {
		if num != 1 || wire != 2 {
			return nil
		}
		return protoFields(data, func(num int, wire int, v uint64, data []byte) error {
			switch {
			case num == 1 && wire == 0:
				rejected = int64(v)
			case num == 2 && wire == 2:
				why = string(data)
			}
			return nil
		})
	})
	return rejected, why, err
}

// protoFields walks a protobuf message's fields: fn gets each field's
// number, wire type, and its value (varint) or bytes (length-delimited).
func protoFields(b []byte, fn func(num, wire int, v uint64, data []byte) error) error {
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return fmt.Errorf("%w: bad field key", errAnswer)
		}
		b = b[n:]
		num, wire := int(key>>3), int(key&7)
		var v uint64
		var data []byte
		switch wire {
		case 0:
			if v, n = binary.Uvarint(b); n <= 0 {
				return fmt.Errorf("%w: bad varint in field %d", errAnswer, num)
			}
			b = b[n:]
		case 1, 5:
			size := 8
			if wire == 5 {
				size = 4
			}
			if len(b) < size {
				return fmt.Errorf("%w: field %d cut short", errAnswer, num)
			}
			b = b[size:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return fmt.Errorf("%w: field %d's length", errAnswer, num)
			}
			data, b = b[n:n+int(l)], b[n+int(l):]
		default:
			return fmt.Errorf("%w: wire type %d in field %d", errAnswer, wire, num)
		}
		if err := fn(num, wire, v, data); err != nil {
			return err
		}
	}
	return nil
}
