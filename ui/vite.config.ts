// The app: index.html + hashed files under dist/assets (embedded in the
// hearth binary by build.rs; served at `/`).
import { defineConfig } from "vite";
import preact from "@preact/preset-vite";

export default defineConfig({
  plugins: [preact()],
  build: {
    outDir: "dist",
    emptyOutDir: true,
    chunkSizeWarningLimit: 1000,
  },
  server: {
    // `npm run dev` against a running `hearth serve` on the default port.
    proxy: {
      "/api": "http://127.0.0.1:8000",
      "/v1": "http://127.0.0.1:8000",
    },
  },
});
