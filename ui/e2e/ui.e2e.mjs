// End-to-end test of the web UI in headless Chromium (playwright-core)
// against a real `hearth serve` on a real model. Run by tests/webui.rs:
//   HEARTH_URL=http://127.0.0.1:PORT SCREENSHOTS=dir node ui/e2e/ui.e2e.mjs
// Every step saves a screenshot into $SCREENSHOTS; a failing step saves
// `failed-<step>.png` and the script exits 1. Prints "N passed, N failed".
import { chromium } from "playwright-core";
import { mkdirSync, writeFileSync, readFileSync } from "node:fs";
import { join } from "node:path";
import assert from "node:assert/strict";

const base = process.env.HEARTH_URL;
if (!base) throw new Error("set HEARTH_URL");
const shots = process.env.SCREENSHOTS ?? "ui-screenshots";
mkdirSync(shots, { recursive: true });
const only = process.env.HEARTH_E2E_ONLY ? process.env.HEARTH_E2E_ONLY.split(",") : null;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
  ],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, acceptDownloads: true });
await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: base });
const page = await context.newPage();
const consoleErrors = [];
page.on("pageerror", (e) => consoleErrors.push(String(e)));
page.setDefaultTimeout(30_000);

let passed = 0;
let failed = 0;
async function step(name, body) {
  if (only && !only.includes(name)) return;
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
const api = async (path, init) => {
  const r = await fetch(base + path, init);
  return { status: r.status, body: r.headers.get("content-type")?.includes("json") ? await r.json() : await r.text() };
};

await step("status", async () => {
  await page.goto(base + "/");
  assert.equal(await page.title(), "Hearth");
  await page.getByTestId("model-name").waitFor();
  assert.match(await text("model-name"), /SmolLM2-135M-Instruct/);
  assert.equal(await text("model-arch"), "llama");
  assert.equal(await text("model-quant"), "Q4_1");
  assert.equal(await text("model-params"), "134.5M");
  assert.equal(await text("model-context"), "8,192 tokens");
  assert.equal(await text("server-state"), "READY");
  assert.equal(await text("endpoint"), `${base}/v1`);
  await page.getByTestId("copy-endpoint").click();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), `${base}/v1`);
  assert.equal(await text("copy-endpoint"), "Copied");
});

await step("connect-agent", async () => {
  // Loopback: the base URL is the page's own, with ready snippets per agent.
  await page.goto(base + "/");
  await page.getByTestId("connect-agent").waitFor();
  assert.equal(await text("agent-base-url"), `${base}/v1`);
  await page.getByTestId("agent-tab-aider").click();
  assert.match(await text("agent-snippet"), new RegExp(`--openai-api-base ${base}/v1 `));
  await page.getByTestId("agent-tab-claude").click();
  assert.match(await text("agent-snippet"), new RegExp(`ANTHROPIC_BASE_URL=${base} `));
  await page.getByTestId("agent-tab-opencode").click();
  assert.equal(JSON.parse(await text("agent-snippet")).provider.hearth.options.baseURL, `${base}/v1`);
  await page.getByTestId("copy-agent-snippet").click();
  assert.equal(JSON.parse(await page.evaluate(() => navigator.clipboard.readText())).model, "hearth/default");
});

await step("status-live", async () => {
  // A streaming request in flight shows up as running, with tok/s.
  const controller = new AbortController();
  const request = fetch(base + "/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json" },
    signal: controller.signal,
    body: JSON.stringify({ messages: [{ role: "user", content: "Count to one hundred." }], max_tokens: 400, ignore_eos: true, stream: true }),
  });
  const response = await request;
  const reader = response.body.getReader();
  await reader.read();
  await page.waitForFunction(() => document.querySelector('[data-testid="server-state"]')?.textContent === "serving");
  assert.match(await text("running"), /^1 \//);
  await page.waitForFunction(() => parseFloat(document.querySelector('[data-testid="tps"]')?.textContent ?? "0") > 0, null, { timeout: 15_000 });
  await page.screenshot({ path: join(shots, "status-serving.png"), fullPage: true });
  controller.abort();
  await page.waitForFunction(() => document.querySelector('[data-testid="server-state"]')?.textContent === "ready", null, { timeout: 15_000 });
});

