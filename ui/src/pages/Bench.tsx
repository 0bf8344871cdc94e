// Benchmark: one click runs the `hearth bench` harness (quick preset) against
// this server; progress while it runs; the report's tables and charts; the
// history of runs; exports as JSON, Markdown and one self-contained HTML file.
import { useEffect, useState } from "preact/hooks";
import { api, BenchOverview, StartBench } from "../api";
import { date, num } from "../format";
import { ReportView } from "../report/Report";
import type { Report } from "../report/types";
import { downloadWithKey, loadKey } from "../auth/key";

/** A plain link works without a key; with one, the click fetches with it. */
function keyedDownload(path: string, fallback: string) {
  return (e: MouseEvent) => {
    if (!loadKey()) return;
    e.preventDefault();
    downloadWithKey(path, fallback).catch(() => {});
  };
}

function parseList(text: string): number[] | undefined {
  const values = text
    .split(/[,\s]+/)
    .filter(Boolean)
    .map(Number);
  return values.length && values.every((v) => Number.isInteger(v) && v > 0) ? values : undefined;
}

export function BenchPage() {
  const [overview, setOverview] = useState<BenchOverview | null>(null);
  const [selected, setSelected] = useState<string | null>(null);
  const [report, setReport] = useState<Report | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [advanced, setAdvanced] = useState(false);
  const [repeats, setRepeats] = useState("");
  const [lengths, setLengths] = useState("");
  const [concurrency, setConcurrency] = useState("");
  const [maxTokens, setMaxTokens] = useState("");
  const [scenarios, setScenarios] = useState({ single: true, sweep: true, interference: true });

  const running = overview?.current?.state === "running";

  useEffect(() => {
    let alive = true;
    let timer: number | undefined;
    const tick = async () => {
      try {
        const next = await api.bench();
        if (!alive) return;
        setOverview((previous) => {
          // A run just finished: show its report.
          const wasRunning = previous?.current?.state === "running";
          if (wasRunning && next.current && next.current.state === "done") setSelected(next.current.id);
          return next;
        });
      } catch (e) {
        if (alive) setError(e instanceof Error ? e.message : String(e));
      }
      if (alive) timer = window.setTimeout(tick, 700);
    };
    tick();
    return () => {
      alive = false;
      window.clearTimeout(timer);
    };
  }, []);

  useEffect(() => {
    if (!selected && overview && overview.runs.length > 0 && !running) setSelected(overview.runs[0].id);
  }, [overview, selected, running]);

  useEffect(() => {
    if (!selected) return;
    let alive = true;
    api
      .benchReport<Report>(selected)
      .then((r) => alive && setReport(r))
      .catch((e) => alive && setError(e instanceof Error ? e.message : String(e)));
    return () => {
      alive = false;
    };
  }, [selected]);

  const start = async () => {
    setError(null);
    const request: StartBench = { preset: "quick" };
    if (advanced) {
      if (repeats) request.repeats = Number(repeats);
      request.prompt_lengths = parseList(lengths);
      request.concurrency = parseList(concurrency);
      if (maxTokens) request.max_tokens = Number(maxTokens);
      request.scenarios = Object.entries(scenarios)
        .filter(([, on]) => on)
        .map(([name]) => name);
    }
    try {
      const run = await api.startBench(request);
      setOverview((o) => ({ runs: o?.runs ?? [], current: run }));
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    }
  };

  const current = overview?.current;
  const progress = current?.progress;
  const share = progress && progress.total ? (progress.done / progress.total) * 100 : 0;
  return (
    <section>
      <h1>Benchmark</h1>
      <div class="card">
        <p>
          Runs the <code>hearth bench</code> harness (quick preset: single requests at several prompt lengths, 1–8
          parallel requests, interference) against this server. Token counts are checked against the model's tokenizer.
        </p>
        <div class="row">
          <button class="primary" onClick={start} disabled={running} data-testid="bench-run">
            {running ? "Running…" : "Run benchmark"}
          </button>
          {running && (
            <button onClick={() => api.cancelBench().catch((e) => setError(String(e)))} data-testid="bench-cancel">
              Cancel
            </button>
          )}
          <label class="inline">
            <input type="checkbox" checked={advanced} onChange={(e) => setAdvanced(e.currentTarget.checked)} data-testid="bench-advanced" />{" "}
            Custom settings
          </label>
        </div>
        {advanced && (
          <div class="form-grid">
            <label>Repeats <input value={repeats} onInput={(e) => setRepeats(e.currentTarget.value)} placeholder="5" data-testid="bench-repeats" /></label>
            <label>Prompt lengths <input value={lengths} onInput={(e) => setLengths(e.currentTarget.value)} placeholder="64, 256, 1024" data-testid="bench-lengths" /></label>
            <label>Concurrency <input value={concurrency} onInput={(e) => setConcurrency(e.currentTarget.value)} placeholder="1, 2, 4, 8" data-testid="bench-concurrency" /></label>
            <label>Max tokens <input value={maxTokens} onInput={(e) => setMaxTokens(e.currentTarget.value)} placeholder="64" data-testid="bench-max-tokens" /></label>
            {(["single", "sweep", "interference"] as const).map((name) => (
              <label class="inline">
                <input type="checkbox" checked={scenarios[name]} data-testid={`bench-scenario-${name}`}
                  onChange={(e) => setScenarios({ ...scenarios, [name]: e.currentTarget.checked })} /> {name}
              </label>
            ))}
          </div>
        )}
        {current && (
          <div class="progress" data-testid="bench-progress">
            <div class="progress-bar"><div style={{ width: `${share.toFixed(1)}%` }} /></div>
            <span data-testid="bench-state">{current.state}</span>
            {progress && (
              <span> · step {Math.min(progress.done + (progress.finished ? 0 : 1), progress.total)} of {progress.total}: {progress.step}{progress.finished && progress.result ? ` — ${progress.result}` : ""}</span>
            )}
            {current.error && <p class="error">{current.error}</p>}
          </div>
        )}
        {error && <p class="error" data-testid="bench-error">{error}</p>}
      </div>

      {overview && overview.runs.length > 0 && (
        <div class="card">
          <h2>History</h2>
          <table data-testid="bench-history">
            <thead>
              <tr><th>When</th><th>Model</th><th>Preset</th><th>Requests</th><th>Best aggregate tok/s</th><th>Decode tok/s</th><th>Export</th></tr>
            </thead>
            <tbody>
              {overview.runs.map((run) => (
                <tr class={run.id === selected ? "selected" : ""}>
                  <td><a href="#/bench" onClick={(e) => { e.preventDefault(); setSelected(run.id); }}>{date(run.started_unix_s)}</a></td>
                  <td>{run.model}</td>
                  <td>{run.preset ?? "custom"}</td>
                  <td>{run.requests}{run.failed ? ` (${run.failed} failed)` : ""}</td>
                  <td>{num(run.best_wall_tps)}</td>
                  <td>{num(run.decode_tps)}{run.suspect ? " ⚠" : ""}</td>
                  <td class="exports">
                    <a href={`/api/bench/runs/${run.id}`} download onClick={keyedDownload(`/api/bench/runs/${run.id}`, `hearth-bench-${run.id}.json`)} data-testid="export-json">JSON</a>{" "}
                    <a href={`/api/bench/runs/${run.id}/markdown`} download onClick={keyedDownload(`/api/bench/runs/${run.id}/markdown`, `hearth-bench-${run.id}.md`)} data-testid="export-markdown">Markdown</a>{" "}
                    <a href={`/api/bench/runs/${run.id}/html`} download onClick={keyedDownload(`/api/bench/runs/${run.id}/html`, `hearth-bench-${run.id}.html`)} data-testid="export-html">HTML</a>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}

      {report && selected && (
        <div class="card">
          <h2>Report</h2>
          <ReportView report={report} />
        </div>
      )}
    </section>
  );
}
