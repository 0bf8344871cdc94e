import { describe, expect, it } from "vitest";
import { isKeyError, KEY_STORAGE, KeyStorage, loadKey, saveKey, withKey } from "../auth/key";

function memoryStorage(): KeyStorage & { map: Map<string, string> } {
  const map = new Map<string, string>();
  return {
    map,
    getItem: (k) => map.get(k) ?? null,
    setItem: (k, v) => void map.set(k, v),
    removeItem: (k) => void map.delete(k),
  };
}

describe("API key storage", () => {
  it("keeps a trimmed key and forgets it when saved empty", () => {
    const storage = memoryStorage();
    expect(loadKey(storage)).toBeNull();
    saveKey("  secret-1 \n", storage);
    expect(storage.map.get(KEY_STORAGE)).toBe("secret-1");
    expect(loadKey(storage)).toBe("secret-1");
    saveKey("   ", storage);
    expect(loadKey(storage)).toBeNull();
  });

  it("treats a blank stored value as no key", () => {
    const storage = memoryStorage();
    storage.setItem(KEY_STORAGE, "  ");
    expect(loadKey(storage)).toBeNull();
  });
});

describe("withKey", () => {
  it("adds a bearer header and keeps the caller's headers", () => {
    const init = withKey({ method: "POST", headers: { "content-type": "application/json", "X-Hearth-Anonymize": "true" } }, "k1");
    const headers = new Headers(init.headers);
    expect(init.method).toBe("POST");
    expect(headers.get("authorization")).toBe("Bearer k1");
    expect(headers.get("content-type")).toBe("application/json");
    expect(headers.get("x-hearth-anonymize")).toBe("true");
  });

  it("leaves requests alone without a key, and an explicit Authorization wins", () => {
    const plain = withKey({ headers: { a: "b" } }, null);
    expect(new Headers(plain.headers).has("authorization")).toBe(false);
    expect(withKey(undefined, null)).toEqual({});
    const explicit = withKey({ headers: { Authorization: "Bearer other" } }, "k1");
    expect(new Headers(explicit.headers).get("authorization")).toBe("Bearer other");
  });

  it("only 401 means a key problem", () => {
    expect(isKeyError(401)).toBe(true);
    for (const status of [200, 403, 404, 429, 503]) expect(isKeyError(status)).toBe(false);
  });
});