await step("memory", async () => {
  await page.getByTestId("nav-memory").click();
  await page.getByTestId("memory-chart").locator("canvas").waitFor();
  assert.match(await text("mem-rss"), /Resident \(RSS\): \d+(\.\d)? (MiB|GiB)/);
  assert.match(await text("mem-mlx-active"), /MLX active: \d+(\.\d)? (MiB|KiB|GiB)/);
  assert.match(await text("mem-kv"), /KV cache: .* of \d+(\.\d)? (MiB|GiB)/);
  // Measured by the steps of status-live's request (and a GPU's warm-up).
  assert.match(await text("mem-step-working"), /Step working memory: \d+(\.\d)? (KiB|MiB|GiB)/);
  assert.match(await text("mem-pressure"), /^(NORMAL|WARNING|CRITICAL)$/);
  // The chart has a history: wait for a few samples to be drawn.
  await page.waitForFunction(() => /^([3-9]|\d{2,}) samples/.test(document.querySelector(".card p.muted")?.textContent ?? ""), null, { timeout: 15_000 });
  const legend = await page.getByTestId("memory-chart").innerText();
  for (const label of ["RSS", "MLX active", "MLX cache", "KV used"]) assert.ok(legend.includes(label), legend);
});

await step("chat", async () => {
  await page.getByTestId("nav-chat").click();
  await page.getByTestId("chat-temperature").evaluate((el) => {
    el.value = "0";
    el.dispatchEvent(new Event("input", { bubbles: true }));
  });
  await page.getByTestId("chat-input").fill("What is the capital of France?");
  await page.getByTestId("chat-send").click();
  await page.getByTestId("finish-reason").waitFor({ timeout: 120_000 });
  const answer = await text("assistant-content");
  assert.match(answer, /Paris/, answer);
  assert.match(await text("finish-reason"), /finish: stop · \d+ tokens/);
});

await step("chat-history-kept", async () => {
  await page.reload();
  await page.getByTestId("assistant-content").waitFor();
  assert.match(await text("assistant-content"), /Paris/);
  assert.match(await page.getByTestId("message-user").first().innerText(), /capital of France/);
});

// Steps that need an answer still streaming when they act (Stop, layout
// samples, another tab's changes) cannot rely on SmolLM2 to write a long
// one: it ends some answers in 4-8 tokens, under a second here. While `fn`
// runs, `p`'s chat requests carry the server's `ignore_eos`, so the real
// stream runs on until Stop is clicked.
async function withEndlessAnswers(p, fn) {
  const url = "**/v1/chat/completions";
  await p.route(url, (route) => {
    const body = JSON.parse(route.request().postData() ?? "{}");
    route.continue({ postData: JSON.stringify({ ...body, ignore_eos: true }) });
  });
  try {
    await fn();
  } finally {
    await p.unroute(url);
  }
}

await step("chat-stop", async () => {
  await page.getByTestId("chat-new").click();
  await withEndlessAnswers(page, async () => {
    await page.getByTestId("chat-input").fill("Write a very long story about a dragon who learns to cook. Make it at least two thousand words.");
    await page.getByTestId("chat-send").click();
    await page.waitForFunction(() => (document.querySelector('[data-testid="assistant-content"]')?.textContent ?? "").length > 20, null, { timeout: 120_000 });
    await page.getByTestId("chat-stop").click();
    await page.getByTestId("finish-reason").waitFor();
  });
  assert.equal(await text("finish-reason"), "stopped");
  const stoppedAt = (await text("assistant-content")).length;
  // The server cancels the job: nothing runs any more, the text stops growing.
  await expectEventually(async () => (await api("/api/status")).body.running === 0, "the stopped request to be cancelled");
  await page.waitForTimeout(500);
  assert.equal((await text("assistant-content")).length, stoppedAt);
  assert.equal(await page.getByTestId("chat-send").count(), 1);
});

