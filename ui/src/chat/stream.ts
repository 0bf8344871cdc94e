// Streaming chat completions over the public `/v1/chat/completions` (SSE),
// with an AbortSignal for the Stop button.
import { apiFetch } from "../auth/key";

export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

export interface StreamOptions {
  messages: ChatMessage[];
  temperature: number;
  anonymize: boolean;
  signal: AbortSignal;
  onDelta: (content: string, reasoning: string) => void;
}

export interface StreamResult {
  finishReason: string | null;
  completionTokens: number | null;
  promptTokens: number | null;
}

export async function streamChat(options: StreamOptions): Promise<StreamResult> {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (options.anonymize) headers["X-Hearth-Anonymize"] = "true";
  const response = await apiFetch("/v1/chat/completions", {
    method: "POST",
    headers,
    signal: options.signal,
    body: JSON.stringify({
      model: "default",
      messages: options.messages,
      temperature: options.temperature,
      stream: true,
      stream_options: { include_usage: true },
    }),
  });
  if (!response.ok || !response.body) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const body = await response.json();
      if (body?.error?.message) message = body.error.message;
    } catch {
      // keep the status line
    }
    throw new Error(message);
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  const result: StreamResult = { finishReason: null, completionTokens: null, promptTokens: null };
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of frame.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") return result;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message ?? "the server reported an error");
        if (chunk.usage) {
          result.completionTokens = chunk.usage.completion_tokens;
          result.promptTokens = chunk.usage.prompt_tokens;
        }
        const choice = chunk.choices?.[0];
        if (!choice) continue;
        const delta = choice.delta ?? {};
        if (delta.content || delta.reasoning_content) options.onDelta(delta.content ?? "", delta.reasoning_content ?? "");
        if (choice.finish_reason) result.finishReason = choice.finish_reason;
      }
    }
  }
  return result;
}

/** One masked span, as `POST /api/privacy/preview` reports it (byte offsets). */
export interface MaskedEntity {
  kind: string;
  placeholder: string;
  start: number;
  end: number;
  text: string;
}

export interface PrivacyPreview {
  masked: string;
  entities: MaskedEntity[];
}

/** Asks the server which spans it will mask; `null` when the server has no privacy preview. */
export async function previewPrivacy(text: string): Promise<PrivacyPreview | null> {
  const response = await apiFetch("/api/privacy/preview", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ text }),
  });
  if (response.status === 404) return null;
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const body = await response.json();
      if (body?.error?.message) message = body.error.message;
    } catch {
      // keep the status line
    }
    throw new Error(message);
  }
  return (await response.json()) as PrivacyPreview;
}

/** Splits `text` into plain and masked segments (entity offsets are UTF-8 bytes). */
export function maskedSegments(text: string, entities: MaskedEntity[]): { text: string; entity?: MaskedEntity }[] {
  const bytes = new TextEncoder().encode(text);
  const decoder = new TextDecoder();
  const sorted = [...entities].sort((a, b) => a.start - b.start);
  const out: { text: string; entity?: MaskedEntity }[] = [];
  let at = 0;
  for (const e of sorted) {
    if (e.start < at || e.end > bytes.length || e.end <= e.start) continue;
    if (e.start > at) out.push({ text: decoder.decode(bytes.slice(at, e.start)) });
    out.push({ text: decoder.decode(bytes.slice(e.start, e.end)), entity: e });
    at = e.end;
  }
  if (at < bytes.length) out.push({ text: decoder.decode(bytes.slice(at)) });
  return out;
}
