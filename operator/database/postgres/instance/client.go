package instance

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Bounds of the client's calls. A status is asked about once a second per
// instance, so it must answer within about one: the agent gives its
// server DefaultStatusTimeout of it, and a status that does not come in
// StatusTimeout is an unreachable instance.
//
// ConfirmTimeout bounds the second look at a primary about to be failed
// over (ConfirmPrimaryStatus): on a node whose cores are all busy, a
// server and agent that serve may take longer than StatusTimeout for
// seconds on end.
const (
	StatusTimeout  = time.Second
	ConfirmTimeout = 4 * time.Second
	PromoteTimeout = DefaultPromoteTimeout + 5*time.Second
	FenceTimeout   = DefaultStopTimeout + 20*time.Second
)

// ErrAlreadyPrimary is Promote's answer from an instance that was a
// primary before the call (refused: nothing was changed).
var ErrAlreadyPrimary = errors.New("the instance is already a primary")

// ErrFenced is Promote's answer from a fenced instance.
var ErrFenced = errors.New("the instance is fenced")

// Client is the operator's side of the channel, for one Database (its
// TLS configuration trusts that Database's CA only).
type Client struct {
	http *http.Client
	port int
}

// ClientOption changes a Client.
type ClientOption func(*http.Transport)

// WithDialContext dials through dial (tests dial 127.0.0.1 for a pod's
// name; the certificate is still checked against the name).
func WithDialContext(dial func(ctx context.Context, network, addr string) (net.Conn, error)) ClientOption {
	return func(t *http.Transport) { t.DialContext = dial }
}

// NewClient asks agents on port with tlsConfig (ClientTLSConfig).
func NewClient(tlsConfig *tls.Config, port int, opts ...ClientOption) *Client {
	// Each request's own bound (its context) limits its TLS handshake
	// too: a status gets StatusTimeout for all of it, the confirmation
	// and the actions longer. A dial is the kernel's work, quick on a
	// busy node: one that takes longer than StatusTimeout has no peer.
	t := &http.Transport{
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: ConfirmTimeout,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     time.Minute,
		ForceAttemptHTTP2:   false,
	}
	t.DialContext = (&net.Dialer{Timeout: StatusTimeout}).DialContext
	for _, o := range opts {
		o(t)
	}
	return &Client{http: &http.Client{Transport: t}, port: port}
}

// CloseIdleConnections closes the kept connections (a Database deleted,
// or its certificates renewed).
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// Status is the instance's status, from the agent at host (the pod's name
// under the headless Service, PodHosts(...)[0]), within StatusTimeout.
// An error means the agent was not reached or did not answer in time:
// the instance is unreachable.
func (c *Client) Status(ctx context.Context, host string) (Status, error) {
	return c.status(ctx, StatusTimeout, host, "/status")
}

// PrimaryStatus is Status, asked of the primary with the isolation
// check's bound (isolation.go): past isolationAfter without a question
// of the operator, the agent looks for isolation.
func (c *Client) PrimaryStatus(ctx context.Context, host string, isolationAfter time.Duration) (Status, error) {
	return c.status(ctx, StatusTimeout, host, primaryStatusPath(isolationAfter))
}

// primaryStatusPath is GET /status with the isolation check's bound.
func primaryStatusPath(isolationAfter time.Duration) string {
	return "/status?" + IsolationAfterParam + "=" + isolationAfter.String()
}

// ConfirmPrimaryStatus is PrimaryStatus within ConfirmTimeout, the
// server given a second less of it (WithinParam) so that its answer, not
// a timeout, comes back: the operator's last look at a primary it would
// otherwise fail over.
func (c *Client) ConfirmPrimaryStatus(ctx context.Context, host string, isolationAfter time.Duration) (Status, error) {
	path := primaryStatusPath(isolationAfter) + "&" + WithinParam + "=" + (ConfirmTimeout - time.Second).String()
	return c.status(ctx, ConfirmTimeout, host, path)
}

func (c *Client) status(ctx context.Context, timeout time.Duration, host, path string) (Status, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var st Status
	code, err := c.do(ctx, http.MethodGet, host, path, nil, &st)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("instance %s: status answered %d", host, code)
	}
	return st, err
}