await step("chat-sanitized", async () => {
  // Model output is untrusted: a stored answer carrying HTML/JS must render inert.
  await page.evaluate(() => {
    const hostile = [
      "**bold** and `code`",
      '<img src="x" onerror="window.__pwned = 1">',
      "<script>window.__pwned = 2</script>",
      "[click](javascript:window.__pwned=3)",
      '<a href="https://example.org" onclick="window.__pwned=4">site</a>',
      '<iframe src="javascript:window.__pwned=5"></iframe>',
    ].join("\n\n");
    const conversation = {
      id: "hostile", title: "Hostile output", system: "", temperature: 0, anonymize: false, updated: Date.now(),
      messages: [{ role: "user", content: "hi" }, { role: "assistant", content: hostile, finishReason: "stop" }],
    };
    localStorage.setItem("hearth.conversations.v1", JSON.stringify([conversation]));
  });
  await page.reload();
  const content = page.getByTestId("assistant-content");
  await content.waitFor();
  await page.waitForTimeout(300);
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  const html = await content.innerHTML();
  assert.ok(html.includes("<strong>bold</strong>"), html);
  assert.ok(!/onerror|onclick|<script|<iframe|javascript:/i.test(html), html);
  await page.locator('[data-testid="assistant-content"] a', { hasText: "site" }).click({ modifiers: [] }).catch(() => {});
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
});

// SmolLM2 sometimes loops without ending its answer, and on a loaded 2-core
// machine a whole answer can outlast a step (chat-anonymize once waited 120 s).
// Steps that only need the answer to be over wait `ms` for its end, then stop it.
async function finishOrStop(ms) {
  const reason = page.getByTestId("finish-reason").last();
  const ended = await reason.waitFor({ timeout: ms }).then(() => true, () => false);
  if (!ended) {
    if ((await page.getByTestId("chat-stop").count()) === 1) await page.getByTestId("chat-stop").click();
    await reason.waitFor({ timeout: 30_000 });
  }
}

await step("chat-anonymize", async () => {
  await page.evaluate(() => localStorage.clear());
  await page.reload();
  await page.getByTestId("chat-input").waitFor();
  await page.waitForTimeout(300);
  // Opening the page saves nothing (it would overwrite another tab's chats).
  assert.equal(await page.evaluate(() => localStorage.getItem("hearth.conversations.v1")), null);
  await page.getByTestId("chat-anonymize").check();
  await page.getByTestId("chat-input").fill("My name is John Smith and my e-mail is john.smith@example.com. Say hello.");
  await page.getByTestId("chat-send").click();
  await finishOrStop(60_000);
  const preview = await api("/api/privacy/preview", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ text: "x" }) });
  assert.equal(preview.status, 200, JSON.stringify(preview.body));
  const masked = page.getByTestId("masked-spans");
  await masked.waitFor();
  const marks = await masked.locator("mark").allInnerTexts();
  assert.ok(marks.some((m) => m.includes("john.smith@example.com")), JSON.stringify(marks));
});

await step("documents", async () => {
  const probe = await api("/api/extract?filename=probe.txt", { method: "POST", body: "hello" });
  assert.equal(probe.status, 200, JSON.stringify(probe.body));
  await page.getByTestId("chat-new").click();
  const file = join(shots, "notes.md");
  writeFileSync(file, "# Meeting notes\n\nThe launch code word is **marmalade**.\n");
  await page.getByTestId("chat-attach").setInputFiles(file);
  await page.getByTestId("attachment").waitFor();
  await page.getByTestId("attachment").locator("summary").click();
  assert.match(await page.getByTestId("attachment-text").inputValue(), /marmalade/);
  assert.match(await page.getByTestId("attachment").locator("summary").innerText(), /notes\.md · markdown · \d+ chars · \d+ tokens/);
  await page.getByTestId("chat-input").fill("What is the code word in the document? Answer with the word only.");
  await page.getByTestId("chat-send").click();
  await finishOrStop(60_000);
  assert.match(await page.getByTestId("message-user").last().innerText(), /Attached: notes\.md/);
  // A document larger than the context is refused with a message.
  const big = join(shots, "big.txt");
  writeFileSync(big, "lorem ipsum dolor sit amet ".repeat(4000));
  await page.getByTestId("chat-attach").setInputFiles(big);
  await page.getByTestId("context-warning").waitFor();
  assert.match(await text("context-warning"), /do not fit/);
});

