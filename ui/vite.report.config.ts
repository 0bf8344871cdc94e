// The stand-alone benchmark report: one IIFE script + one stylesheet in
// dist/report/, which `hearth` inlines into a self-contained HTML file
// together with the report's JSON (src/webui.rs).
import { defineConfig } from "vite";
import preact from "@preact/preset-vite";

export default defineConfig({
  plugins: [preact()],
  publicDir: false,
  define: { "process.env.NODE_ENV": JSON.stringify("production") },
  build: {
    outDir: "dist/report",
    emptyOutDir: false,
    lib: {
      entry: "src/report/standalone.tsx",
      formats: ["iife"],
      name: "HearthReport",
      fileName: () => "report.js",
      cssFileName: "report",
    },
  },
});
