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
}

const KEY = "hearth.conversations.v1";

export function loadConversations(): Conversation[] {
  try {
    const raw = localStorage.getItem(KEY);
    const list = raw ? (JSON.parse(raw) as Conversation[]) : [];
    return Array.isArray(list) ? list : [];
  } catch {
    return [];
  }
}

export function saveConversations(list: Conversation[]): void {
  try {
    localStorage.setItem(KEY, JSON.stringify(list));
  } catch {
    // storage full or disabled: the conversation lives until the tab closes
  }
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
  };
}