await step("models", async () => {
  await page.getByTestId("nav-models").click();
  await page.getByTestId("models-table").waitFor();
  const rows = await page.getByTestId("model-row").allInnerTexts();
  assert.ok(rows.some((r) => r.includes("SmolLM2-135M-Instruct.Q4_1.gguf") && /served/i.test(r) && r.includes("yes")), rows.join("\n"));
});

await step("benchmark", async () => {
  await page.getByTestId("nav-bench").click();
  await page.getByTestId("bench-advanced").check();
  await page.getByTestId("bench-repeats").fill("1");
  await page.getByTestId("bench-lengths").fill("32, 128");
  await page.getByTestId("bench-concurrency").fill("2");
  await page.getByTestId("bench-max-tokens").fill("8");
  await page.getByTestId("bench-scenario-interference").uncheck();
  await page.getByTestId("bench-run").click();
  await page.getByTestId("bench-progress").waitFor();
  await page.waitForFunction(() => /step \d+ of \d+/.test(document.querySelector('[data-testid="bench-progress"]')?.textContent ?? ""), null, { timeout: 30_000 });
  await page.waitForFunction(() => document.querySelector('[data-testid="bench-state"]')?.textContent === "done", null, { timeout: 240_000 });
  await page.getByTestId("report").waitFor();
  const sweepRows = await page.getByTestId("report-sweep").locator("tbody tr").allInnerTexts();
  assert.equal(sweepRows.length, 2, sweepRows.join("\n"));
  assert.match(sweepRows[0], /^1\t\d/);
  assert.match(sweepRows[1], /^2\t\d/);
  const singleRows = await page.getByTestId("report-single").locator("tbody tr").allInnerTexts();
  assert.equal(singleRows.length, 2, singleRows.join("\n"));
  for (const chart of ["chart-tps", "chart-latency", "chart-prefill"]) await page.getByTestId(chart).locator("canvas").waitFor();
  assert.match(await page.getByTestId("report-crosscheck").innerText(), /counts agree/);
  assert.equal(await page.getByTestId("bench-history").locator("tbody tr").count(), 1);
});

await step("benchmark-exports", async () => {
  const history = page.getByTestId("bench-history");
  const [download] = await Promise.all([page.waitForEvent("download"), history.getByTestId("export-html").first().click()]);
  const htmlPath = join(shots, "report.html");
  await download.saveAs(htmlPath);
  const md = await page.evaluate(async () => {
    const a = document.querySelector('[data-testid="export-markdown"]');
    return (await fetch(a.getAttribute("href"))).text();
  });
  assert.match(md, /tok\/s/);
  writeFileSync(join(shots, "report.md"), md);
  const json = await page.evaluate(async () => {
    const a = document.querySelector('[data-testid="export-json"]');
    return (await fetch(a.getAttribute("href"))).json();
  });
  assert.equal(json.schema_version, 1);
  assert.ok(json.samples.length >= 6, String(json.samples.length));
  // The HTML file stands alone: open it with every network request refused.
  const offline = await context.newPage();
  const requested = [];
  await offline.route("**/*", (route) => {
    if (route.request().url().startsWith("file:")) return route.continue();
    requested.push(route.request().url());
    return route.abort();
  });
  await offline.goto("file://" + htmlPath);
  await offline.getByTestId("report").waitFor();
  await offline.getByTestId("chart-tps").locator("canvas").waitFor();
  assert.equal(await offline.getByTestId("report-sweep").locator("tbody tr").count(), 2);
  assert.deepEqual(requested, []);
  await offline.screenshot({ path: join(shots, "report-html.png"), fullPage: true });
  await offline.close();
  assert.ok(readFileSync(htmlPath, "utf8").includes('id="hearth-report"'));
});

