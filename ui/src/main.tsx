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
  useEffect(() => {
    const onHash = () => setPage(currentPage());
    window.addEventListener("hashchange", onHash);
    return () => window.removeEventListener("hashchange", onHash);
  }, []);
  const active = PAGES.find((p) => p.id === page) ?? PAGES[0];
  const View = active.view;
  return (
    <div class="layout">
      <nav class="sidebar">
        <div class="brand">
          <img src="/favicon.svg" alt="" width={22} height={22} /> Hearth
        </div>
        {PAGES.map((p) => (
          <a href={`#/${p.id}`} class={p.id === page ? "active" : ""} data-testid={`nav-${p.id}`}>
            {p.label}
          </a>
        ))}
      </nav>
      <main class="content">
        <View />
      </main>
    </div>
  );
}

const root = document.getElementById("app");
if (root) render(<App />, root);
