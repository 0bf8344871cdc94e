// The Hearth web UI: one page per hash route (#/status, #/memory, #/bench,
// #/chat, #/models), served by `hearth serve` at `/` (also the Tauri app's
// window). Everything it shows comes from `/api/*` and the public API.
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import "./styles.css";
import { StatusPage } from "./pages/Status";
import { MemoryPage } from "./pages/Memory";
import { BenchPage } from "./pages/Bench";
import { ChatPage } from "./pages/Chat";
import { ModelsPage } from "./pages/Models";
import { applyKey, keyState, loadKey, onKeyState } from "./auth/key";
import { KeyPrompt } from "./auth/KeyPrompt";
import { applyTheme, nextTheme, saveTheme, storedTheme } from "./theme";

const PAGES = [
  { id: "status", label: "Status", view: StatusPage },
  { id: "memory", label: "Memory", view: MemoryPage },
  { id: "bench", label: "Benchmark", view: BenchPage },
  { id: "chat", label: "Chat", view: ChatPage },
  { id: "models", label: "Models", view: ModelsPage },
] as const;

function currentPage(): string {
  const id = location.hash.replace(/^#\/?/, "").split("?")[0];
  return PAGES.some((p) => p.id === id) ? id : "status";
}

function App() {
  const [page, setPage] = useState(currentPage());
  const [auth, setAuth] = useState(keyState());
  // Bumped when a key is entered, so the page mounts again and reloads.
  const [generation, setGeneration] = useState(0);
  const [theme, setTheme] = useState(storedTheme());
  useEffect(() => {
    const onHash = () => setPage(currentPage());
    window.addEventListener("hashchange", onHash);
    const stop = onKeyState((s) => {
      setAuth(s);
      if (s.kind === "ok") setGeneration((g) => g + 1);
    });
    return () => {
      window.removeEventListener("hashchange", onHash);
      stop();
    };
  }, []);
  useEffect(() => {
    applyTheme(theme);
    if (theme !== "auto") return;
    // "auto" follows the system while the page is open, too.
    const media = window.matchMedia?.("(prefers-color-scheme: dark)");
    const follow = () => applyTheme("auto");
    media?.addEventListener("change", follow);
    return () => media?.removeEventListener("change", follow);
  }, [theme]);
  const active = PAGES.find((p) => p.id === page) ?? PAGES[0];
  const View = active.view;
  const hasKey = loadKey() !== null;
  return (
    <div class="layout">
      <nav class="sidebar">
        <div class="brand">
          <img src="/favicon.svg" alt="" width={22} height={22} /> <span class="brand-name">Hearth</span>
        </div>
        <div class="nav-links">
          {PAGES.map((p) => (
            <a href={`#/${p.id}`} class={p.id === page ? "active" : ""} data-testid={`nav-${p.id}`}>
              {p.label}
            </a>
          ))}
        </div>
        <div class="sidebar-foot">
          <button class="link" onClick={() => {
              const next = nextTheme(theme);
              saveTheme(next);
              setTheme(next);
            }} title="Theme: auto follows the system" data-testid="theme-toggle">
            Theme: {theme}
          </button>
          {hasKey && (
            <button class="link" onClick={() => applyKey("")} title="Forget the API key kept in this browser" data-testid="key-forget">
              Forget key
            </button>
          )}
        </div>
      </nav>
      <main class="content">
        {auth.kind === "required" ? <KeyPrompt state={auth} /> : <View key={`${page}-${generation}`} />}
      </main>
    </div>
  );
}

applyTheme(storedTheme());
const root = document.getElementById("app");
if (root) render(<App />, root);