await step("models-switch", async () => {
  // Switch the served model to the tiny Qwen3 in the models folder, then back.
  await page.getByTestId("nav-models").click();
  const row = page.locator('[data-testid="model-row"][data-model="qwen3-tiny"]');
  await row.getByTestId("model-load").click();
  await expectEventually(async () => (await api("/api/status")).body.model?.id === "qwen3-tiny", "qwen3-tiny to be served", 120_000);
  await page.waitForFunction(() => document.querySelector('[data-model="qwen3-tiny"]')?.textContent?.includes("served"), null, { timeout: 15_000 });
  // The load reported the weights read, tensors and bytes, up to the total.
  const load = (await api("/api/status")).body.manager.load;
  assert.equal(load.model, "qwen3-tiny");
  assert.ok(load.done && load.bytes_total > 0 && load.bytes_done === load.bytes_total, JSON.stringify(load));
  assert.ok(load.tensors_total > 0 && load.tensors_done === load.tensors_total, JSON.stringify(load));
  await page.getByTestId("load-last").waitFor();
  assert.match(await text("load-last"), new RegExp(`Last load: qwen3-tiny, ${load.tensors_total} tensors, [\\d.]+ (KiB|MiB|GiB) in [\\d.]+ s`));
  await page.screenshot({ path: join(shots, "models-switched.png"), fullPage: true });
  await page.getByTestId("nav-status").click();
  await page.waitForFunction(() => document.querySelector('[data-testid="model-arch"]')?.textContent === "qwen3");
  // Unloaded: the state says so and the API answers 503.
  await page.getByTestId("nav-models").click();
  await page.getByTestId("model-unload").click();
  await expectEventually(async () => (await api("/api/status")).body.state === "stopped", "the model to be unloaded");
  const refused = await api("/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ messages: [{ role: "user", content: "hi" }] }) });
  assert.equal(refused.status, 503);
  assert.equal(refused.body.error.code, "model_not_loaded");
  await page.getByTestId("nav-status").click();
  await page.getByTestId("model-none").waitFor();
  assert.equal(await text("server-state"), "STOPPED");
  await page.getByTestId("nav-models").click();
  await page.locator('[data-testid="model-row"][data-model="SmolLM2-135M-Instruct.Q4_1.gguf"]').getByTestId("model-load").click();
  await expectEventually(async () => (await api("/api/status")).body.state === "ready", "SmolLM2 to be served again", 120_000);
});

await step("downloads", async () => {
  // The test's local hub serves `test-org/small` slowly: start it, Cancel,
  // Resume; it finishes from where it stopped, sha256 checked.
  await page.getByTestId("nav-models").click();
  await page.getByTestId("download-repo").fill("test-org/small");
  await page.getByTestId("download-start").click();
  const row = page.locator('[data-testid="download-row"][data-repo="test-org/small"]').last();
  await page.waitForFunction(() => {
    const rows = [...document.querySelectorAll('[data-testid="download-row"][data-repo="test-org/small"]')];
    const t = rows.at(-1)?.textContent ?? "";
    return /downloading/.test(t) && /(KiB|MiB) of/.test(t);
  }, null, { timeout: 30_000 });
  await row.getByTestId("download-cancel").click();
  await page.waitForFunction(() => /cancelled/.test([...document.querySelectorAll('[data-testid="download-row"][data-repo="test-org/small"]')].at(-1)?.textContent ?? ""));
  await page.screenshot({ path: join(shots, "download-cancelled.png"), fullPage: true });
  await row.getByTestId("download-resume").click();
  await page.waitForFunction(() => {
    const t = [...document.querySelectorAll('[data-testid="download-row"][data-repo="test-org/small"]')].at(-1)?.textContent ?? "";
    return /done/.test(t);
  }, null, { timeout: 60_000 });
  const done = await page.locator('[data-testid="download-row"][data-repo="test-org/small"]').last().innerText();
  assert.match(done, /3\/3 files/, done);
  assert.match(done, /resumed/, done);
  assert.match(done, /1 sha256 checked/, done);
  const list = (await api("/api/models/downloads")).body.filter((d) => d.repo === "test-org/small");
  assert.deepEqual(list.map((d) => d.state), ["cancelled", "done"]);
  assert.ok(list[1].bytes_resumed > 0 && list[1].bytes_done === list[1].bytes_total, JSON.stringify(list[1]));
});

await step("chat-no-layout-jump", async () => {
  // At the Tauri window size, the composer and the message list keep
  // their place while an answer streams (only the list's content grows).
  await page.setViewportSize({ width: 900, height: 640 });
  await page.getByTestId("nav-chat").click();
  await page.getByTestId("chat-new").click();
  const boxes = [];
  // The 8 s of sampling start at the first streamed text; the answer runs
  // on until Stop (withEndlessAnswers).
  await withEndlessAnswers(page, async () => {
    await page.getByTestId("chat-input").fill("Count from one to forty in words.");
    await page.getByTestId("chat-send").click();
    await page.waitForFunction(() => {
      const answer = document.querySelector('[data-testid="assistant-content"]');
      return (answer?.textContent ?? "").length > 0;
    }, null, { timeout: 120_000 });
    const deadline = Date.now() + 8_000;
    while (Date.now() < deadline && (await page.getByTestId("chat-stop").count()) === 1) {
      const box = await page.evaluate(() => {
        const r = (id) => document.querySelector(`[data-testid="${id}"]`)?.getBoundingClientRect();
        const input = r("chat-input");
        const list = r("chat-messages");
        return input && list ? { input: [input.x, input.y, input.width, input.height], list: [list.x, list.y, list.width, list.height], scroll: document.scrollingElement.scrollTop } : null;
      });
      if (box) boxes.push(box);
      await page.waitForTimeout(50);
    }
    assert.equal(await page.getByTestId("chat-stop").count(), 1, "the answer ended by itself despite ignore_eos");
    await page.getByTestId("chat-stop").click();
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="finish-reason"]').length > 0, null, { timeout: 120_000 });
  });
  assert.ok(boxes.length >= 5, `only ${boxes.length} samples while streaming`);
  const first = JSON.stringify(boxes[0]);
  for (const b of boxes) assert.equal(JSON.stringify(b), first, "the layout moved while streaming");
  await page.screenshot({ path: join(shots, "900x640-chat-streamed.png") });
});

