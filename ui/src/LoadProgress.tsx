// The model-load progress bar: bytes and tensors of the weights read so
// far (from `/api/status` → `manager.load`), or the last load's summary.
import type { LoadReport } from "./api";
import { loadLabel, share } from "./progress";
import { bytes, num } from "./format";

export function LoadProgress({ report }: { report: LoadReport }) {
  if (report.done) {
    return (
      <p class="muted small" data-testid="load-last">
        Last load: {report.model}, {report.tensors_total} tensors, {bytes(report.bytes_total)} in {num(report.seconds)} s
      </p>
    );
  }
  const fraction = share(report.bytes_done, report.bytes_total);
  return (
    <div class="load-progress" data-testid="load-progress">
      <div class="progress-bar" role="progressbar" aria-valuemin={0} aria-valuemax={100} aria-valuenow={Math.round(fraction * 100)}>
        <div style={{ width: `${(fraction * 100).toFixed(1)}%` }} />
      </div>
      <span class="small muted">{loadLabel(report)}</span>
    </div>
  );
}
