// LAN mode in headless Chromium: a `hearth serve --api-key KEY` (started by
// tests/webui.rs `ui_browser_api_key`):
//   HEARTH_URL=http://127.0.0.1:PORT HEARTH_TEST_KEY=KEY SCREENSHOTS=dir node ui/e2e/key.e2e.mjs
// Checks: without a key every page shows the "API key required" form (not
// a broken page); a wrong key is refused with the server's message; the
// right key opens Status, Memory, Models and Benchmark and a streamed chat
// answer; every /api and /v1 request carries `Authorization: Bearer`; the
// key survives a reload; "Forget key" goes back to the form.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import assert from "node:assert/strict";

const base = process.env.HEARTH_URL;
const key = process.env.HEARTH_TEST_KEY;
if (!base || !key) throw new Error("set HEARTH_URL and HEARTH_TEST_KEY");
const shots = process.env.SCREENSHOTS ?? "ui-screenshots/api-key";
mkdirSync(shots, { recursive: true });

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
  ],
});
const context = await browser.newContext({ viewport: { width: 900, height: 640 } });
const page = await context.newPage();
const pageErrors = [];
page.on("pageerror", (e) => pageErrors.push(String(e)));
page.setDefaultTimeout(30_000);
// Every API call the page makes, with the key it carried.
const calls = [];
page.on("request", (r) => {
  const path = new URL(r.url()).pathname;
  if (path.startsWith("/api/") || path.startsWith("/v1/")) calls.push({ path, auth: r.headers()["authorization"] ?? null });
});

let passed = 0;
let failed = 0;
async function step(name, body) {
  const started = Date.now();
  try {
    await body();
    await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
    passed += 1;
    console.log(`ok   ${name} (${Date.now() - started} ms)`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL ${name}: ${e?.stack ?? e}`);
    await page.screenshot({ path: join(shots, `failed-${name}.png`), fullPage: true }).catch(() => {});
  }
}
const text = (testId) => page.getByTestId(testId).first().innerText();

await step("key-required", async () => {
  // The server really refuses without a key.
  const bare = await fetch(base + "/api/status");
  assert.equal(bare.status, 401);
  await page.goto(base + "/");
  await page.getByTestId("key-required").waitFor();
  assert.match(await page.locator("h1").innerText(), /API key required/);
  assert.equal(await page.getByTestId("key-error").count(), 0, "no error before a key was tried");
  // Every page shows the same form, not a broken page.
  for (const nav of ["nav-memory", "nav-models", "nav-chat", "nav-bench"]) {
    await page.getByTestId(nav).click();
    await page.getByTestId("key-required").waitFor();
  }
});

await step("key-wrong", async () => {
  await page.getByTestId("key-input").fill("not-the-key");
  await page.getByTestId("key-save").click();
  await page.getByTestId("key-error").waitFor();
  assert.match(await text("key-error"), /Incorrect API key/);
  assert.ok(calls.some((c) => c.auth === "Bearer not-the-key"), JSON.stringify(calls.slice(-3)));
});

await step("key-right", async () => {
  await page.getByTestId("key-input").fill(key);
  await page.getByTestId("key-save").click();
  await page.getByTestId("nav-status").click();
  await page.getByTestId("model-name").waitFor();
  assert.match(await text("model-name"), /SmolLM2-135M-Instruct/);
  assert.equal(await page.evaluate(() => localStorage.getItem("hearth.apiKey")), key);
  await page.getByTestId("nav-memory").click();
  await page.getByTestId("memory-chart").locator("canvas").waitFor();
  await page.getByTestId("nav-models").click();
  await page.getByTestId("models-table").waitFor();
  await page.getByTestId("nav-bench").click();
  await page.getByTestId("bench-run").waitFor();
  assert.equal(await page.getByTestId("key-required").count(), 0);
});

await step("key-chat-stream", async () => {
  await page.getByTestId("nav-chat").click();
  await page.getByTestId("chat-temperature").evaluate((el) => {
    el.value = "0";
    el.dispatchEvent(new Event("input", { bubbles: true }));
  });
  await page.getByTestId("chat-input").fill("What is the capital of France?");
  await page.getByTestId("chat-send").click();
  await page.getByTestId("finish-reason").waitFor({ timeout: 120_000 });
  assert.match(await text("assistant-content"), /Paris/);
  const chat = calls.filter((c) => c.path === "/v1/chat/completions");
  assert.ok(chat.length >= 1 && chat.every((c) => c.auth === `Bearer ${key}`), JSON.stringify(chat));
});

await step("key-kept", async () => {
  await page.reload();
  await page.getByTestId("nav-status").click();
  await page.getByTestId("model-name").waitFor();
  // Since the right key was entered, every API call carried it.
  const start = calls.findIndex((c) => c.auth === `Bearer ${key}`);
  const after = calls.slice(start);
  assert.ok(after.length > 5);
  const without = after.filter((c) => c.auth !== `Bearer ${key}`);
  assert.deepEqual(without, []);
});

await step("key-forget", async () => {
  await page.getByTestId("key-forget").click();
  await page.getByTestId("key-required").waitFor();
  assert.equal(await page.evaluate(() => localStorage.getItem("hearth.apiKey")), null);
  assert.equal(await page.getByTestId("key-error").count(), 0);
});

await step("no-page-errors", async () => {
  assert.deepEqual(pageErrors, []);
});

await browser.close();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