await step("chat-tabs", async () => {
  // Two tabs of one browser share the stored conversations: a change in one
  // shows in the other without a reload, neither overwrites the other's, and
  // a deletion in one reaches the other.
  await page.goto(base + "/#/chat");
  await page.evaluate(() => localStorage.removeItem("hearth.conversations.v1"));
  await page.reload();
  const other = await context.newPage();
  other.on("pageerror", (e) => consoleErrors.push(String(e)));
  try {
    await other.goto(base + "/#/chat");
    await page.getByTestId("chat-input").waitFor();
    await other.getByTestId("chat-input").waitFor();
    const items = (p) => p.locator("aside.conversations li");
    const stored = () => page.evaluate(() =>
      JSON.parse(localStorage.getItem("hearth.conversations.v1") ?? "[]").map((c) => c.system).sort());
    // Each tab opened with a draft of its own, which is not stored.
    assert.equal(await items(page).count(), 1);
    assert.equal(await items(other).count(), 1);
    assert.deepEqual(await stored(), []);
    await page.getByTestId("chat-system").fill("tab one");
    await expectEventually(async () => (await items(other).count()) === 2, "the second tab to list the first's conversation", 5_000);
    await other.getByTestId("chat-system").fill("tab two");
    await expectEventually(async () => (await items(page).count()) === 2, "the first tab to list the second's conversation", 5_000);
    assert.deepEqual(await stored(), ["tab one", "tab two"]);
    // The second tab deletes the first tab's conversation.
    let one = -1;
    for (let i = 0; i < 2 && one < 0; i++) {
      await items(other).nth(i).locator("a").click();
      if ((await other.getByTestId("chat-system").inputValue()) === "tab one") one = i;
    }
    assert.ok(one >= 0, "the second tab does not show the first tab's system prompt");
    await items(other).nth(one).getByTitle("Delete").click();
    await expectEventually(async () => (await items(page).count()) === 1, "the deletion to reach the first tab", 5_000);
    assert.equal(await page.getByTestId("chat-system").inputValue(), "tab two");
    assert.deepEqual(await stored(), ["tab two"]);
    await page.reload();
    await page.getByTestId("chat-input").waitFor();
    assert.equal(await items(page).count(), 1);
    assert.equal(await page.getByTestId("chat-system").inputValue(), "tab two");
  } finally {
    await other.close();
    await page.evaluate(() => localStorage.removeItem("hearth.conversations.v1"));
  }
});

