// Command loadgen drives red_http.py for scripts/bench-red.sh: closed-loop
// keep-alive HTTP/1.1 GETs on loopback for a fixed time; it prints the
// completed requests per second and the client-side p50/p99.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"
)

func main() {
	port := flag.Int("port", 0, "server port on 127.0.0.1")
	conns := flag.Int("conns", 4, "keep-alive connections (one worker each)")
	dur := flag.Duration("d", 5*time.Second, "how long")
	path := flag.String("path", "/fast/1", "request path")
	flag.Parse()
	if *port <= 0 {
		fmt.Fprintln(os.Stderr, "loadgen: -port is required")
		os.Exit(2)
	}
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	end := time.Now().Add(*dur)
	start := time.Now()
	for i := 0; i < *conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
			if err != nil {
				fmt.Fprintln(os.Stderr, "loadgen:", err)
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			var mine []time.Duration
			for time.Now().Before(end) {
				t0 := time.Now()
				if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", *path); err != nil {
					break
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					break
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	if len(lat) == 0 {
		fmt.Fprintln(os.Stderr, "loadgen: no request completed")
		os.Exit(1)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(f float64) float64 { return float64(lat[int(f*float64(len(lat)-1))].Microseconds()) / 1000 }
	fmt.Printf("%.1f req/s %d requests p50 %.2f ms p99 %.2f ms\n", float64(len(lat))/el, len(lat), q(0.5), q(0.99))
}
