// Documents in chat: the server extracts the text (`POST /api/extract`, PDF,
// DOCX, text and code) and counts its tokens with the model's tokenizer; the
// user reviews it, and it is sent as context ahead of the message.
import { apiFetch } from "../auth/key";

export interface Attachment {
  name: string;
  kind: string;
  text: string;
  tokens: number;
}

export async function extractDocument(file: File): Promise<Attachment> {
  const response = await apiFetch(`/api/extract?filename=${encodeURIComponent(file.name)}`, {
    method: "POST",
    headers: { "content-type": file.type || "application/octet-stream" },
    body: file,
  });
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
  const body = await response.json();
  return { name: body.name, kind: body.kind, text: body.text, tokens: body.tokens };
}

/** The documents as context ahead of the user's message. */
export function documentContext(documents: Attachment[]): string {
  return documents.map((d) => `Document "${d.name}":\n\`\`\`\n${d.text}\n\`\`\`\n\n`).join("");
}
