package teams

import "encoding/json"

func jsonLen(v any) (int, error) {
	b, err := json.Marshal(v)
	return len(b), err
}
