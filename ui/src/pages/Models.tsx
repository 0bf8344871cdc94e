// Models: the models in $HEARTH_HOME/models with size, architecture,
// quantization and whether they fit in memory; which one is served; switch
// the served model (load / unload) and watch it load.
import { useState } from "preact/hooks";
import { api, Download, Status } from "../api";
import { bytes, num } from "../format";
import { usePoll } from "../poll";
import { LoadProgress } from "../LoadProgress";
import { downloadShare, latestPerRepo, resumable } from "../progress";

export function ModelsPage() {
  const { data, error } = usePoll(api.models, 2000);
  const { data: status } = usePoll<Status>(api.status, 1000);
  const [actionError, setActionError] = useState<string | null>(null);
  const { data: downloads } = usePoll<Download[]>(api.downloads, 1000);
  const latest = downloads ? latestPerRepo(downloads) : null;
  const [repo, setRepo] = useState("");
  const manager = status?.manager;
  const busy = manager?.state === "loading";
  const run = async (action: () => Promise<unknown>) => {
    setActionError(null);
    try {
      await action();
    } catch (e) {
      setActionError(e instanceof Error ? e.message : String(e));
    }
  };
  return (
    <section>
      <h1>Models</h1>
      {error && <p class="error">{error}</p>}
      {actionError && <p class="error" data-testid="models-error">{actionError}</p>}
      {manager && (
        <div class="card">
          <p data-testid="manager-state">
            <span class={`badge state-${manager.state}`}>{manager.state}</span>{" "}
            {manager.state === "loading"
              ? <>loading <strong>{manager.model}</strong> ({bytes(manager.loading_bytes)}) · {num(manager.loading_seconds)} s</>
              : manager.model
                ? <>serving <strong>{manager.model}</strong></>
                : <>no model loaded: the API answers 503 until one is</>}
          </p>
          {manager.load && <LoadProgress report={manager.load} />}
          {manager.last_error && <p class="error">Last load failed: {manager.last_error}</p>}
          {manager.model && manager.state !== "loading" && (
            <button onClick={() => run(api.unloadModel)} data-testid="model-unload">Unload</button>
          )}
        </div>
      )}
      <div class="card">
        <h2>Download from the Hugging Face hub</h2>
        <div class="row">
          <input size={40} value={repo} placeholder="mlx-community/Qwen3-0.6B-4bit" onInput={(e) => setRepo(e.currentTarget.value)} data-testid="download-repo" />
          <button onClick={() => run(() => api.download(repo.trim()))} disabled={!repo.trim()} data-testid="download-start">Download</button>
        </div>
        {downloads && downloads.length > 0 && latest && (
          <div class="table-scroll"><table data-testid="downloads">
            <thead><tr><th>Repository</th><th>State</th><th>Progress</th><th></th></tr></thead>
            <tbody>
              {downloads.map((d, i) => {
                const share = downloadShare(d);
                const running = d.state === "listing" || d.state === "downloading";
                return (
                  <tr data-testid="download-row" data-repo={d.repo}>
                    <td class="nowrap">{d.repo}</td>
                    <td data-testid="download-state" class={d.state === "failed" ? "error" : d.state === "done" ? "ok" : ""}>
                      {d.state}{d.error ? `: ${d.error}` : ""}
                    </td>
                    <td>
                      <div class="progress-bar"><div style={{ width: `${(share * 100).toFixed(1)}%` }} /></div>
                      {d.files_done}/{d.files_total} files · {bytes(d.bytes_done)}{d.bytes_total ? ` of ${bytes(d.bytes_total)}` : ""}
                      {d.file && d.state === "downloading" ? ` · ${d.file}` : ""}
                      {d.bytes_resumed > 0 ? ` · ${bytes(d.bytes_resumed)} resumed` : ""}
                      {d.files_verified > 0 ? ` · ${d.files_verified} sha256 checked` : ""}
                    </td>
                    <td>
                      {running && <button onClick={() => run(() => api.cancelDownload(d.repo))} data-testid="download-cancel">Cancel</button>}
                      {resumable(d) && latest.has(i) && <button onClick={() => run(() => api.download(d.repo))} data-testid="download-resume">Resume</button>}
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table></div>
        )}
      </div>
      {!data && !error && <p>Loading…</p>}
      {data && (
        <div class="card">
          <p class="muted">
            Folder <code>{data.models_dir}</code> · {bytes(data.system_available_bytes)} of memory available now.
          </p>
          {data.models.length === 0 ? (
            <p>No models there yet.</p>
          ) : (
            <div class="table-scroll"><table data-testid="models-table">
              <thead>
                <tr><th>Name</th><th>Format</th><th>Architecture</th><th>Quantization</th><th>Size</th><th>Fits in memory</th><th></th></tr>
              </thead>
              <tbody>
                {data.models.map((m) => (
                  <tr data-testid="model-row" data-model={m.name}>
                    <td>{m.name}</td>
                    <td>{m.format}</td>
                    <td class="wrap-anywhere">{m.architecture}</td>
                    <td>{m.quantization}</td>
                    <td>{bytes(m.size_bytes)}</td>
                    <td class={m.fits_in_memory ? "ok" : "error"}>{m.fits_in_memory ? "yes" : "no"}</td>
                    <td>
                      {m.served ? (
                        <span class="badge state-serving">served</span>
                      ) : (
                        <button disabled={busy} onClick={() => run(() => api.loadModel(m.name))} data-testid="model-load">
                          Load
                        </button>
                      )}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table></div>
          )}
        </div>
      )}
    </section>
  );
}
