// Conversations kept locally in the browser (localStorage), never on the server.
import type { MaskedEntity } from "./stream";

export interface StoredMessage {
  role: "user" | "assistant";
  content: string;
  reasoning?: string;
  /** Spans the server masked in this message (Anonymize on). */
  masked?: MaskedEntity[];
  /** What the user typed, when `content` also carries attached documents. */
  typed?: string;
  /** Documents attached to this message (their text is part of the request). */
  documents?: { name: string; chars: number }[];
  error?: string;
  finishReason?: string | null;
  completionTokens?: number | null;
}

export interface Conversation {
  id: string;
  title: string;
  system: string;
  temperature: number;
  anonymize: boolean;
  messages: StoredMessage[];
  /** When anything in it last changed (ms since the epoch). */
  updated: number;
  /** When its title or messages last changed; `updated` where absent (lists saved before it). */
  messagesUpdated?: number;
  /** When its system prompt, temperature or anonymize switch last changed; `updated` where absent. */
  settingsUpdated?: number;
  /** A new conversation nobody has touched yet: kept in this tab only. */
  draft?: boolean;
}

const KEY = "hearth.conversations.v1";

export function readStoredText(): string | null {
  try {
    return localStorage.getItem(KEY);
  } catch {
    return null;
  }
}

export function parseList(raw: string | null): Conversation[] {
  try {
    const list = raw ? (JSON.parse(raw) as Conversation[]) : [];
    return Array.isArray(list) ? list : [];
  } catch {
    return [];
  }
}

/** The text stored for a list: drafts stay in their tab. */
export const storedText = (list: Conversation[]) => JSON.stringify(list.filter((c) => !c.draft));

/** Writes the list's text; false when storage refused it (full or disabled). */
export function writeStoredText(raw: string): boolean {
  try {
    localStorage.setItem(KEY, raw);
    return true;
  } catch {
    return false;
  }
}

/** True when the stored list changes when this key changes (`null`: storage was cleared). */
export const isConversationsKey = (key: string | null) => key === null || key === KEY;

/** The two parts of a conversation that change independently: what was said, and how to say it. */
type Part = (c: Conversation) => Record<string, unknown>;
const messagePart = (c: Conversation) => ({ title: c.title, messages: c.messages });
const settingsPart = (c: Conversation) => ({ system: c.system, temperature: c.temperature, anonymize: c.anonymize });
const messagesAt = (c: Conversation) => c.messagesUpdated ?? c.updated;
const settingsAt = (c: Conversation) => c.settingsUpdated ?? c.updated;

/**
 * One conversation in a fixed key order: two tabs holding the same
 * conversation must write the same text, or each would answer the other's
 * write with its own.
 */
function canonical(c: Conversation): Conversation {
  const out: Conversation = {
    id: c.id,
    ...messagePart(c),
    ...settingsPart(c),
    updated: c.updated,
    messagesUpdated: messagesAt(c),
    settingsUpdated: settingsAt(c),
  };
  if (c.draft) out.draft = true;
  return out;
}

/**
 * `after` (a change of `before`) stamped at `now`: each part that changed
 * gets the time, so a merge can take each part from the tab that changed it.
 */
export function stamp(before: Conversation, after: Conversation, now: number): Conversation {
  const changed = (part: Part) => {
    const was = part(before);
    return Object.entries(part(after)).some(([k, v]) => was[k] !== v);
  };
  return canonical({
    ...after,
    updated: now,
    messagesUpdated: changed(messagePart) ? now : messagesAt(before),
    settingsUpdated: changed(settingsPart) ? now : settingsAt(before),
    draft: undefined,
  });
}

/** Of two versions of a part, the one changed last; on a tie the larger text, so every tab picks the same. */
function later(mine: Conversation, theirs: Conversation, at: (c: Conversation) => number, part: Part) {
  if (at(mine) !== at(theirs)) return at(mine) > at(theirs) ? mine : theirs;
  return JSON.stringify(part(mine)) > JSON.stringify(part(theirs)) ? mine : theirs;
}

/**
 * A conversation changed in two tabs: its messages (and title) from the tab
 * that changed them last, its settings likewise, so an answer streaming in
 * one tab and a setting changed in another both survive.
 */
function mergeOne(mine: Conversation, theirs: Conversation): Conversation {
  const said = later(mine, theirs, messagesAt, messagePart);
  const how = later(mine, theirs, settingsAt, settingsPart);
  return canonical({
    ...said,
    ...settingsPart(how),
    updated: Math.max(mine.updated, theirs.updated),
    messagesUpdated: messagesAt(said),
    settingsUpdated: settingsAt(how),
  });
}

/**
 * This tab's conversations merged with the stored list another tab wrote.
 * `synced` holds the ids the stored list had when this tab last read or
 * wrote it, which tells a conversation deleted on one side from one created
 * on the other: stored but not here and synced means deleted here; here but
 * not stored and synced means deleted in another tab. A conversation on both
 * sides takes its messages from the side that changed them last and its
 * settings from the side that changed those last. The result is newest
 * first by id (an id starts with its creation time), so two tabs holding the
 * same conversations write the same text and neither answers the other's
 * write with one of its own.
 */
export function mergeConversations(mine: Conversation[], stored: Conversation[], synced: ReadonlySet<string>): Conversation[] {
  const mineIds = new Set(mine.map((c) => c.id));
  const storedById = new Map(stored.map((c) => [c.id, c]));
  const merged = stored.filter((c) => !mineIds.has(c.id) && !synced.has(c.id));
  for (const c of mine) {
    const theirs = storedById.get(c.id);
    if (theirs) merged.push(mergeOne(c, theirs));
    else if (c.draft || !synced.has(c.id)) merged.push(c);
  }
  return merged.sort((a, b) => (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
}

export function newConversation(): Conversation {
  return {
    id: `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`,
    title: "New conversation",
    system: "You are a helpful assistant.",
    temperature: 0.7,
    anonymize: false,
    messages: [],
    updated: Date.now(),
    draft: true,
  };
}
