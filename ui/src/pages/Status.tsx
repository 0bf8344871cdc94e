// Status: the served model, the server's state, the endpoint (with a copy
// button), running and queued requests, live tok/s.
import { useState } from "preact/hooks";
import { api } from "../api";
import { bytes, count, duration, int, num } from "../format";
import { usePoll } from "../poll";
import { LoadProgress } from "../LoadProgress";
import { ConnectAgentCard } from "./ConnectAgent";

export function StatusPage() {
  const { data: status, error } = usePoll(api.status, 1000);
  const [copied, setCopied] = useState(false);
  if (!status) return <section><h1>Status</h1>{error ? <p class="error">{error}</p> : <p>Loading…</p>}</section>;
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(status.endpoint);
    } catch {
      // Clipboard API refused (plain HTTP on another host): select the text instead.
      const el = document.getElementById("endpoint-url");
      const range = document.createRange();
      if (el) {
        range.selectNodeContents(el);
        getSelection()?.removeAllRanges();
        getSelection()?.addRange(range);
        document.execCommand("copy");
      }
    }
    setCopied(true);
    window.setTimeout(() => setCopied(false), 1500);
  };
  const m = status.model;
  const loading = status.manager.state === "loading";
  return (
    <section>
      <h1>Status</h1>
      {error && <p class="error">Lost contact with the server: {error}</p>}
      <div class="cards">
        <div class="card">
          <h2>Server</h2>
          <p>
            <span class={`badge state-${status.state}`} data-testid="server-state">
              {status.state}
            </span>
          </p>
          <dl>
            <dt>Endpoint</dt>
            <dd>
              <code id="endpoint-url" data-testid="endpoint">{status.endpoint}</code>{" "}
              <button onClick={copy} data-testid="copy-endpoint">{copied ? "Copied" : "Copy"}</button>
            </dd>
            <dt>Running</dt>
            <dd data-testid="running">{status.running} / {status.max_running}</dd>
            <dt>Queued</dt>
            <dd data-testid="queued">{status.queued} / {status.max_queue}</dd>
            <dt>Generation</dt>
            <dd data-testid="tps">{num(status.tokens_per_second)} tok/s</dd>
            <dt>Requests</dt>
            <dd>{int(status.requests_total)} ({int(status.generated_tokens_total)} tokens generated)</dd>
            <dt>Up for</dt>
            <dd>{duration(status.uptime_s)}</dd>
            <dt>Version</dt>
            <dd>hearth {status.hearth_version}</dd>
          </dl>
        </div>
        <div class="card">
          <h2>Model</h2>
          {loading && (
            <p data-testid="model-loading">
              Loading <strong>{status.manager.model}</strong> ({bytes(status.manager.loading_bytes)}) ·{" "}
              {num(status.manager.loading_seconds)} s <span class="spinner" />
            </p>
          )}
          {status.manager.load && (loading || status.manager.load.done) && <LoadProgress report={status.manager.load} />}
          {status.manager.last_error && <p class="error" data-testid="model-error">Last load failed: {status.manager.last_error}</p>}
          {!m && !loading && <p data-testid="model-none">No model is loaded. Pick one on the <a href="#/models">Models</a> page.</p>}
          {m && (
            <dl>
              <dt>Name</dt>
              <dd data-testid="model-name">{m.id}</dd>
              <dt>Architecture</dt>
              <dd data-testid="model-arch">{m.architecture}</dd>
              <dt>Quantization</dt>
              <dd data-testid="model-quant">{m.quantization}</dd>
              <dt>Parameters</dt>
              <dd data-testid="model-params" title={String(m.parameters)}>{count(m.parameters)}</dd>
              <dt>Context length</dt>
              <dd data-testid="model-context">{int(m.context_length)} tokens</dd>
              <dt>Weights</dt>
              <dd>{bytes(m.weight_bytes)}</dd>
              <dt>Device</dt>
              <dd>{m.device}</dd>
              <dt>Format</dt>
              <dd>{m.format}</dd>
            </dl>
          )}
        </div>
      </div>
      {m && <ConnectAgentCard status={status} />}
    </section>
  );
}
