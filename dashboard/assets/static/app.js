// timeoutmill dashboard: the action buttons. Each asks for confirmation, then POSTs to the JSON
// API with the token in the Authorization header (kept in this tab's sessionStorage only), and
// shows the result. Nothing else here: the pages are rendered by the server.
"use strict";
(function () {
  const base = document.body.dataset.base || "./";
  const tokenInput = document.getElementById("token");
  const tokenState = document.getElementById("token-state");
  const dialog = document.getElementById("confirm");
  const toast = document.getElementById("toast");
  const key = "timeoutmill-token";

  function token() { return sessionStorage.getItem(key) || ""; }
  function showTokenState() {
    if (tokenState) tokenState.textContent = token() ? "set for this tab" : "";
  }
  if (tokenInput) {
    tokenInput.value = token();
    tokenInput.addEventListener("input", function () {
      const v = tokenInput.value.trim();
      if (v) sessionStorage.setItem(key, v); else sessionStorage.removeItem(key);
      showTokenState();
    });
    tokenInput.form.addEventListener("submit", function (e) { e.preventDefault(); });
    showTokenState();
  }

  let toastTimer = 0;
  function say(text, bad) {
    toast.textContent = text;
    toast.className = bad ? "bad" : "";
    toast.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(function () { toast.hidden = true; }, bad ? 9000 : 5000);
  }

  const words = {
    cancel: ["Cancel timeout", "It is deleted and never delivered.", "Cancel it"],
    deliver: ["Deliver now", "It is delivered to its destination now instead of at its due time.", "Deliver now"],
    reschedule: ["Reschedule timeout", "It keeps its id and message; only its due time moves.", "Reschedule"],
    replay: ["Replay parked timeout", "It is pending again and delivered at once; if its cause is not fixed, it parks again.", "Replay"],
    delete: ["Delete parked timeout", "It is deleted and never delivered.", "Delete it"],
  };
  const done = { cancel: "Cancelled", deliver: "Delivering now:", reschedule: "Rescheduled", replay: "Replayed", delete: "Deleted" };

  function rowsOf(id) {
    return Array.from(document.querySelectorAll("[data-row-id]")).filter(function (el) { return el.dataset.rowId === id; });
  }

  function ask(action, id) {
    const w = words[action];
    document.getElementById("confirm-title").textContent = w[0];
    document.getElementById("confirm-text").textContent = id + " — " + w[1];
    document.getElementById("confirm-yes").textContent = w[2];
    document.getElementById("confirm-when").hidden = action !== "reschedule";
    document.getElementById("confirm-error").hidden = true;
    dialog.dataset.action = action;
    dialog.dataset.id = id;
    dialog.showModal();
  }

  function body(action) {
    if (action !== "reschedule") return null;
    const at = document.getElementById("confirm-at").value;
    if (at) return JSON.stringify({ at: at.length === 16 ? at + ":00Z" : at + "Z" });
    return JSON.stringify({ in: document.getElementById("confirm-in").value.trim() });
  }

  async function act(action, id) {
    const headers = { "Authorization": "Bearer " + token() };
    const b = body(action);
    if (b) headers["Content-Type"] = "application/json";
    let res, data;
    try {
      res = await fetch(base + "api/timeouts/" + encodeURIComponent(id) + "/" + action, {
        method: "POST", headers: headers, body: b, credentials: "omit", cache: "no-store",
      });
      data = await res.json();
    } catch (e) {
      return { ok: false, text: "The request failed: " + e };
    }
    if (!res.ok) {
      const err = (data && data.error) || {};
      return { ok: false, text: (err.code || res.status) + ": " + (err.message || "failed") };
    }
    return { ok: true, data: data };
  }

  function applied(action, id, data) {
    rowsOf(id).forEach(function (el) {
      if (action === "cancel" || action === "deliver" || action === "replay" || action === "delete") {
        el.classList.add("gone");
        el.querySelectorAll("button.act").forEach(function (btn) { btn.disabled = true; });
        const rel = el.querySelector(".rel");
        if (rel) rel.textContent = { cancel: "cancelled", deliver: "delivering", replay: "replayed", delete: "deleted" }[action];
      } else if (data.due) {
        el.classList.add("changed");
        const due = el.querySelector(".due-cell");
        if (due) due.textContent = data.due.replace("T", " ").replace("Z", "");
        const rel = el.querySelector(".rel");
        if (rel) rel.textContent = "rescheduled";
      }
    });
  }

  document.addEventListener("click", function (e) {
    const btn = e.target.closest("button.act");
    if (!btn) return;
    if (!token()) {
      say("Paste the actions token at the top of the page first.", true);
      if (tokenInput) tokenInput.focus();
      return;
    }
    ask(btn.dataset.action, btn.dataset.id);
  });

  if (dialog) {
    document.getElementById("confirm-no").addEventListener("click", function () { dialog.close(); });
    document.getElementById("confirm-form").addEventListener("submit", async function (e) {
      e.preventDefault();
      const action = dialog.dataset.action, id = dialog.dataset.id;
      const yes = document.getElementById("confirm-yes");
      yes.disabled = true;
      const r = await act(action, id);
      yes.disabled = false;
      if (!r.ok) {
        const err = document.getElementById("confirm-error");
        err.textContent = r.text;
        err.hidden = false;
        return;
      }
      dialog.close();
      applied(action, id, r.data);
      say(done[action] + " " + id + (r.data.due ? " → due " + r.data.due : ""), false);
    });
  }
})();
