package harness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"
)

// ControlPlaneOption adjusts how StartControlPlane runs kube-apiserver.
type ControlPlaneOption func(*cpOptions)

type cpOptions struct {
	audit bool
}

// WithAuditLog makes kube-apiserver write an audit log (JSON lines, file
// ControlPlane.AuditLog) of every write (create, update, patch, delete,
// deletecollection) of nodes, pods, pods/eviction, events and leases, at the
// end of each request (stage ResponseComplete, or Panic). Pods' creates and
// deletes and every node write are logged with their request and response
// objects (RequestResponse: a DELETE's answer is the deleted pod, with its
// UID, owners and node; a node write's answer is the node as it stands after
// it, resourceVersion included); pod evictions with their request
// (Request); the rest (pod updates and status, events, leases) as Metadata.
// The log is the API server's record of who wrote what, and when: a soak's
// checker reads it with ReadAuditLog. It survives StartAPIServer (appended).
func WithAuditLog() ControlPlaneOption { return func(o *cpOptions) { o.audit = true } }

// auditPolicy is the audit.k8s.io/v1 Policy of WithAuditLog. The first
// matching rule wins.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  verbs: ["get", "list", "watch"]
- level: RequestResponse
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
  resources:
  - group: ""
    resources: ["nodes", "nodes/status"]
- level: RequestResponse
  verbs: ["create", "delete", "deletecollection"]
  resources:
  - group: ""
    resources: ["pods"]
- level: Request
  verbs: ["create"]
  resources:
  - group: ""
    resources: ["pods/eviction"]
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
  resources:
  - group: ""
    resources: ["pods", "pods/status", "events"]
  - group: "events.k8s.io"
    resources: ["events"]
  - group: "coordination.k8s.io"
    resources: ["leases"]
- level: None
`

// auditArgs writes the policy into dir and returns, for a log in logFile, kube-apiserver's flags
// for it.
func auditArgs(dir, logFile string) ([]string, string, error) {
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, "", err
	}
	return []string{"--audit-policy-file", policy, "--audit-log-path", logFile, "--audit-log-format", "json",
		"--audit-log-mode", "blocking", "--audit-log-maxsize", "0", "--audit-log-maxbackup", "0"}, logFile, nil
}

// AuditEntry is one request of the audit log, as a checker needs it.
type AuditEntry struct {
	AuditID     string
	User        string // user.username, e.g. system:serviceaccount:opswire:opswire-cleanup
	UserAgent   string
	Verb        string // create, update, patch, delete, …
	Resource    string // pods, nodes, events, leases
	Subresource string // status, eviction, or empty
	Namespace   string
	Name        string
	// UIDPrecondition and RVPrecondition are a DELETE's preconditions
	// (empty when it had none or the request body was not logged).
	UIDPrecondition string
	RVPrecondition  string
	// GracePeriod is a DELETE's gracePeriodSeconds (nil: not given).
	GracePeriod *int64
	Code        int // responseStatus.code
	Received    time.Time
	Completed   time.Time // stageTimestamp
	// Request and Response are the logged objects (nil below their level).
	Request  json.RawMessage
	Response json.RawMessage
}

// Succeeded reports a 2xx answer.
func (e AuditEntry) Succeeded() bool { return e.Code >= 200 && e.Code < 300 }

// AuditObject is the part of a logged object (a Node or a Pod) a checker
// reads: metadata, a pod's node and owners, a node's spec and conditions.
type AuditObject struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name              string            `json:"name"`
		Namespace         string            `json:"namespace"`
		UID               string            `json:"uid"`
		ResourceVersion   string            `json:"resourceVersion"`
		Labels            map[string]string `json:"labels"`
		Annotations       map[string]string `json:"annotations"`
		DeletionTimestamp *time.Time        `json:"deletionTimestamp"`
		Finalizers        []string          `json:"finalizers"`
		OwnerReferences   []struct {
			Kind       string `json:"kind"`
			Name       string `json:"name"`
			Controller *bool  `json:"controller"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
	Spec struct {
		NodeName      string `json:"nodeName"`
		Unschedulable bool   `json:"unschedulable"`
		Taints        []struct {
			Key    string `json:"key"`
			Effect string `json:"effect"`
		} `json:"taints"`
	} `json:"spec"`
	Status struct {
		Phase      string `json:"phase"`
		Reason     string `json:"reason"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
	} `json:"status"`
}

// RV is the object's resourceVersion as a number (etcd's revision: one
// order for every object of the cluster), 0 if absent.
func (o *AuditObject) RV() int64 {
	v, _ := strconv.ParseInt(o.Metadata.ResourceVersion, 10, 64)
	return v
}

// Ready is the status of the node's Ready condition ("" without one).
func (o *AuditObject) Ready() string {
	for _, c := range o.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status
		}
	}
	return ""
}

// HasTaint reports a taint with key.
func (o *AuditObject) HasTaint(key string) bool {
	for _, tn := range o.Spec.Taints {
		if tn.Key == key {
			return true
		}
	}
	return false
}

// ControllerKind is the kind of the pod's controlling owner ("" if none).
func (o *AuditObject) ControllerKind() string {
	for _, r := range o.Metadata.OwnerReferences {
		if r.Controller != nil && *r.Controller {
			return r.Kind
		}
	}
	return ""
}

// ResponseObject decodes the logged response as an object; nil when there
// is none or it is a Status.
func (e AuditEntry) ResponseObject() *AuditObject {
	if len(e.Response) == 0 {
		return nil
	}
	var o AuditObject
	if json.Unmarshal(e.Response, &o) != nil || o.Kind == "Status" || o.Metadata.Name == "" {
		return nil
	}
	return &o
}

// rawAuditEvent is the audit.k8s.io/v1 Event, the fields ReadAuditLog keeps.
type rawAuditEvent struct {
	AuditID   string `json:"auditID"`
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestObject            json.RawMessage `json:"requestObject"`
	ResponseObject           json.RawMessage `json:"responseObject"`
	RequestReceivedTimestamp time.Time       `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time       `json:"stageTimestamp"`
}

