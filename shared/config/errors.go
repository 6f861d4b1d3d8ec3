package config

import (
	"fmt"
	"strings"
)

// FieldError names the configuration field that is wrong, by its YAML path
// (e.g. autoCordon.minPods), so the operator can fix it without reading code.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Errors is every problem found in one configuration file.
type Errors []*FieldError

func (e Errors) Error() string {
	msgs := make([]string, len(e))
	for i, fe := range e {
		msgs[i] = fe.Error()
	}
	return "invalid configuration: " + strings.Join(msgs, "; ")
}

// add records a problem with the field at path.
func (e *Errors) add(path, format string, args ...any) {
	*e = append(*e, &FieldError{Field: path, Msg: fmt.Sprintf(format, args...)})
}

// join builds a field path.
func join(parent, child string) string {
	if parent == "" {
		return child
	}
	return parent + "." + child
}
