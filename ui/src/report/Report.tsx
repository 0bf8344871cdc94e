// The benchmark report: tables and charts of one `hearth bench` run (tok/s
// vs concurrency, TTFT and inter-token latency percentiles, prefill speed
// vs prompt length, the token-count cross-check). Shared by the Benchmark
// page and the self-contained HTML export (standalone.tsx).
import { Chart, PALETTE } from "../Chart";
import { date, int, ms, num } from "../format";
import type { Report as ReportData, RequestSample, TargetSummary } from "./types";

function nums(values: (number | null)[]): number[] {
  return values.map((v) => (v == null ? NaN : v));
}

function CrossCheck(props: { summary: TargetSummary; samples: RequestSample[] }) {
  const mine = props.samples.filter((s) => s.target === props.summary.target && s.scenario !== "warmup" && !s.error);
  const agree = mine.filter((s) => s.usage_completion_tokens != null && s.usage_completion_tokens === s.tokens).length;
  const sum = (f: (s: RequestSample) => number | null) => mine.reduce((a, s) => a + (f(s) ?? 0), 0);
  return (
    <div class="report-block">
      <h3>Token counts cross-check</h3>
      <table data-testid="report-crosscheck">
        <tbody>
          <tr><th>Successful responses</th><td>{mine.length}</td></tr>
          <tr><th>Server usage confirmed by the received text</th><td>{props.summary.usage_verified}</td></tr>
          <tr><th>Usage equal to the counted tokens</th><td>{agree}</td></tr>
          <tr><th>Σ usage.completion_tokens</th><td>{int(sum((s) => s.usage_completion_tokens))}</td></tr>
          <tr><th>Σ tokens counted by the harness</th><td>{int(sum((s) => s.tokens))}</td></tr>
          <tr><th>Σ stream events</th><td>{int(sum((s) => s.sse_events))}</td></tr>
          <tr><th>Whole text / counted tokens</th><td>{num(props.summary.text_to_counted, 3)}</td></tr>
          <tr><th>Verdict</th><td class={props.summary.suspect ? "error" : "ok"}>{props.summary.suspect ? "counts disagree: read tok/s with care" : "counts agree"}</td></tr>
        </tbody>
      </table>
      {props.summary.flags.length > 0 && (
        <table>
          <thead><tr><th>Flag</th><th>Severity</th><th>Count</th><th>Example</th></tr></thead>
          <tbody>
            {props.summary.flags.map((f) => (
              <tr><td>{f.kind}</td><td>{f.severity}</td><td>{f.count}</td><td>{f.example}</td></tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}

function TargetSection(props: { summary: TargetSummary; samples: RequestSample[] }) {
  const s = props.summary;
  const sweepX = s.sweep.map((p) => p.concurrency);
  const singleX = s.single.map((p) => p.prompt_tokens);
  return (
    <div class="report-target">
      <h2>{s.target}</h2>
      <p>
        {s.requests} requests, {s.failed} failed.
        {s.errors.length > 0 && <span class="error"> First error: {s.errors[0]}</span>}
      </p>
      {s.sweep.length > 0 && (
        <div class="report-block">
          <h3>Throughput vs concurrency</h3>
          <table data-testid="report-sweep">
            <thead>
              <tr><th>Concurrency</th><th>Aggregate tok/s</th><th>Per-request decode tok/s</th><th>Speed-up</th><th>TTFT p50</th><th>TTFT p99</th><th>ITL p50</th><th>ITL p99</th></tr>
            </thead>
            <tbody>
              {s.sweep.map((p) => (
                <tr>
                  <td>{p.concurrency}</td><td>{num(p.wall_tps_p50)}</td><td>{num(p.decode_tps_p50)}</td><td>{num(p.speedup, 2)}</td>
                  <td>{ms(p.ttft_p50_s)}</td><td>{ms(p.ttft_p99_s)}</td><td>{ms(p.itl_p50_s)}</td><td>{ms(p.itl_p99_s)}</td>
                </tr>
              ))}
            </tbody>
          </table>
          <div class="chart-row">
            <Chart title="tok/s vs concurrency" testId="chart-tps" time={false} xLog xLabel="concurrent requests" yLabel="tok/s"
              data={[sweepX, nums(s.sweep.map((p) => p.wall_tps_p50)), nums(s.sweep.map((p) => p.decode_tps_p50))]}
              series={[
                { label: "aggregate tok/s", stroke: PALETTE[0], width: 2, points: { size: 7 } },
                { label: "per-request decode tok/s", stroke: PALETTE[1], width: 2, points: { size: 7 } },
              ]} />
            <Chart title="Latency percentiles vs concurrency (ms)" testId="chart-latency" time={false} xLog xLabel="concurrent requests" yLabel="ms"
              data={[sweepX, ...[
                s.sweep.map((p) => p.ttft_p50_s), s.sweep.map((p) => p.ttft_p99_s),
                s.sweep.map((p) => p.itl_p50_s), s.sweep.map((p) => p.itl_p99_s),
              ].map((v) => nums(v).map((x) => x * 1000))]}
              series={[
                { label: "TTFT p50", stroke: PALETTE[0], width: 2, points: { size: 7 } },
                { label: "TTFT p99", stroke: PALETTE[3], width: 2, dash: [6, 4], points: { size: 7 } },
                { label: "ITL p50", stroke: PALETTE[1], width: 2, points: { size: 7 } },
                { label: "ITL p99", stroke: PALETTE[4], width: 2, dash: [6, 4], points: { size: 7 } },
              ]} />
          </div>
        </div>
      )}
      {s.single.length > 0 && (
        <div class="report-block">
          <h3>Single requests vs prompt length</h3>
          <table data-testid="report-single">
            <thead>
              <tr><th>Prompt tokens</th><th>OK</th><th>Prefill tok/s</th><th>Decode tok/s</th><th>TTFT p50</th><th>TTFT p99</th><th>ITL p50</th><th>ITL p99</th></tr>
            </thead>
            <tbody>
              {s.single.map((p) => (
                <tr>
                  <td>{p.prompt_tokens}</td><td>{p.ok}/{p.ok + p.failed}</td><td>{num(p.prefill_tps_p50)}</td><td>{num(p.decode_tps_p50)}</td>
                  <td>{ms(p.ttft_p50_s)}</td><td>{ms(p.ttft_p99_s)}</td><td>{ms(p.itl_p50_s)}</td><td>{ms(p.itl_p99_s)}</td>
                </tr>
              ))}
            </tbody>
          </table>
          <Chart title="Prefill speed vs prompt length" testId="chart-prefill" time={false} xLog xLabel="prompt tokens" yLabel="tok/s"
            data={[singleX, nums(s.single.map((p) => p.prefill_tps_p50)), nums(s.single.map((p) => p.decode_tps_p50))]}
            series={[
              { label: "prefill tok/s", stroke: PALETTE[2], width: 2, points: { size: 7 } },
              { label: "decode tok/s", stroke: PALETTE[1], width: 2, points: { size: 7 } },
            ]} />
        </div>
      )}
      {s.interference && (
        <div class="report-block">
          <h3>Interference (short requests while a {s.interference.long_prompt_tokens}-token prompt prefills)</h3>
          <table data-testid="report-interference">
            <tbody>
              <tr><th>Short request TTFT idle / loaded</th><td>{ms(s.interference.idle_ttft_p50_s)} / {ms(s.interference.loaded_ttft_p50_s)} (×{num(s.interference.ttft_ratio, 2)})</td></tr>
              <tr><th>Long prompt TTFT</th><td>{ms(s.interference.long_ttft_p50_s)}</td></tr>
              <tr><th>Running stream ITL / longest stall</th><td>{ms(s.interference.running_itl_p50_s)} / {ms(s.interference.running_stall_p50_s)}</td></tr>
            </tbody>
          </table>
        </div>
      )}
      <CrossCheck summary={s} samples={props.samples} />
    </div>
  );
}

export function ReportView(props: { report: ReportData }) {
  const r = props.report;
  const env = r.environment;
  return (
    <div class="report" data-testid="report">
      <p class="muted">
        Run of {date(r.started_unix_s)} · {num(r.duration_s)} s · preset {r.config.preset ?? "custom"} · {r.config.repeats} repeats ·
        hearth {r.hearth_version} · {env.os}/{env.arch}, {env.cpus} CPUs, load {num(env.load_average_start, 2)} → {num(env.load_average_end, 2)}
      </p>
      <p class="muted">
        Targets: {r.targets.map((t) => `${t.name} (${t.model} at ${t.url})`).join(", ")}
      </p>
      {r.summaries.map((s) => (
        <TargetSection summary={s} samples={r.samples} />
      ))}
    </div>
  );
}
