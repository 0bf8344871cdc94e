import { describe, expect, it } from "vitest";
import { Conversation, mergeConversations, newConversation, parseList, stamp, storedText } from "../chat/store";

const conv = (id: string, updated: number, title = id): Conversation => ({
  ...newConversation(),
  id,
  title,
  updated,
  draft: undefined,
});
const ids = (list: Conversation[]) => list.map((c) => c.id);

describe("conversations shared by tabs", () => {
  it("takes conversations another tab created and keeps this tab's new ones, newest first", () => {
    const mine = [conv("m3-here", 5), conv("m1-a", 1)];
    const stored = [conv("m2-there", 6), conv("m1-a", 1)];
    expect(ids(mergeConversations(mine, stored, new Set(["m1-a"])))).toEqual(["m3-here", "m2-there", "m1-a"]);
  });

  it("gives two tabs with the same conversations the same list, whatever each one's order", () => {
    const one = [conv("b", 2), conv("a", 1, "one")];
    const two = [conv("a", 1, "two"), conv("b", 2)];
    const synced = new Set(["a", "b"]);
    const fromOne = storedText(mergeConversations(one, two, synced));
    expect(storedText(mergeConversations(two, parseList(fromOne), synced))).toBe(fromOne);
  });

  it("orders new conversations as they were created", () => {
    const older = newConversation();
    const list = [conv(`${(Date.now() + 1000).toString(36)}-zzzzzz`, 1), older];
    expect(ids(mergeConversations(list.reverse(), [], new Set()))[1]).toBe(older.id);
  });

  it("keeps the side that changed a conversation last", () => {
    const mine = [conv("b", 10, "mine"), conv("a", 3, "mine")];
    const stored = [conv("b", 9, "theirs"), conv("a", 4, "theirs")];
    const merged = mergeConversations(mine, stored, new Set(["a", "b"]));
    expect(merged.map((c) => c.title)).toEqual(["mine", "theirs"]);
  });

  it("keeps an answer streamed in one tab and a setting changed in another at the same time", () => {
    const start = stamp(conv("c", 1), { ...conv("c", 1), messages: [{ role: "assistant", content: "Hel" }] }, 10);
    // The other tab read "Hel", then changed the temperature while this one streamed on.
    const there = stamp(start, { ...start, temperature: 0.1 }, 12);
    const here = stamp(start, { ...start, messages: [{ role: "assistant", content: "Hello" }] }, 13);
    for (const [mine, stored] of [[here, there], [there, here]]) {
      const [c] = mergeConversations([mine], [stored], new Set(["c"]));
      expect(c.messages[0].content).toBe("Hello");
      expect(c.temperature).toBe(0.1);
    }
    // Both tabs write the same text, so neither answers the other's write.
    const fromHere = storedText(mergeConversations([here], [there], new Set(["c"])));
    expect(storedText(mergeConversations([there], parseList(fromHere), new Set(["c"])))).toBe(fromHere);
  });

  it("stamps only the part a change touched", () => {
    const c = conv("c", 1);
    const renamed = stamp(c, { ...c, system: "terse" }, 5);
    expect([renamed.settingsUpdated, renamed.messagesUpdated, renamed.updated]).toEqual([5, 1, 5]);
    const said = stamp(renamed, { ...renamed, messages: [{ role: "user", content: "hi" }] }, 7);
    expect([said.settingsUpdated, said.messagesUpdated, said.updated]).toEqual([5, 7, 7]);
    expect(said.draft).toBeUndefined();
  });

  it("picks the same side on a tie in every tab", () => {
    const one = { ...conv("c", 4, "one"), messagesUpdated: 4, settingsUpdated: 4 };
    const two = { ...conv("c", 4, "two"), messagesUpdated: 4, settingsUpdated: 4 };
    const a = mergeConversations([one], [two], new Set(["c"]));
    const b = mergeConversations([two], [one], new Set(["c"]));
    expect(storedText(a)).toBe(storedText(b));
  });

  it("drops a conversation deleted in another tab, and one deleted here stays deleted", () => {
    const mine = [conv("kept", 1), conv("deleted-there", 1)];
    const stored = [conv("deleted-here", 1), conv("kept", 1)];
    const synced = new Set(["kept", "deleted-there", "deleted-here"]);
    expect(ids(mergeConversations(mine, stored, synced))).toEqual(["kept"]);
  });

  it("keeps drafts in their tab: never stored, never dropped by a merge", () => {
    const draft = newConversation();
    expect(draft.draft).toBe(true);
    const merged = mergeConversations([draft], [conv("x", 1)], new Set());
    expect(ids(merged).sort()).toEqual([draft.id, "x"].sort());
    expect(ids(parseList(storedText(merged)))).toEqual(["x"]);
  });

  it("reads a missing or damaged stored list as empty", () => {
    expect(parseList(null)).toEqual([]);
    expect(parseList("{not json")).toEqual([]);
    expect(parseList('{"a":1}')).toEqual([]);
  });
});
