package serve_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/flextensor-go/flextensor/models/chat"
)

// findBrowser looks for Chromium or Chrome: $CHROME_PATH, then the usual
// command names.
func findBrowser() string {
	if p := os.Getenv("CHROME_PATH"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestChatPageInBrowser drives the chat page at / in headless Chromium
// (through the DevTools protocol): two turns of a conversation typed and
// sent as a person would, each reply streamed into the page and equal to
// what the model gives for that conversation alone. Skipped when no
// Chromium or Chrome is installed (apt-get install chromium).
func TestChatPageInBrowser(t *testing.T) {
	browser := findBrowser()
	if browser == "" {
		t.Skip("no Chromium or Chrome found (set CHROME_PATH or apt-get install chromium): skipping the browser test of the chat page")
	}
	ts := newServer(t, serverConfig{})
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	defer cancel()

	err := chromedp.Do(ctx,
		chromedp.Navigate(ts.http.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#input")),
		chromedp.Poll[chromedp.Void](`document.getElementById("model").textContent === "tiny"`, chromedp.WithPollingTimeout(20*time.Second)),
		chromedp.SetValue(chromedp.CSS("#temperature"), "0"),
		chromedp.SetValue(chromedp.CSS("#max-tokens"), "8"),
	)
	if err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	conv := []chat.Message{}
	for turn, text := range []string{"Hello browser", "And again"} {
		err := chromedp.Do(ctx,
			chromedp.SendKeys(chromedp.CSS("#input"), text),
			chromedp.Click(chromedp.CSS("#send")),
			chromedp.Poll[chromedp.Void](`(() => { const a = document.querySelectorAll(".msg.assistant, .msg.error");
				return a.length === `+strconv.Itoa(turn+1)+` && a[a.length-1].dataset.done === "true"; })()`, chromedp.WithPollingTimeout(90*time.Second)),
		)
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(".msg.assistant").length`))
		if err != nil {
			t.Fatal(err)
		}
		last, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => { const a = document.querySelectorAll(".msg"); const l = a[a.length-1];
			return [l.textContent, l.dataset.finish, document.getElementById("status").textContent]; })()`))
		if err != nil {
			t.Fatal(err)
		}
		reply, finish, status := last[0], last[1], last[2]
		if n != turn+1 {
			t.Fatalf("turn %d: %d assistant messages (an error? %q, status %q)", turn, n, reply, status)
		}
		conv = append(conv, chat.Message{Role: "user", Content: text})
		want := refText(reference(t, chatPromptIDs(t, conv...), 8, greedy, 0))
		if reply != want {
			t.Errorf("turn %d: the page shows %q, want the model's %q", turn, reply, want)
		}
		if finish != "length" && finish != "stop" {
			t.Errorf("turn %d: finish %q", turn, finish)
		}
		conv = append(conv, chat.Message{Role: "assistant", Content: reply})
		t.Logf("turn %d: %q (%s; status %q)", turn, reply, finish, status)
	}
	if path := os.Getenv("SERVE_SCREENSHOT"); path != "" {
		if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
			os.WriteFile(path, png, 0o644)
		}
	}
}
