// Package browser drives a headless Chromium through the dashboard's pages, for the browser
// tests and `make screenshot`: it starts the browser with the flags this project's machines
// need, and clicks the dashboard's action buttons as a person would.
package browser

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
)

// Start starts the Chromium at execPath, headless, with a fresh profile in a temporary
// directory, and returns a context whose chromedp actions run in one tab. cancel closes the
// browser and removes the profile.
func Start(ctx context.Context, execPath string, width, height int) (tab context.Context, cancel func(), err error) {
	profile, err := os.MkdirTemp("", "timeoutmill-chromium-")
	if err != nil {
		return nil, nil, err
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(execPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(width, height),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tab, cancelTab := chromedp.NewContext(allocCtx)
	cancel = func() {
		cancelTab()
		cancelAlloc()
		_ = os.RemoveAll(profile)
	}
	if err := chromedp.Do(tab); err != nil { // starts the browser
		cancel()
		return nil, nil, fmt.Errorf("starting %s: %w", execPath, err)
	}
	return tab, cancel, nil
}

// row selects the list row or detail card of the timeout with id.
func row(id string) string { return fmt.Sprintf(`[data-row-id=%q]`, id) }

// SetToken types the actions token into the page's token field.
func SetToken(token string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		clear(`#token`),
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
	)
}

// Act clicks the action button ("cancel", "deliver" or "reschedule") of the timeout with id on
// the current page, confirms it in the dialog (a reschedule to in from now, a duration such as
// "10m"), and returns the result the page then shows, or an error with the refusal the dialog
// shows.
func Act(ctx context.Context, id, action, in string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	button := chromedp.CSS(row(id) + ` button[data-action="` + action + `"]`)
	steps := []chromedp.Action[chromedp.Void]{
		hide(`#toast`), // the result of an earlier action may still show
		chromedp.WaitVisible(button),
		chromedp.Click(button),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-yes`)),
	}
	if action == "reschedule" {
		steps = append(steps,
			clear(`#confirm-in`),
			chromedp.SendKeys(chromedp.CSS(`#confirm-in`), in))
	}
	steps = append(steps, chromedp.Click(chromedp.CSS(`#confirm-yes`)))
	if err := chromedp.Do(ctx, steps...); err != nil {
		return "", fmt.Errorf("%s %s: %w", action, id, err)
	}
	shown, err := chromedp.Run(ctx, chromedp.Poll[string](`(function(){
		const toast = document.getElementById("toast"), refused = document.getElementById("confirm-error");
		if (!toast.hidden) return "ok " + toast.textContent;
		if (!refused.hidden) return "refused " + refused.textContent;
		return "";
	})()`, chromedp.WithPollingTimeout(Timeout)))
	if err != nil {
		return "", fmt.Errorf("%s %s: waiting for its result: %w", action, id, err)
	}
	if text, ok := strings.CutPrefix(shown, "ok "); ok {
		return text, nil
	}
	return "", fmt.Errorf("%s %s: %s", action, id, strings.TrimPrefix(shown, "refused "))
}

// hide hides the element that selector finds.
func hide(selector string) chromedp.Action[chromedp.Void] {
	return evalVoid(fmt.Sprintf(`(function(){document.querySelector(%q).hidden = true; return true})()`, selector))
}

// clear empties the input that selector finds, as selecting its text and deleting it would.
func clear(selector string) chromedp.Action[chromedp.Void] {
	return evalVoid(fmt.Sprintf(`(function(){const e=document.querySelector(%q); e.value=""; `+
		`e.dispatchEvent(new Event("input")); return true})()`, selector))
}

func evalVoid(js string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](js)(ctx, t)
		return err
	})
}

// Timeout bounds one browser step on a busy machine.
const Timeout = 60 * time.Second
