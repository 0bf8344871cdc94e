// The API key of a server started with `--api-key` (LAN mode): kept in the
// browser's localStorage, sent as `Authorization: Bearer KEY` on every call
// to `/api/*` and `/v1/*` (`apiFetch`). Streaming goes through `fetch` too
// (the chat reads the SSE body itself), so no EventSource and no key in a
// URL. A 401 from the server flips the shared state to "required" and the
// shell shows the key form instead of a broken page.

export const KEY_STORAGE = "hearth.apiKey";

/** What the UI knows about the server's key requirement. */
export type KeyState =
  | { kind: "ok" } // last call passed (with our key, or none was needed)
  | { kind: "required"; message: string; hadKey: boolean };

/** The subset of `Storage` used here (tests pass a Map-backed one). */
export interface KeyStorage {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

function defaultStorage(): KeyStorage | null {
  try {
    return typeof localStorage === "undefined" ? null : localStorage;
  } catch {
    return null; // storage disabled
  }
}

export function loadKey(storage: KeyStorage | null = defaultStorage()): string | null {
  const key = storage?.getItem(KEY_STORAGE)?.trim();
  return key ? key : null;
}

export function saveKey(key: string, storage: KeyStorage | null = defaultStorage()): void {
  const trimmed = key.trim();
  if (!storage) return;
  if (trimmed) storage.setItem(KEY_STORAGE, trimmed);
  else storage.removeItem(KEY_STORAGE);
}

/** `init` with `Authorization: Bearer key` added (headers given by the caller kept). */
export function withKey(init: RequestInit | undefined, key: string | null): RequestInit {
  if (!key) return init ?? {};
  const headers = new Headers(init?.headers ?? {});
  if (!headers.has("authorization")) headers.set("authorization", `Bearer ${key}`);
  return { ...init, headers };
}

/** Whether an answer says the key is missing or wrong (OpenAI's 401 shape). */
export function isKeyError(status: number): boolean {
  return status === 401;
}

type Listener = (state: KeyState) => void;
let state: KeyState = { kind: "ok" };
const listeners = new Set<Listener>();

export function keyState(): KeyState {
  return state;
}

export function onKeyState(listener: Listener): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

function setKeyState(next: KeyState) {
  if (next.kind === state.kind && (next.kind === "ok" || (state.kind === "required" && state.message === next.message))) return;
  state = next;
  for (const l of listeners) l(state);
}

/** Stores a new key (empty = forget it) and lets the pages try again. */
export function applyKey(key: string) {
  saveKey(key);
  setKeyState({ kind: "ok" });
}

/** `fetch` with the stored key; a 401 marks the key as required. */
export async function apiFetch(input: string, init?: RequestInit): Promise<Response> {
  const key = loadKey();
  const response = await fetch(input, withKey(init, key));
  if (isKeyError(response.status)) {
    let message = "This server needs an API key.";
    try {
      const body = await response.clone().json();
      if (body?.error?.message) message = body.error.message;
    } catch {
      // keep the default message
    }
    setKeyState({ kind: "required", message, hadKey: key !== null });
  }
  return response;
}

/** Downloads `path` (with the key) as a file named by the server or `fallback`. */
export async function downloadWithKey(path: string, fallback: string): Promise<void> {
  const response = await apiFetch(path);
  if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
  const disposition = response.headers.get("content-disposition") ?? "";
  const name = /filename="?([^";]+)"?/.exec(disposition)?.[1] ?? fallback;
  const url = URL.createObjectURL(await response.blob());
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  window.setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
