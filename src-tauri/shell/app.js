// The control window: buttons call the app's commands (the tray menu's
// actions), a poll keeps the status line and the buttons in line with the
// server, and the view below shows the server's own web UI (dashboard or
// chat, from the in-process server's URL) or the settings form.
const { invoke } = window.__TAURI__.core;
const { listen } = window.__TAURI__.event;

const $ = (id) => document.getElementById(id);
let view = window.__HEARTH_VIEW__ || "dashboard";
let last = null;

function say(text) { $("message").textContent = text || ""; }

async function act(name, args) {
  try {
    const result = await invoke(name, args);
    if (typeof result === "string") say(result);
    return result;
  } catch (e) {
    say(String(e));
    throw e;
  } finally {
    await refresh();
  }
}

function render(s) {
  const running = !["stopped", "failed"].includes(s.state);
  const busy = ["starting", "stopping"].includes(s.state);
  const line = $("status");
  line.dataset.state = s.state;
  line.textContent = statusLine(s);
  $("start").disabled = running;
  $("stop").disabled = !running || busy;
  const ready = ["ready", "serving"].includes(s.state) && s.url;
  $("settings").hidden = view !== "settings";
  const web = $("web");
  if (view !== "settings" && ready) {
    const src = s.url + "/" + (view === "chat" ? "#/chat" : "#/status");
    if (web.getAttribute("src") !== src) web.setAttribute("src", src);
    web.hidden = false;
    $("idle").hidden = true;
  } else {
    if (!ready && web.getAttribute("src")) web.removeAttribute("src");
    web.hidden = true;
    $("idle").hidden = view === "settings";
  }
  last = s;
}

function statusLine(s) {
  const parts = [s.state[0].toUpperCase() + s.state.slice(1)];
  if (s.model) parts.push(s.model);
  if (s.state === "loading" && s.loading_seconds != null) {
    const mb = s.loading_bytes ? ` of ${(s.loading_bytes / 1e6).toFixed(0)} MB` : "";
    parts.push(`loading ${s.loading_seconds.toFixed(0)} s${mb}`);
  }
  if (["ready", "serving"].includes(s.state)) parts.push(`${s.tokens_per_second.toFixed(1)} tok/s`);
  if (s.memory && s.memory.rss_bytes != null) parts.push(`${(s.memory.rss_bytes / 1e6).toFixed(0)} MB`);
  if (s.state === "failed" && s.error) parts.push(s.error);
  return parts.join(" · ");
}

async function refresh() {
  try { render(await invoke("status")); } catch (e) { say(String(e)); }
}

async function show(next) {
  view = next;
  if (view === "settings") await loadSettings();
  if (last) render(last);
}

async function loadSettings() {
  const s = await invoke("get_settings");
  const f = $("settings");
  f.model.value = s.model; f.port.value = s.port; f.lan.checked = s.lan;
  f.api_key.value = ""; f.api_key.placeholder = s.has_api_key ? "(set; type to replace)" : "";
  f.max_running.value = s.max_running; f.max_queue.value = s.max_queue;
  f.autostart.checked = s.autostart;
  $("settings-path").textContent = s.path || "(none)";
  if (s.error) say(s.error);
}

$("start").onclick = () => act("start").catch(() => {});
$("stop").onclick = () => act("stop").catch(() => {});
$("quit").onclick = () => act("quit").catch(() => {});
$("copy-url").onclick = () => act("copy_url").then((u) => say(`Copied ${u}`)).catch(() => {});
for (const b of document.querySelectorAll("button[data-view]")) b.onclick = () => show(b.dataset.view);
$("settings").onsubmit = async (ev) => {
  ev.preventDefault();
  const f = ev.target;
  const form = {
    model: f.model.value, port: Number(f.port.value), lan: f.lan.checked, api_key: f.api_key.value,
    has_api_key: false, max_running: Number(f.max_running.value), max_queue: Number(f.max_queue.value),
    autostart: f.autostart.checked, path: null, error: null,
  };
  try {
    await act("save_settings", { form });
    await invoke("set_autostart", { enabled: form.autostart });
  } catch (_) { /* shown by act */ }
};

listen("hearth://view", (e) => show(e.payload));
show(view);
refresh();
setInterval(refresh, 500);
