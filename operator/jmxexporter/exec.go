package jmxexporter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"
)

// maxOutput bounds what is kept of an exec's stdout and stderr: the helper
// prints one JSON line, and a misbehaving container must not fill memory.
const maxOutput = 256 << 10

// Executor runs a command in a container.
type Executor interface {
	Exec(ctx context.Context, pod *corev1.Pod, container string, cmd []string, stdin []byte, timeout time.Duration) (ExecResult, error)
}

// ExecResult is a finished command's output and exit code.
type ExecResult struct {
	Stdout, Stderr string
	ExitCode       int
}

// execError is an exec that did not run to an exit code.
type execError struct {
	container string
	cmd       string
	err       error
	stderr    string
}

func (e *execError) Error() string {
	msg := fmt.Sprintf("exec %q in container %s: %v", e.cmd, e.container, e.err)
	if e.stderr != "" {
		msg += ": " + e.stderr
	}
	return msg
}

func (e *execError) Unwrap() error { return e.err }

// PodExecutor execs through the API server, as kubectl exec does: over
// WebSocket, falling back to SPDY when the server or a proxy refuses the
// upgrade.
type PodExecutor struct {
	Config    *rest.Config
	Clientset kubernetes.Interface
}

// Exec runs cmd with stdin (may be nil) and waits for it, at most timeout.
func (p *PodExecutor) Exec(ctx context.Context, pod *corev1.Pod, container string, cmd []string, stdin []byte, timeout time.Duration) (ExecResult, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := p.Clientset.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdin: stdin != nil, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(p.Config, "GET", req.URL().String())
	if err != nil {
		return ExecResult{}, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(p.Config, "POST", req.URL())
	if err != nil {
		return ExecResult{}, err
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return ExecResult{}, err
	}
	stdout, stderr := &boundedBuffer{max: maxOutput}, &boundedBuffer{max: maxOutput}
	opts := remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr}
	if stdin != nil {
		// The command reads exactly len(stdin) bytes: kwok (and some
		// runtimes) never pass stdin's end on, so nothing may wait for EOF.
		opts.Stdin = bytes.NewReader(stdin)
	}
	err = exec.StreamWithContext(ctx, opts)
	res := ExecResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var exit utilexec.CodeExitError
	switch {
	case err == nil:
		return res, nil
	case errors.As(err, &exit):
		res.ExitCode = exit.Code
		return res, nil
	case ctx.Err() != nil:
		err = fmt.Errorf("timed out after %s: %w", timeout, ctx.Err())
	}
	return res, &execError{container: container, cmd: strings.Join(cmd, " "), err: err, stderr: strings.TrimSpace(res.Stderr)}
}

// boundedBuffer keeps the first max bytes written and drops the rest,
// never blocking the stream. The buffer is a field, not embedded: an
// embedded bytes.Buffer's ReadFrom would let io.Copy (which the exec
// stream uses) write past max. The mutex: an exec that times out returns
// while the stream's copy goroutine may still write.
type boundedBuffer struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	max       int
	truncated bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room < len(p) {
		b.truncated = true
		if room > 0 {
			b.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return b.buf.Write(p)
}

// String is what was kept so far.
func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var _ io.Writer = (*boundedBuffer)(nil)