await step("chat-tabs-streaming", async () => {
  // An answer streaming in one tab and a setting changed in another tab of
  // the same conversation meanwhile: both survive, in both tabs and stored.
  // The answer streams on until Stop (withEndlessAnswers).
  await withEndlessAnswers(page, async () => {
    await page.goto(base + "/#/chat");
    await page.evaluate(() => localStorage.removeItem("hearth.conversations.v1"));
    await page.reload();
    await page.getByTestId("chat-input").waitFor();
    await page.getByTestId("chat-system").fill("streamer");
    await page.getByTestId("chat-input").fill("Write a very long story about a dragon who learns to cook. Make it at least two thousand words.");
    await page.getByTestId("chat-send").click();
    const streamed = (p) => p.evaluate(() => document.querySelector('[data-testid="assistant-content"]')?.textContent ?? "");
    await page.waitForFunction(() => (document.querySelector('[data-testid="assistant-content"]')?.textContent ?? "").length > 20, null, { timeout: 120_000 });
    const other = await context.newPage();
    other.on("pageerror", (e) => consoleErrors.push(String(e)));
    try {
      await other.goto(base + "/#/chat");
      await other.getByTestId("chat-input").waitFor();
      const items = other.locator("aside.conversations li");
      let found = false;
      for (let i = 0; i < (await items.count()) && !found; i++) {
        await items.nth(i).locator("a").click();
        found = (await other.getByTestId("chat-system").inputValue()) === "streamer";
      }
      assert.ok(found, "the second tab does not list the streaming conversation");
      // Several changes while the first tab streams: each must stay, in both
      // tabs (a merge that takes a conversation whole from the side changed
      // last loses some of them to the tokens streamed meanwhile).
      const temperatures = async () => [
        await page.getByTestId("chat-temperature").inputValue(),
        await other.getByTestId("chat-temperature").inputValue(),
      ];
      const settings = ["0.05", "0.1", "0.15", "0.2", "0.25", "0.3"];
      for (const t of settings) {
        await other.getByTestId("chat-temperature").evaluate((el, v) => {
          el.value = v;
          el.dispatchEvent(new Event("input", { bubbles: true }));
        }, t);
        await expectEventually(async () => (await temperatures()).every((x) => x === t), `both tabs to show temperature ${t}`, 5_000);
        await other.waitForTimeout(300);
        assert.deepEqual(await temperatures(), [t, t], `temperature ${t} was undone while the answer streamed`);
      }
      // The first tab streamed throughout, and streams on; then it is stopped.
      const before = (await streamed(page)).length;
      assert.equal(await page.getByTestId("chat-stop").count(), 1, "the answer finished before the other tab's changes did");
      await expectEventually(async () => (await streamed(page)).length > before + 10, "the answer to stream on after the changes", 30_000);
      await page.getByTestId("chat-stop").click();
      await page.getByTestId("finish-reason").waitFor();
      const answer = await streamed(page);
      await expectEventually(async () => (await temperatures()).every((t) => t === "0.3"), "both tabs to keep the other tab's temperature", 5_000);
      await expectEventually(async () => (await streamed(other)) === answer, "the second tab to show the whole answer", 5_000);
      // A tab in the background saves a moment later (its effects wait for a frame).
      const stored = () => page.evaluate(() => JSON.parse(localStorage.getItem("hearth.conversations.v1") ?? "[]"));
      await expectEventually(async () => (await stored()).at(0)?.messages.at(-1).finishReason === "stopped", "the stopped answer to be saved", 5_000);
      const [saved, ...rest] = await stored();
      assert.equal(rest.length, 0);
      assert.equal(saved.temperature, 0.3);
      await page.reload();
      await page.getByTestId("assistant-content").waitFor();
      assert.equal(await page.getByTestId("chat-temperature").inputValue(), "0.3");
      assert.equal(await streamed(page), answer);
    } finally {
      await other.close();
      await page.evaluate(() => localStorage.removeItem("hearth.conversations.v1"));
    }
  });
});

