package compact

import (
	"bytes"
	"encoding/json"
	"testing"
)

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}
