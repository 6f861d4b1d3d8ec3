// Package feishu is the Feishu/Lark custom-bot receiver: interactive cards
// (JSON 1.0) built from structs, kept under the 20 KB body limit, signed on
// every attempt, and every answer classified by its body code rather than the
// HTTP status, which Feishu sets to 200 for most errors.
// See docs/notifier.md and the Feishu custom-bot guide ("自定义机器人使用指南").
package feishu

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
)

// Sign computes Feishu's webhook signature: HMAC-SHA256 keyed with
// "<timestamp>\n<secret>" over an empty message, standard Base64. (DingTalk
// keys with the secret instead, a common cause of code 19021.)
func Sign(secret string, timestamp int64) string {
	h := hmac.New(sha256.New, []byte(strconv.FormatInt(timestamp, 10)+"\n"+secret))
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}
