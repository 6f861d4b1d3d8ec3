package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// canonicalize rewrites the keys of a decoded YAML document to the exact JSON
// names of the target struct, matching case-insensitively (the seed writes
// both `leaseLockName` and `LeaderElect`), and reports every key the struct
// does not have. Map-typed fields keep their keys as written.
func canonicalize(v any, t reflect.Type, path string, errs *Errors) any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		// Values with their own decoding (durations) are checked here, where
		// the field path is known; json.Unmarshal would report them without it.
		raw, _ := json.Marshal(v)
		if err := reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(raw); err != nil {
			errs.add(path, "%v", err)
		}
		return v
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return v // json.Unmarshal reports the type mismatch with its field
		}
		fields := jsonFields(t)
		out := make(map[string]any, len(m))
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			f, ok := fields[strings.ToLower(k)]
			if !ok {
				errs.add(join(path, k), "unknown key (known keys: %s)", knownKeys(fields))
				continue
			}
			if _, dup := out[f.name]; dup {
				errs.add(join(path, k), "duplicate key (also written as %q with other letter case)", f.name)
				continue
			}
			out[f.name] = canonicalize(m[k], f.typ, join(path, f.name), errs)
		}
		return out
	case reflect.Slice:
		s, ok := v.([]any)
		if !ok {
			return v
		}
		for i := range s {
			s[i] = canonicalize(s[i], t.Elem(), fmt.Sprintf("%s[%d]", path, i), errs)
		}
		return s
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return v
		}
		for k := range m {
			m[k] = canonicalize(m[k], t.Elem(), join(path, k), errs)
		}
		return m
	}
	return v
}

type field struct {
	name string
	typ  reflect.Type
}

func jsonFields(t reflect.Type) map[string]field {
	out := map[string]field{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[strings.ToLower(name)] = field{name: name, typ: f.Type}
	}
	return out
}

func knownKeys(fields map[string]field) string {
	names := make([]string, 0, len(fields))
	for _, f := range fields {
		names = append(names, f.name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

var unmarshalerType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