// Promote promotes the standby at host and returns its status after.
// ErrAlreadyPrimary: it was a primary before (nothing changed); the
// caller that promoted it earlier (an operator restarted mid-failover)
// treats that as done.
//
// slots are the physical replication slots the agent makes first (those
// missing), so the other instances can stream from it once it is the
// primary (see slots.go).
func (c *Client) Promote(ctx context.Context, host string, slots ...string) (Status, error) {
	ctx, cancel := context.WithTimeout(ctx, PromoteTimeout)
	defer cancel()
	res, err := c.actionWith(ctx, http.MethodPost, host, "/promote", PromoteRequest{Slots: slots})
	return res.Status, err
}

// Fence stops the server at host and keeps it stopped (see the agent);
// done again on a fenced instance it changes nothing.
func (c *Client) Fence(ctx context.Context, host string) (ActionResult, error) {
	return c.action(ctx, FenceTimeout, http.MethodPost, host, "/fence")
}

// Unfence lifts the fence at host (the server starts again with its
// container's next start).
func (c *Client) Unfence(ctx context.Context, host string) (ActionResult, error) {
	return c.action(ctx, FenceTimeout, http.MethodDelete, host, "/fence")
}

// AnswerRole tells the server at host, which waits to start as the
// primary (Status.AwaitingRole), which pod is the primary: its own name
// lets it start, another's makes it read its role again.
func (c *Client) AnswerRole(ctx context.Context, host, primary string) error {
	ctx, cancel := context.WithTimeout(ctx, StatusTimeout)
	defer cancel()
	_, err := c.actionWith(ctx, http.MethodPost, host, "/role", RoleRequest{Primary: primary})
	return err
}

// RequestBaseBackup asks the primary at host for a base backup named name
// (a DatabaseBackup's name), which its archiver sidecar takes within
// about 5 s (basebackups.go); asked again, it is the same request. The
// instance's status then lists the backup, or its failure. With name
// empty it asks the sidecar to look at the archive now instead. An error
// says what the agent answered (409: host is not the primary).
func (c *Client) RequestBaseBackup(ctx context.Context, host, name string) error {
	ctx, cancel := context.WithTimeout(ctx, BaseBackupTimeout)
	defer cancel()
	_, err := c.actionWith(ctx, http.MethodPost, host, "/base-backups", BaseBackupRequest{Name: name})
	return err
}

// action sends a request without a body, within timeout.
func (c *Client) action(ctx context.Context, timeout time.Duration, method, host, path string) (ActionResult, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return c.actionWith(ctx, method, host, path, nil)
}

// actionWith sends body (nil: none) as JSON. 200, and 202 (a request
// left for the pod's sidecar), are success.
func (c *Client) actionWith(ctx context.Context, method, host, path string, body any) (ActionResult, error) {
	var res ActionResult
	code, err := c.do(ctx, method, host, path, body, &res)
	switch {
	case err != nil:
		return res, err
	case code == http.StatusOK || code == http.StatusAccepted:
		return res, nil
	case code == http.StatusConflict && res.Status.Fenced:
		return res, fmt.Errorf("instance %s: %w", host, ErrFenced)
	case code == http.StatusConflict && res.Status.Role == RolePrimary:
		return res, fmt.Errorf("instance %s: %w", host, ErrAlreadyPrimary)
	default:
		return res, fmt.Errorf("instance %s: %s %s answered %d: %s", host, method, path, code, res.Error)
	}
}

// do sends the request and decodes a JSON answer of any status code.
func (c *Client) do(ctx context.Context, method, host, path string, body, into any) (int, error) {
	url := "https://" + net.JoinHostPort(host, strconv.Itoa(c.port)) + path
	var reader io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		reader = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, reader)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("instance %s: %w", host, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("instance %s: %w", host, err)
	}
	if err := json.Unmarshal(answer, into); err != nil {
		return resp.StatusCode, fmt.Errorf("instance %s: %s %s answered %d, not JSON: %w", host, method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, nil
}
