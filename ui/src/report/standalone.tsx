// Entry of the self-contained HTML report (`hearth bench --html`, the
// Benchmark page's "Export HTML"): reads the report JSON embedded in the
// page and renders it with the same component as the UI.
import { render } from "preact";
import "../styles.css";
import { ReportView } from "./Report";
import type { Report } from "./types";

const data = document.getElementById("hearth-report")?.textContent;
const root = document.getElementById("report");
if (data && root) {
  const report = JSON.parse(data) as Report;
  render(
    <main class="content standalone">
      <h1>Hearth benchmark report</h1>
      <ReportView report={report} />
    </main>,
    root,
  );
}