await step("theme", async () => {
  // The toggle cycles auto -> dark -> light -> auto, a choice survives a
  // reload, "auto" follows the system, and a page that only starts writes
  // nothing (so it cannot overwrite a choice made in another tab meanwhile).
  const shown = () => page.evaluate(() => document.documentElement.dataset.theme);
  const stored = () => page.evaluate(() => localStorage.getItem("hearth.theme"));
  await page.goto(base + "/");
  await page.getByTestId("model-name").waitFor();
  await page.evaluate(() => localStorage.removeItem("hearth.theme"));
  await page.reload();
  await page.getByTestId("model-name").waitFor();
  await page.waitForTimeout(300);
  assert.equal(await stored(), null, "starting the page wrote a theme");
  const toggle = page.getByTestId("theme-toggle");
  assert.equal(await toggle.textContent(), "Theme: auto");
  for (const scheme of ["dark", "light"]) {
    await page.emulateMedia({ colorScheme: scheme });
    await page.reload();
    await page.getByTestId("model-name").waitFor();
    assert.equal(await shown(), scheme, `auto with a ${scheme} system`);
  }
  const showsSoon = (theme) => expectEventually(async () => (await shown()) === theme, `the page to turn ${theme}`, 5_000);
  await toggle.click();
  assert.equal(await toggle.textContent(), "Theme: dark");
  await showsSoon("dark");
  assert.equal(await stored(), "dark");
  await page.reload();
  await page.getByTestId("model-name").waitFor();
  assert.equal(await toggle.textContent(), "Theme: dark");
  assert.equal(await shown(), "dark");
  await toggle.click();
  await showsSoon("light");
  assert.equal(await stored(), "light");
  await toggle.click();
  assert.equal(await toggle.textContent(), "Theme: auto");
  assert.equal(await stored(), "auto");
  await showsSoon("light"); // auto with a light system
  await page.emulateMedia({ colorScheme: "dark" });
  await showsSoon("dark"); // auto follows the system while the page is open
  await page.emulateMedia({ colorScheme: null });
  await page.evaluate(() => localStorage.removeItem("hearth.theme"));
});

await step("layout-sizes", async () => {
  // The Tauri window (900x640) and a phone (390x844), dark and light:
  // every page renders its main element without a horizontal scrollbar.
  const ready = {
    status: () => page.getByTestId("model-name").waitFor(),
    memory: () => page.getByTestId("memory-chart").locator("canvas").waitFor(),
    bench: () => page.getByTestId("bench-run").waitFor(),
    chat: () => page.getByTestId("chat-input").waitFor(),
    models: () => page.getByTestId("models-table").waitFor(),
  };
  await page.goto(base + "/");
  await ready.status();
  for (const [width, height] of [[900, 640], [390, 844]]) {
    await page.setViewportSize({ width, height });
    for (const theme of ["dark", "light"]) {
      await page.evaluate((t) => localStorage.setItem("hearth.theme", t), theme);
      for (const [name, waitReady] of Object.entries(ready)) {
        await page.goto(`${base}/#/${name}`);
        await page.reload();
        await waitReady();
        await page.waitForTimeout(150);
        assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), theme);
        const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        assert.ok(overflow <= 0, `${name} at ${width}x${height} (${theme}) is ${overflow}px too wide`);
        await page.screenshot({ path: join(shots, `${width}x${height}-${theme}-${name}.png`), fullPage: true });
      }
    }
  }
  await page.evaluate(() => localStorage.removeItem("hearth.theme"));
  await page.setViewportSize({ width: 1280, height: 900 });
});

await step("no-page-errors", async () => {
  assert.deepEqual(consoleErrors, []);
});

async function expectEventually(check, what, timeoutMs = 15_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out waiting for ${what}`);
}

await browser.close();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
