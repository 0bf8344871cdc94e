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
  updated: number;
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

/**
 * This tab's conversations merged with the stored list another tab wrote.
 * `synced` holds the ids the stored list had when this tab last read or
 * wrote it, which tells a conversation deleted on one side from one created
 * on the other: stored but not here and synced means deleted here; here but
 * not stored and synced means deleted in another tab. A conversation on both
 * sides is taken whole from the side that changed it last (the stored one on
 * a tie). The result is newest first by id (an id starts with its creation
 * time), so two tabs holding the same conversations write the same text and
 * neither answers the other's write with one of its own.
 */
export function mergeConversations(mine: Conversation[], stored: Conversation[], synced: ReadonlySet<string>): Conversation[] {
  const mineIds = new Set(mine.map((c) => c.id));
  const storedById = new Map(stored.map((c) => [c.id, c]));
  const merged = stored.filter((c) => !mineIds.has(c.id) && !synced.has(c.id));
  for (const c of mine) {
    const theirs = storedById.get(c.id);
    if (theirs) merged.push(theirs.updated >= c.updated ? theirs : c);
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
