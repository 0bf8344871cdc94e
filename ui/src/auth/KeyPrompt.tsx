// The "key required" state: shown instead of a page when the server
// answered 401 (it was started with `--api-key`). The key is kept in this
// browser only (localStorage).
import { useState } from "preact/hooks";
import { applyKey, KeyState } from "./key";

export function KeyPrompt({ state }: { state: Extract<KeyState, { kind: "required" }> }) {
  const [key, setKey] = useState("");
  const save = (e: Event) => {
    e.preventDefault();
    if (key.trim()) applyKey(key);
  };
  return (
    <section data-testid="key-required">
      <h1>API key required</h1>
      <div class="card key-card">
        <p>
          This server was started with <code>--api-key</code>: every call to <code>/api</code> and <code>/v1</code> needs a key.
          Ask whoever runs it, or look in its settings.
        </p>
        {state.hadKey && <p class="error" data-testid="key-error">{state.message}</p>}
        <form class="row" onSubmit={save}>
          <input
            type="password"
            autocomplete="off"
            placeholder="API key"
            value={key}
            onInput={(e) => setKey(e.currentTarget.value)}
            data-testid="key-input"
          />
          <button class="primary" type="submit" disabled={!key.trim()} data-testid="key-save">Use this key</button>
        </form>
        <p class="muted small">The key is kept in this browser (localStorage) and sent as <code>Authorization: Bearer</code>.</p>
      </div>
    </section>
  );
}
