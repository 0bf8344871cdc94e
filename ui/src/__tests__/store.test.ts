import { describe, expect, it } from "vitest";
import { Conversation, mergeConversations, newConversation, parseList, storedText } from "../chat/store";

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
