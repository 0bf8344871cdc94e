// Memory: process RSS, MLX active/peak/cache, KV cache used vs budget,
// system memory and pressure, and a live chart of the last minutes (the
// server keeps one sample a second for ten minutes).
import { useMemo } from "preact/hooks";
import { api, MemorySample } from "../api";
import { bytes } from "../format";
import { Chart, PALETTE } from "../Chart";
import { usePoll } from "../poll";

const GiB = 1024 ** 3;

function Meter(props: { label: string; used: number | null; total: number | null; testId: string; title?: string }) {
  const share = props.used != null && props.total ? Math.min(1, props.used / props.total) : 0;
  return (
    <div class="meter" data-testid={props.testId} title={props.title}>
      <div class="meter-label">
        {props.label}: <strong>{bytes(props.used)}</strong>
        {props.total ? <> of {bytes(props.total)}</> : null}
      </div>
      {props.total ? (
        <div class="meter-bar">
          <div style={{ width: `${(share * 100).toFixed(1)}%` }} />
        </div>
      ) : null}
    </div>
  );
}

export function MemoryPage() {
  const { data, error } = usePoll(api.memory, 1000);
  const history: MemorySample[] = data?.history ?? [];
  const chartData = useMemo(() => {
    const x = history.map((s) => s.t_ms / 1000);
    const mib = (f: (s: MemorySample) => number | null) => history.map((s) => (f(s) ?? NaN) / 1024 ** 2);
    return [
      x,
      mib((s) => s.rss_bytes),
      mib((s) => s.mlx_active_bytes),
      mib((s) => s.mlx_cache_bytes),
      mib((s) => s.kv_used_bytes),
    ] as [number[], ...number[][]];
  }, [history]);
  if (!data) return <section><h1>Memory</h1>{error ? <p class="error">{error}</p> : <p>Loading…</p>}</section>;
  const c = data.current;
  return (
    <section>
      <h1>Memory</h1>
      {error && <p class="error">Lost contact with the server: {error}</p>}
      <div class="cards">
        <div class="card">
          <h2>This process</h2>
          <Meter label="Resident (RSS)" used={c.rss_bytes} total={null} testId="mem-rss" />
          <Meter label="MLX active" used={c.mlx_active_bytes} total={null} testId="mem-mlx-active" />
          <Meter label="MLX peak" used={c.mlx_peak_bytes} total={null} testId="mem-mlx-peak" />
          <Meter label="MLX cache" used={c.mlx_cache_bytes} total={null} testId="mem-mlx-cache" />
          <Meter label="KV cache" used={c.kv_used_bytes} total={c.kv_budget_bytes} testId="mem-kv" />
          <Meter
            label="Step working memory"
            used={c.step_working_bytes}
            total={null}
            testId="mem-step-working"
            title="The most one engine step has needed beyond what stays allocated (activations, attention scores, logits). On a GPU a request is admitted only if this fits beside its KV cache."
          />
        </div>
        <div class="card">
          <h2>System</h2>
          <Meter label="Used" used={c.system_used_bytes} total={c.system_total_bytes} testId="mem-system" />
          <p>
            Available {bytes(c.system_available_bytes)} · pressure{" "}
            <span class={`badge pressure-${c.pressure}`} data-testid="mem-pressure">
              {c.pressure}
            </span>
          </p>
        </div>
      </div>
      <div class="card">
        <Chart
          title="Memory over the last minutes (MiB)"
          testId="memory-chart"
          data={chartData}
          yFormat={(v) => (v >= 1024 ? `${(v / 1024).toFixed(1)} GiB` : `${v.toFixed(0)} MiB`)}
          series={[
            { label: "RSS", stroke: PALETTE[0], width: 2 },
            { label: "MLX active", stroke: PALETTE[1], width: 2 },
            { label: "MLX cache", stroke: PALETTE[2], width: 2 },
            { label: "KV used", stroke: PALETTE[3], width: 2 },
          ]}
        />
        <p class="muted">
          {history.length} samples, one every {data.interval_s} s. System total {(c.system_total_bytes / GiB).toFixed(1)} GiB.
        </p>
      </div>
    </section>
  );
}
