// outbox-router console: refreshes the page's main part every two seconds, sends the
// credential kept in this tab's session storage as a header (never a cookie), and
// carries out the actions of the page's forms. No library; served by the binary.
"use strict";

const KEY = "outbox-router.token";
const REFRESH_MS = 2000;

function token() {
  return sessionStorage.getItem(KEY) || "";
}

function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (token()) h["Authorization"] = "Bearer " + token();
  return h;
}

function say(text, bad) {
  const who = document.getElementById("who");
  who.textContent = text;
  who.className = bad ? "bad" : "";
}

async function whoami() {
  try {
    const r = await fetch("/api/v1/whoami", { headers: headers() });
    const body = await r.json();
    if (r.ok) {
      say("reading as " + body.name + " (" + body.access + ")", false);
    } else if (token() && r.status === 401) {
      // A refused credential is not sent again with every refresh.
      sessionStorage.removeItem(KEY);
      say((body.error || r.statusText) + " (forgotten)", true);
    } else {
      say(body.error || r.statusText, true);
    }
  } catch (e) {
    say("the router does not answer: " + e, true);
  }
}

async function refresh(force) {
  // A page that costs something to make (an event lookup) is made once, and again
  // after an action that changes it.
  if (!force && document.getElementById("main").dataset.refresh === "off") return;
  try {
    const query = location.search ? location.search + "&fragment=1" : "?fragment=1";
    const r = await fetch(location.pathname + query, { headers: headers() });
    if (r.ok) {
      const main = document.getElementById("main");
      // Forms being filled in are not refreshed away.
      if (!main.contains(document.activeElement) || document.activeElement === document.body) {
        main.innerHTML = await r.text();
      }
    } else {
      const body = await r.json().catch(() => ({}));
      say(body.error || r.statusText, true);
    }
  } catch (e) {
    say("the router does not answer: " + e, true);
  }
}

async function act(form) {
  const out = document.getElementById("outcome");
  const data = Object.fromEntries(new FormData(form).entries());
  out.textContent = "…";
  try {
    const r = await fetch(form.getAttribute("action"), {
      method: "POST",
      headers: headers({ "Content-Type": "application/json" }),
      body: JSON.stringify(data),
    });
    const body = await r.json().catch(() => ({}));
    out.textContent = r.ok ? (body.outcome || "done") : (body.error || r.statusText);
    out.className = r.ok ? "good" : "bad";
    if (r.ok) form.reset();
  } catch (e) {
    out.textContent = "the router does not answer: " + e;
    out.className = "bad";
  }
  document.activeElement.blur();
  refresh(form.dataset.reload !== undefined);
}

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("signin");
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const field = document.getElementById("token");
    sessionStorage.setItem(KEY, field.value.trim());
    field.value = "";
    whoami();
    refresh();
  });
  document.getElementById("signout").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    whoami();
    refresh();
  });
  document.addEventListener("submit", (e) => {
    if (e.target.classList && e.target.classList.contains("action")) {
      e.preventDefault();
      act(e.target);
    }
  });
  whoami();
  refresh();
  setInterval(() => refresh(false), REFRESH_MS);
});
