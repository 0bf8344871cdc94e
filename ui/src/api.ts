// Types and calls of the server's `/api/*` endpoints (docs/api.md, "UI
// endpoints"). The UI talks only to these and the public OpenAI routes.
import { apiFetch } from "./auth/key";

export interface ModelSummary {
  id: string;
  path: string;
  format: string;
  architecture: string;
  quantization: string;
  parameters: number;
  context_length: number;
  weight_bytes: number;
  kv_bytes_per_token: number;
  device: string;
}

export interface ManagerStatus {
  state: "stopped" | "loading" | "ready" | "serving";
  model: string | null;
  loading_seconds: number | null;
  loading_bytes: number | null;
  last_error: string | null;
  /** The load running now, else the last one. */
  load: LoadReport | null;
}

/** Weights read so far by a model load (`manager.load`). */
export interface LoadReport {
  model: string;
  tensors_done: number;
  tensors_total: number;
  bytes_done: number;
  bytes_total: number;
  seconds: number;
  done: boolean;
}

export interface Status {
  hearth_version: string;
  state: "ready" | "serving" | "stopping" | "loading" | "stopped";
  model: ModelSummary | null;
  manager: ManagerStatus;
  endpoint: string;
  /** LAN mode: base URLs other machines can use (empty on loopback). */
  lan_endpoints?: string[];
  running: number;
  queued: number;
  max_running: number;
  max_queue: number;
  requests_total: number;
  prompt_tokens_total: number;
  generated_tokens_total: number;
  tokens_per_second: number;
  uptime_s: number;
}

export interface MemorySample {
  t_ms: number;
  rss_bytes: number | null;
  mlx_active_bytes: number | null;
  mlx_peak_bytes: number | null;
  mlx_cache_bytes: number | null;
  kv_used_bytes: number;
  kv_allocated_bytes: number;
  kv_budget_bytes: number;
  /** The most memory one engine step has worked in beyond what stays allocated. */
  step_working_bytes: number;
  system_total_bytes: number;
  system_used_bytes: number;
  system_available_bytes: number;
  pressure: "normal" | "warning" | "critical";
  tokens_per_second: number;
  running: number;
  queued: number;
}

export interface Memory {
  interval_s: number;
  current: MemorySample;
  history: MemorySample[];
}

export interface LocalModel {
  name: string;
  path: string;
  format: string;
  architecture: string;
  quantization: string;
  size_bytes: number;
  fits_in_memory: boolean;
  served: boolean;
}

export interface Models {
  models_dir: string;
  served: string | null;
  system_available_bytes: number;
  models: LocalModel[];
}

export interface Download {
  repo: string;
  state: "listing" | "downloading" | "done" | "failed" | "cancelled";
  file: string | null;
  files_done: number;
  files_total: number;
  bytes_done: number;
  bytes_total: number | null;
  bytes_resumed: number;
  files_verified: number;
  error: string | null;
  model: string;
}

export interface BenchProgress {
  done: number;
  total: number;
  target: string;
  scenario: string;
  step: string;
  repeat: number;
  finished: boolean;
  result: string;
}

export interface BenchRun {
  id: string;
  started_unix_s: number;
  progress: BenchProgress | null;
  state: "running" | "done" | "failed" | "cancelled";
  error: string | null;
}

export interface RunListing {
  id: string;
  started_unix_s: number;
  duration_s: number;
  model: string;
  preset: string | null;
  requests: number;
  failed: number;
  best_wall_tps: number | null;
  decode_tps: number | null;
  suspect: boolean;
}

export interface BenchOverview {
  current: BenchRun | null;
  runs: RunListing[];
}

export interface StartBench {
  preset?: "quick" | "full";
  repeats?: number;
  warmup?: number;
  prompt_lengths?: number[];
  concurrency?: number[];
  max_tokens?: number;
  long_prompt_tokens?: number;
  scenarios?: string[];
}

/** An OpenAI-shaped error from the server, or a network failure. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

async function check(response: Response): Promise<Response> {
  if (response.ok) return response;
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body?.error?.message) message = body.error.message;
  } catch {
    // not JSON: keep the status line
  }
  throw new ApiError(message, response.status);
}

export async function getJson<T>(path: string, init?: RequestInit): Promise<T> {
  const response = await check(await apiFetch(path, init));
  return (await response.json()) as T;
}

export async function postJson<T>(path: string, body: unknown, init?: RequestInit): Promise<T> {
  return getJson<T>(path, {
    ...init,
    method: "POST",
    headers: { "content-type": "application/json", ...(init?.headers ?? {}) },
    body: JSON.stringify(body),
  });
}

export const api = {
  status: () => getJson<Status>("/api/status"),
  memory: () => getJson<Memory>("/api/memory"),
  models: () => getJson<Models>("/api/models"),
  loadModel: (model: string) => postJson<ManagerStatus>("/api/models/load", { model }),
  unloadModel: () => postJson<ManagerStatus>("/api/models/unload", {}),
  downloads: () => getJson<Download[]>("/api/models/downloads"),
  download: (repo: string) => postJson<Download>("/api/models/download", { repo }),
  cancelDownload: (repo: string) => postJson<Download>("/api/models/download/cancel", { repo }),
  bench: () => getJson<BenchOverview>("/api/bench"),
  startBench: (request: StartBench) => postJson<BenchRun>("/api/bench", request),
  cancelBench: async () => {
    await check(await apiFetch("/api/bench/current", { method: "DELETE" }));
  },
  benchReport: <T>(id: string) => getJson<T>(`/api/bench/runs/${encodeURIComponent(id)}`),
};
