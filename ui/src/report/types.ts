// The JSON report of `hearth bench` (src/bench/report.rs), the parts shown.

export interface Latency {
  ttft_p50_s: number | null;
  ttft_p99_s: number | null;
  itl_p50_s: number | null;
  itl_p99_s: number | null;
}

export interface SingleSummary extends Latency {
  prompt_tokens: number;
  ok: number;
  failed: number;
  completion_tokens_p50: number | null;
  wall_tps_p50: number | null;
  decode_tps_p50: number | null;
  prefill_tps_p50: number | null;
}

export interface SweepSummary extends Latency {
  concurrency: number;
  batches_ok: number;
  batches_failed: number;
  wall_tps_p50: number | null;
  decode_tps_p50: number | null;
  speedup: number | null;
}

export interface InterferenceSummary {
  long_prompt_tokens: number;
  repeats_ok: number;
  idle_ttft_p50_s: number | null;
  loaded_ttft_p50_s: number | null;
  ttft_ratio: number | null;
  long_ttft_p50_s: number | null;
  running_itl_p50_s: number | null;
  running_stall_p50_s: number | null;
}

export interface FlagCount {
  kind: string;
  severity: string;
  count: number;
  example: string;
}

export interface TargetSummary {
  target: string;
  requests: number;
  failed: number;
  single: SingleSummary[];
  sweep: SweepSummary[];
  interference: InterferenceSummary | null;
  flags: FlagCount[];
  suspect: boolean;
  usage_verified: number;
  text_to_counted: number | null;
  errors: string[];
}

export interface RequestSample {
  target: string;
  scenario: string;
  concurrency: number;
  prompt_tokens: number;
  max_tokens: number;
  tokens: number;
  token_source: string;
  text_tokens: number;
  event_tokens: number;
  sse_events: number;
  usage_completion_tokens: number | null;
  finish_reason: string | null;
  error: string | null;
}

export interface Report {
  schema_version: number;
  hearth_version: string;
  started_unix_s: number;
  duration_s: number;
  environment: { os: string; arch: string; cpus: number; load_average_start: number | null; load_average_end: number | null };
  config: { preset: string | null; repeats: number; warmup: number; api: string };
  tokenizer: string;
  targets: { name: string; url: string; model: string }[];
  baseline: string;
  summaries: TargetSummary[];
  samples: RequestSample[];
}
