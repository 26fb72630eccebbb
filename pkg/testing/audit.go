package testing

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// auditPolicy records every request once its response is known, at the
// Metadata level: who asked, for what, and the answer's code; never a
// request or response body (Secrets' values stay out of the log).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

// AuditEvent is one request to an API server, as its audit log records
// it (the audit.k8s.io/v1 Event fields that tests read).
type AuditEvent struct {
	// AuditID is the same for every stage of one request.
	AuditID string `json:"auditID"`
	// Stage is ResponseStarted (a watch's, once it runs),
	// ResponseComplete or Panic.
	Stage string `json:"stage"`
	// Verb is the request's: get, list, watch, create, update, patch,
	// delete, deletecollection.
	Verb string `json:"verb"`
	// RequestURI is the path and query asked for.
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"user"`
	// ObjectRef names what was asked for; nil for a request that is not
	// for a resource (/healthz, /api, discovery).
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
		APIVersion  string `json:"apiVersion"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code    int32  `json:"code"`
		Message string `json:"message"`
	} `json:"responseStatus"`
}

// Code is the response's HTTP status code, 0 if the event has none.
func (e AuditEvent) Code() int32 {
	if e.ResponseStatus == nil {
		return 0
	}
	return e.ResponseStatus.Code
}

// auditFlags turns the audit log on, in the control plane's directory.
func (c *ControlPlane) auditFlags() (map[string]string, error) {
	policy := filepath.Join(c.dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, fmt.Errorf("control plane %q: writing its audit policy: %w", c.name, err)
	}
	return map[string]string{
		"audit-policy-file": policy,
		"audit-log-path":    c.auditLogPath(),
		"audit-log-format":  "json",
		// Every event written before the response goes out: a test that
		// reads the log after a request finds it there.
		"audit-log-mode": "blocking",
	}, nil
}

func (c *ControlPlane) auditLogPath() string { return filepath.Join(c.dir, "audit.log") }

// ErrNoAuditLog is returned by AuditEvents for a control plane started
// without an audit log (see Options.HostAuditLog).
var ErrNoAuditLog = errors.New("this control plane keeps no audit log: set Options.HostAuditLog")

// AuditEvents reads the API server's audit log so far (the host's, with
// Options.HostAuditLog), across restarts of the API server, in the order
// the server wrote it.
func (c *ControlPlane) AuditEvents() ([]AuditEvent, error) {
	f, err := os.Open(c.auditLogPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoAuditLog
	}
	if err != nil {
		return nil, fmt.Errorf("control plane %q: opening its audit log: %w", c.name, err)
	}
	defer f.Close()
	var events []AuditEvent
	scanner := bufio.NewScanner(f)
	scanner.Buffer(nil, 4<<20)
	for line := 1; scanner.Scan(); line++ {
		var e AuditEvent
		if err := json.Unmarshal(scanner.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("control plane %q: audit log line %d: %w", c.name, line, err)
		}
		events = append(events, e)
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("control plane %q: reading its audit log: %w", c.name, err)
	}
	return events, nil
}