// ReadAuditLog parses an audit log file (JSON lines) into its completed
// requests, ordered by stageTimestamp. A torn last line (the API server
// killed mid-write) is skipped; any other unreadable line is an error.
func ReadAuditLog(path string) ([]AuditEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []AuditEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	line, bad := 0, 0
	for sc.Scan() {
		line++
		var ev rawAuditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			bad = line
			continue
		}
		if bad != 0 {
			return nil, fmt.Errorf("%s: line %d is not an audit event", path, bad)
		}
		if ev.Stage != "ResponseComplete" && ev.Stage != "Panic" {
			continue
		}
		e := AuditEntry{AuditID: ev.AuditID, User: ev.User.Username, UserAgent: ev.UserAgent, Verb: ev.Verb,
			Received: ev.RequestReceivedTimestamp, Completed: ev.StageTimestamp,
			Request: ev.RequestObject, Response: ev.ResponseObject}
		if ev.ObjectRef != nil {
			e.Resource, e.Subresource = ev.ObjectRef.Resource, ev.ObjectRef.Subresource
			e.Namespace, e.Name = ev.ObjectRef.Namespace, ev.ObjectRef.Name
		}
		if ev.ResponseStatus != nil {
			e.Code = ev.ResponseStatus.Code
		}
		if e.Verb == "delete" && len(e.Request) > 0 {
			var opts struct {
				GracePeriodSeconds *int64 `json:"gracePeriodSeconds"`
				Preconditions      *struct {
					UID             *string `json:"uid"`
					ResourceVersion *string `json:"resourceVersion"`
				} `json:"preconditions"`
			}
			if json.Unmarshal(e.Request, &opts) == nil {
				e.GracePeriod = opts.GracePeriodSeconds
				if p := opts.Preconditions; p != nil {
					if p.UID != nil {
						e.UIDPrecondition = *p.UID
					}
					if p.ResourceVersion != nil {
						e.RVPrecondition = *p.ResourceVersion
					}
				}
			}
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Completed.Before(out[j].Completed) })
	return out, nil
}
