// Progress arithmetic shared by the model-load bar (Status, Models) and
// the download rows (Models).
import type { Download, LoadReport } from "./api";
import { bytes, num } from "./format";

/** done / total clamped to 0..1; 0 when the total is unknown or zero. */
export function share(done: number, total: number | null | undefined): number {
  if (!total || total <= 0 || !Number.isFinite(done)) return 0;
  return Math.min(1, Math.max(0, done / total));
}

/** A download's share: by bytes when the hub gave sizes, else by files. */
export function downloadShare(d: Pick<Download, "bytes_done" | "bytes_total" | "files_done" | "files_total">): number {
  return d.bytes_total ? share(d.bytes_done, d.bytes_total) : share(d.files_done, d.files_total);
}

/** "42.0 MiB of 98.0 MiB · 120/273 tensors · 1.2 s". */
export function loadLabel(r: LoadReport): string {
  const tensors = r.tensors_total ? ` · ${r.tensors_done}/${r.tensors_total} tensors` : "";
  return `${bytes(r.bytes_done)} of ${bytes(r.bytes_total)}${tensors} · ${num(r.seconds)} s`;
}

/** Whether a download can be started again to resume it. */
export function resumable(d: Pick<Download, "state">): boolean {
  return d.state === "cancelled" || d.state === "failed";
}

/** Indexes of the newest entry of each repository (older attempts get no Resume button). */
export function latestPerRepo(list: Pick<Download, "repo">[]): Set<number> {
  const last = new Map<string, number>();
  list.forEach((d, i) => last.set(d.repo, i));
  return new Set(last.values());
}
