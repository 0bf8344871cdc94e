import { describe, expect, it } from "vitest";
import { downloadShare, latestPerRepo, loadLabel, resumable, share } from "../progress";
import { nextTheme, parseTheme, resolveTheme } from "../theme";

describe("progress", () => {
  it("clamps and guards the share", () => {
    expect(share(0, 100)).toBe(0);
    expect(share(50, 200)).toBe(0.25);
    expect(share(300, 200)).toBe(1);
    expect(share(5, 0)).toBe(0);
    expect(share(5, null)).toBe(0);
    expect(share(-1, 10)).toBe(0);
  });

  it("counts a download by bytes when sizes are known, else by files", () => {
    expect(downloadShare({ bytes_done: 30, bytes_total: 120, files_done: 3, files_total: 4 })).toBe(0.25);
    expect(downloadShare({ bytes_done: 30, bytes_total: null, files_done: 1, files_total: 4 })).toBe(0.25);
    expect(downloadShare({ bytes_done: 0, bytes_total: null, files_done: 0, files_total: 0 })).toBe(0);
  });

  it("labels a load with bytes, tensors and time", () => {
    const label = loadLabel({
      model: "m", tensors_done: 120, tensors_total: 273, bytes_done: 42 * 1024 * 1024, bytes_total: 98 * 1024 * 1024, seconds: 1.23, done: false,
    });
    expect(label).toBe("42.0 MiB of 98.0 MiB · 120/273 tensors · 1.2 s");
  });

  it("finds the newest attempt of each repository", () => {
    const latest = latestPerRepo([{ repo: "a/x" }, { repo: "b/y" }, { repo: "a/x" }]);
    expect([...latest].sort()).toEqual([1, 2]);
    expect(latestPerRepo([]).size).toBe(0);
  });

  it("offers resume for cancelled and failed downloads only", () => {
    expect(resumable({ state: "cancelled" })).toBe(true);
    expect(resumable({ state: "failed" })).toBe(true);
    expect(resumable({ state: "downloading" })).toBe(false);
    expect(resumable({ state: "done" })).toBe(false);
  });
});

describe("theme", () => {
  it("parses, cycles and resolves", () => {
    expect(parseTheme("light")).toBe("light");
    expect(parseTheme("purple")).toBe("auto");
    expect(parseTheme(null)).toBe("auto");
    expect(nextTheme("auto")).toBe("dark");
    expect(nextTheme("dark")).toBe("light");
    expect(nextTheme("light")).toBe("auto");
    expect(resolveTheme("auto", true)).toBe("dark");
    expect(resolveTheme("auto", false)).toBe("light");
    expect(resolveTheme("light", true)).toBe("light");
  });
});
