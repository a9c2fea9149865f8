package jvm

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"time"
)

// VerifyWait is how long Verify keeps asking: the agent starts its HTTP
// server in agentmain, but its first scrape of the MBeans can take a while.
var VerifyWait = 15 * time.Second

// sample is a Prometheus text-format sample line.
var sample = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? [-+0-9.eEinfINFaN]+( [0-9]+)?$`)

// Verify asks http://127.0.0.1:<port><path> until it answers with
// Prometheus text or wait runs out.
func Verify(port int, path string, wait time.Duration) Result {
	url := "http://127.0.0.1:" + strconv.Itoa(port) + path
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(wait)
	var last string
	for {
		ok, why := scrape(client, url)
		if ok {
			return Result{Result: Serving, Serving: true, Message: url + " answers with Prometheus metrics"}
		}
		last = why
		if time.Now().After(deadline) {
			return Result{Result: NotServing, Reason: ReasonMetricsNotServed, Message: fmt.Sprintf("%s: %s", url, last), Retry: true}
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func scrape(client *http.Client, url string) (bool, string) {
	resp, err := client.Get(url)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, "HTTP " + resp.Status
	}
	s := bufio.NewScanner(io.LimitReader(resp.Body, 4<<20))
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		if sample.MatchString(s.Text()) {
			return true, ""
		}
	}
	return false, "the answer holds no Prometheus sample line"
}
