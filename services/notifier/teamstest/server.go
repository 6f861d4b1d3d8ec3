// Package teamstest is a Teams Workflows-webhook server for tests. It checks
// what the Workflows trigger and Teams check, with their answers:
//
//   - the path names a workflow (404 {"error":{"code":"WorkflowNotFound"}})
//     and the sig query parameter matches (401 DirectApiAuthorizationRequired);
//   - Teams' webhook limits per workflow over sliding windows: 4 per second,
//     60 per 30 s, 100 per hour; more is 429 with Retry-After;
//   - the trigger's schema: type "message" and an attachments array
//     (400 TriggerInputSchemaMismatch);
//   - then, as Teams does after the 202: each attachment must be an
//     Adaptive Card (contentType, type AdaptiveCard, a version, TextBlocks
//     with text) and the message at most 28 KB. A card that fails is
//     answered 202 like any other (the real service fails the flow run
//     later, silently) but is recorded in Dropped, so tests see the loss.
package teamstest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/chattest"
)

// Limits.
const (
	MessageLimit = 28 * 1024
	ContentType  = "application/vnd.microsoft.card.adaptive"
)

// Windows are Teams' documented webhook rate limits.
var Windows = []struct {
	Period time.Duration
	Limit  int
}{{time.Second, 4}, {30 * time.Second, 60}, {time.Hour, 100}}

// Card is an accepted, posted card: its TextBlocks' texts in order.
type Card struct {
	Texts    []string
	Mentions bool // <at> or msteams.entities
}

var moreLine = regexp.MustCompile(`^…and (\d+) more$`)

// Table returns the rows listed (TextBlocks between the bold column line
// and the "…and N more" or footer line) and the "…and N more" count.
func (c Card) Table() (rows, more int) {
	in := false
	for i, t := range c.Texts {
		switch {
		case strings.HasPrefix(t, "**") && strings.Contains(t, " · "):
			in = true
		case moreLine.MatchString(t):
			more, _ = strconv.Atoi(moreLine.FindStringSubmatch(t)[1])
			in = false
		case in && i < len(c.Texts)-1:
			rows++
		}
	}
	return rows, more
}

// Text returns the card's texts, one per line.
func (c Card) Text() string { return strings.Join(c.Texts, "\n") }

// Server is the fake Workflows endpoint.
type Server struct {
	*httptest.Server
	Now func() time.Time

	mu      sync.Mutex
	flows   map[string]*flow
	cards   map[string][]Card
	dropped []string
	status  map[int]int
}

type flow struct {
	sig      string
	arrivals []time.Time
}

// NewServer starts a server.
func NewServer() *Server {
	s := &Server{Now: time.Now, flows: map[string]*flow{}, cards: map[string][]Card{}, status: map[int]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	return s
}

// AddWorkflow registers a workflow and returns its webhook URL.
func (s *Server) AddWorkflow(id, sig string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flows[id] = &flow{sig: sig}
	return s.URL + "/workflows/" + id + "/triggers/manual/paths/invoke?api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=" + sig
}

// Cards returns a workflow's posted cards.
func (s *Server) Cards(id string) []Card {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Card(nil), s.cards[id]...)
}

// Dropped returns why accepted requests would not have been posted.
func (s *Server) Dropped() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.dropped...)
}

// Count returns how many requests were answered with the status.
func (s *Server) Count(status int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status[status]
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	body := chattest.ReadBody(r, 4<<20)
	now := s.Now()
	s.mu.Lock()
	status, code, retryAfter := s.judge(r, body, now)
	s.status[status]++
	s.mu.Unlock()
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	if code == "" {
		w.WriteHeader(status)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": code}})
}

func (s *Server) judge(r *http.Request, body []byte, now time.Time) (int, string, int) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) != 6 || parts[0] != "workflows" || parts[2] != "triggers" || parts[5] != "invoke" {
		return http.StatusNotFound, "WorkflowNotFound", 0
	}
	id := parts[1]
	f, ok := s.flows[id]
	if !ok || r.Method != http.MethodPost {
		return http.StatusNotFound, "WorkflowNotFound", 0
	}
	if r.URL.Query().Get("sig") != f.sig {
		return http.StatusUnauthorized, "DirectApiAuthorizationRequired", 0
	}
	f.arrivals = chattest.Slide(f.arrivals, now, Windows[len(Windows)-1].Period)
	for _, win := range Windows {
		n := 0
		for _, t := range f.arrivals {
			if now.Sub(t) < win.Period {
				n++
			}
		}
		if n > win.Limit {
			return http.StatusTooManyRequests, "TooManyRequests", int(win.Period / time.Second)
		}
	}
	var m struct {
		Type        string `json:"type"`
		Attachments []struct {
			ContentType string `json:"contentType"`
			Content     struct {
				Type    string `json:"type"`
				Version string `json:"version"`
				Body    []struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"body"`
				MSTeams struct {
					Entities []json.RawMessage `json:"entities"`
				} `json:"msteams"`
			} `json:"content"`
		} `json:"attachments"`
	}
	if err := json.Unmarshal(body, &m); err != nil || m.Attachments == nil {
		return http.StatusBadRequest, "TriggerInputSchemaMismatch", 0
	}
	drop := func(why string) (int, string, int) {
		s.dropped = append(s.dropped, why)
		return http.StatusAccepted, "", 0
	}
	if m.Type != "message" || len(m.Attachments) == 0 {
		return drop("not a message with attachments")
	}
	if len(body) > MessageLimit {
		return drop("message over 28 KB: " + strconv.Itoa(len(body)) + " bytes")
	}
	for _, a := range m.Attachments {
		c := a.Content
		if a.ContentType != ContentType || c.Type != "AdaptiveCard" || c.Version == "" || len(c.Body) == 0 {
			return drop("attachment is not an Adaptive Card")
		}
		card := Card{Mentions: len(c.MSTeams.Entities) > 0}
		for _, e := range c.Body {
			if e.Type != "TextBlock" || e.Text == "" {
				return drop("unsupported or empty element " + e.Type)
			}
			card.Texts = append(card.Texts, e.Text)
			if strings.Contains(e.Text, "<at>") {
				card.Mentions = true
			}
		}
		s.cards[id] = append(s.cards[id], card)
	}
	return http.StatusAccepted, "", 0
}
