package serve

import (
	_ "embed"
	"net/http"
)

// chatPage is the chat page served at /: it streams a conversation from
// /v1/chat/completions with fetch and shows it as it arrives.
//
//go:embed page/index.html
var chatPage []byte

func pageHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Write(chatPage)
}
