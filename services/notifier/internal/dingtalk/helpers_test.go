package dingtalk

import "encoding/json"

func jsonSize(v any) (int, error) {
	b, err := json.Marshal(v)
	return len(b), err
}
