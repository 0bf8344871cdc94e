// "Connect an agent" (Status page): the base URL to give a coding agent (the
// LAN address in LAN mode, else the address this page came from) and
// ready-made settings for OpenCode, Aider, Claude Code and Continue.
import { useState } from "preact/hooks";
import type { Status } from "../api";

type Agent = "opencode" | "aider" | "claude" | "continue";

const AGENTS: { id: Agent; label: string; where: string }[] = [
  { id: "opencode", label: "OpenCode", where: "opencode.json" },
  { id: "aider", label: "Aider", where: "shell" },
  { id: "claude", label: "Claude Code", where: "shell" },
  { id: "continue", label: "Continue", where: "~/.continue/config.yaml" },
];

/// The settings of `agent` for a server at `base` (`.../v1`).
export function snippet(agent: Agent, base: string, key: string): string {
  const root = base.replace(/\/v1$/, "");
  switch (agent) {
    case "opencode":
      return JSON.stringify(
        {
          $schema: "https://opencode.ai/config.json",
          provider: {
            hearth: {
              npm: "@ai-sdk/openai-compatible",
              name: "Hearth",
              options: { baseURL: base, apiKey: key.startsWith("$") ? "{env:HEARTH_API_KEY}" : key },
              models: { default: { name: "Hearth (served model)" } },
            },
          },
          model: "hearth/default",
        },
        null,
        2,
      );
    case "aider":
      return `aider --model openai/default --openai-api-base ${base} --openai-api-key ${key}`;
    case "claude":
      return (
        `ANTHROPIC_BASE_URL=${root} ANTHROPIC_API_KEY=${key} \\\n` +
        `ANTHROPIC_MODEL=default ANTHROPIC_SMALL_FAST_MODEL=default claude`
      );
    case "continue":
      return [
        "models:",
        "  - name: Hearth",
        "    provider: openai",
        "    model: default",
        `    apiBase: ${base}`,
        `    apiKey: ${key.startsWith("$") ? "YOUR_HEARTH_API_KEY" : key}`,
        "    roles: [chat, edit, apply]",
      ].join("\n");
  }
}

async function copyText(text: string, fallbackId: string) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    // Clipboard API refused (plain HTTP on another host): select the text instead.
    const el = document.getElementById(fallbackId);
    if (el) {
      const range = document.createRange();
      range.selectNodeContents(el);
      getSelection()?.removeAllRanges();
      getSelection()?.addRange(range);
      document.execCommand("copy");
    }
  }
}

const SNIPPET = { background: "#11141b", padding: "10px", borderRadius: "6px", overflowX: "auto" };

export function ConnectAgentCard({ status }: { status: Status }) {
  const [agent, setAgent] = useState<Agent>("opencode");
  const [copied, setCopied] = useState<string | null>(null);
  const lan = status.lan_endpoints ?? [];
  const base = lan[0] ?? status.endpoint;
  // LAN mode requires a key: the one the server was started with.
  const key = lan.length > 0 ? "$HEARTH_API_KEY" : "unused";
  const text = snippet(agent, base, key);
  const where = AGENTS.find((a) => a.id === agent)?.where;
  const copy = async (what: string, value: string, id: string) => {
    await copyText(value, id);
    setCopied(what);
    window.setTimeout(() => setCopied(null), 1500);
  };
  return (
    <div class="card" data-testid="connect-agent">
      <h2>Connect an agent</h2>
      <dl>
        <dt>Base URL</dt>
        <dd>
          <code id="agent-base-url" data-testid="agent-base-url">{base}</code>{" "}
          <button onClick={() => copy("url", base, "agent-base-url")} data-testid="copy-agent-base-url">
            {copied === "url" ? "Copied" : "Copy"}
          </button>
        </dd>
        {lan.length > 1 && (
          <>
            <dt>Also</dt>
            <dd class="small">{lan.slice(1).map((u) => <div key={u}><code>{u}</code></div>)}</dd>
          </>
        )}
        <dt>API key</dt>
        <dd class="small muted">
          {lan.length > 0
            ? "LAN mode: the key the server was started with (--api-key / HEARTH_API_KEY)."
            : "Not needed on this machine (loopback); any value works."}
        </dd>
      </dl>
      <p>
        {AGENTS.map((a) => (
          <button
            key={a.id}
            class={a.id === agent ? "primary" : ""}
            style={{ marginRight: "6px" }}
            onClick={() => setAgent(a.id)}
            data-testid={`agent-tab-${a.id}`}
          >
            {a.label}
          </button>
        ))}
      </p>
      <p class="small muted">{where}</p>
      <pre id="agent-snippet" data-testid="agent-snippet" style={SNIPPET}>{text}</pre>
      <button onClick={() => copy("snippet", text, "agent-snippet")} data-testid="copy-agent-snippet">
        {copied === "snippet" ? "Copied" : "Copy"}
      </button>
    </div>
  );
}
