// Chat: streaming answers (public `/v1/chat/completions`), markdown rendered
// and sanitized, a Stop button, conversations kept in this browser, system
// prompt, temperature, an Anonymize switch (the server masks personal data
// before the model sees it; the masked spans are shown), and documents
// (PDF, DOCX, text, code) extracted by the server, shown for review and sent
// as context.
import { useEffect, useRef, useState } from "preact/hooks";
import { renderMarkdown } from "../markdown";
import {
  Conversation, isConversationsKey, mergeConversations, newConversation, parseList, readStoredText, stamp, StoredMessage,
  storedText, writeStoredText,
} from "../chat/store";
import { ChatMessage, maskedSegments, MaskedEntity, previewPrivacy, streamChat } from "../chat/stream";
import { Attachment, extractDocument, documentContext } from "../chat/documents";
import { api } from "../api";
import { int } from "../format";

function Masked(props: { text: string; entities: MaskedEntity[] }) {
  return (
    <div class="masked" data-testid="masked-spans">
      <div class="muted">Sent to the model with these spans masked:</div>
      <p>
        {maskedSegments(props.text, props.entities).map((seg) =>
          seg.entity ? (
            <mark title={`${seg.entity.kind} → ${seg.entity.placeholder}`} data-kind={seg.entity.kind}>
              {seg.text}
            </mark>
          ) : (
            <span>{seg.text}</span>
          ),
        )}
      </p>
      <ul class="entity-list">
        {props.entities.map((e) => (
          <li>
            <code>{e.placeholder}</code> ← {e.kind}
          </li>
        ))}
      </ul>
    </div>
  );
}

function MessageView(props: { message: StoredMessage; streaming: boolean }) {
  const m = props.message;
  return (
    <div class={`message ${m.role}`} data-testid={`message-${m.role}`}>
      <div class="message-role">{m.role === "user" ? "You" : "Assistant"}</div>
      {m.documents && m.documents.length > 0 && (
        <div class="muted">Attached: {m.documents.map((d) => `${d.name} (${int(d.chars)} chars)`).join(", ")}</div>
      )}
      {m.reasoning && (
        <details class="reasoning">
          <summary>Reasoning</summary>
          <div>{m.reasoning}</div>
        </details>
      )}
      {m.role === "assistant" ? (
        <div class="markdown" data-testid="assistant-content" dangerouslySetInnerHTML={{ __html: renderMarkdown(m.content) }} />
      ) : m.typed != null ? (
        <>
          <div class="plain">{m.typed}</div>
          <details class="sent-context">
            <summary class="muted small">Everything sent (documents included)</summary>
            <div class="plain">{m.content}</div>
          </details>
        </>
      ) : (
        <div class="plain">{m.content}</div>
      )}
      {m.masked && m.masked.length > 0 && <Masked text={m.content} entities={m.masked} />}
      {props.streaming && <span class="cursor">▍</span>}
      {m.error && <p class="error" data-testid="chat-error">{m.error}</p>}
      {m.role === "assistant" && !props.streaming && m.finishReason && (
        <div class="muted small" data-testid="finish-reason">
          {m.finishReason === "stopped" ? "stopped" : `finish: ${m.finishReason}`}
          {m.completionTokens != null ? ` · ${m.completionTokens} tokens` : ""}
        </div>
      )}
    </div>
  );
}

export function ChatPage() {
  const [opening] = useState(() => {
    const raw = readStoredText();
    return { raw, list: parseList(raw) };
  });
  const [conversations, setConversations] = useState<Conversation[]>(() =>
    opening.list.length ? opening.list : [newConversation()],
  );
  const [activeId, setActiveId] = useState(conversations[0].id);
  const [input, setInput] = useState("");
  const [busy, setBusy] = useState(false);
  const [notice, setNotice] = useState<string | null>(null);
  const [attachments, setAttachments] = useState<Attachment[]>([]);
  const [contextLength, setContextLength] = useState<number | null>(null);
  const abort = useRef<AbortController | null>(null);
  const bottom = useRef<HTMLDivElement>(null);
  const conversation = conversations.find((c) => c.id === activeId) ?? conversations[0];

  // Every tab of this browser shares the stored list. `synced` is the text
  // this tab last read or wrote, and the ids it held: when the stored text
  // differs, another tab wrote, and its changes are merged in (newest change
  // of a conversation wins; deletions on either side stay deleted).
  const synced = useRef({ raw: opening.raw, ids: new Set(opening.list.map((c) => c.id)) });
  const sync = (mine: Conversation[]): Conversation[] => {
    const raw = readStoredText();
    let merged = mine;
    if (raw !== synced.current.raw) {
      merged = mergeConversations(mine, parseList(raw), synced.current.ids);
      if (merged.length === 0) merged = [newConversation()];
    }
    const text = storedText(merged);
    if (text === raw || writeStoredText(text)) {
      synced.current = { raw: text, ids: new Set(merged.filter((c) => !c.draft).map((c) => c.id)) };
    } else {
      synced.current = { raw, ids: new Set(parseList(raw).map((c) => c.id)) };
    }
    return merged;
  };
  // Saved when they change, not when the page opens: opening it must not
  // overwrite what another tab saved meanwhile.
  const opened = useRef(conversations);
  useEffect(() => {
    if (conversations === opened.current) return;
    const merged = sync(conversations);
    // A change made meanwhile (a streamed token) wins; the next run merges it.
    if (merged !== conversations) setConversations((list) => (list === conversations ? merged : list));
  }, [conversations]);
  useEffect(() => {
    const onStorage = (e: StorageEvent) => {
      if (e.storageArea === localStorage && isConversationsKey(e.key)) setConversations((list) => sync(list));
    };
    window.addEventListener("storage", onStorage);
    return () => window.removeEventListener("storage", onStorage);
  }, []);
  useEffect(() => bottom.current?.scrollIntoView({ block: "end" }), [conversation.messages]);
  useEffect(() => {
    api.status().then((s) => setContextLength(s.model?.context_length ?? null)).catch(() => undefined);
  }, []);

  const update = (id: string, f: (c: Conversation) => Conversation) =>
    setConversations((list) => list.map((c) => (c.id === id ? stamp(c, f(c), Date.now()) : c)));
  const setSettings = (patch: Partial<Conversation>) => update(conversation.id, (c) => ({ ...c, ...patch }));

  const addFiles = async (files: FileList | File[]) => {
    for (const file of Array.from(files)) {
      try {
        const doc = await extractDocument(file);
        setAttachments((list) => [...list, doc]);
      } catch (e) {
        setNotice(`${file.name}: ${e instanceof Error ? e.message : String(e)}`);
      }
    }
  };

  const docTokens = attachments.reduce((a, d) => a + d.tokens, 0);
  const tooLong = contextLength != null && docTokens > contextLength;

  const send = async () => {
    const text = input.trim();
    if ((!text && attachments.length === 0) || busy) return;
    if (tooLong) {
      setNotice(`The attached documents are ${int(docTokens)} tokens; the model's context is ${int(contextLength)} tokens. Remove some text first.`);
      return;
    }
    setNotice(null);
    const id = conversation.id;
    const content = documentContext(attachments) + text;
    const user: StoredMessage = {
      role: "user",
      content,
      typed: attachments.length ? text : undefined,
      documents: attachments.map((d) => ({ name: d.name, chars: d.text.length })),
    };
    if (conversation.anonymize) {
      try {
        const preview = await previewPrivacy(content);
        if (preview) user.masked = preview.entities;
        else setNotice("This server has no privacy preview (/api/privacy/preview); masked spans cannot be shown.");
      } catch (e) {
        setNotice(`Privacy preview failed: ${e instanceof Error ? e.message : String(e)}`);
      }
    }
    const history: ChatMessage[] = [
      ...(conversation.system.trim() ? [{ role: "system" as const, content: conversation.system }] : []),
      ...conversation.messages.filter((m) => !m.error).map((m) => ({ role: m.role, content: m.content })),
      { role: "user", content },
    ];
    const title = conversation.messages.length === 0 ? (text || attachments[0]?.name || "Conversation").slice(0, 40) : conversation.title;
    update(id, (c) => ({ ...c, title, messages: [...c.messages, user, { role: "assistant", content: "" }] }));
    setInput("");
    setAttachments([]);
    setBusy(true);
    const controller = new AbortController();
    abort.current = controller;
    const patchLast = (f: (m: StoredMessage) => StoredMessage) =>
      update(id, (c) => ({ ...c, messages: [...c.messages.slice(0, -1), f(c.messages[c.messages.length - 1])] }));
    try {
      const result = await streamChat({
        messages: history,
        temperature: conversation.temperature,
        anonymize: conversation.anonymize,
        signal: controller.signal,
        onDelta: (delta, reasoning) =>
          patchLast((m) => ({ ...m, content: m.content + delta, reasoning: reasoning ? (m.reasoning ?? "") + reasoning : m.reasoning })),
      });
      patchLast((m) => ({ ...m, finishReason: result.finishReason, completionTokens: result.completionTokens }));
    } catch (e) {
      if (controller.signal.aborted) patchLast((m) => ({ ...m, finishReason: "stopped" }));
      else patchLast((m) => ({ ...m, error: e instanceof Error ? e.message : String(e) }));
    } finally {
      setBusy(false);
      abort.current = null;
    }
  };

  const stop = () => abort.current?.abort();

  return (
    <section class="chat-page">
      <aside class="conversations">
        <button
          onClick={() => {
            const c = newConversation();
            setConversations((list) => [c, ...list]);
            setActiveId(c.id);
          }}
          data-testid="chat-new"
        >
          New conversation
        </button>
        <ul>
          {conversations.map((c) => (
            <li class={c.id === conversation.id ? "active" : ""}>
              <a href="#/chat" onClick={(e) => { e.preventDefault(); setActiveId(c.id); }}>{c.title}</a>
              <button
                class="link"
                title="Delete"
                onClick={() => {
                  const rest = conversations.filter((x) => x.id !== c.id);
                  const next = rest.length ? rest : [newConversation()];
                  setConversations(next);
                  if (c.id === conversation.id) setActiveId(next[0].id);
                }}
              >
                ×
              </button>
            </li>
          ))}
        </ul>
      </aside>
      <div class="chat-main">
        <details class="chat-settings" open={conversation.messages.length === 0}>
          <summary>Settings</summary>
          <label>
            System prompt
            <textarea rows={2} value={conversation.system} onInput={(e) => setSettings({ system: e.currentTarget.value })} data-testid="chat-system" />
          </label>
          <label>
            Temperature {conversation.temperature.toFixed(2)}
            <input type="range" min="0" max="2" step="0.05" value={conversation.temperature}
              onInput={(e) => setSettings({ temperature: Number(e.currentTarget.value) })} data-testid="chat-temperature" />
          </label>
        </details>
        <label class="switch">
          <input type="checkbox" checked={conversation.anonymize} onChange={(e) => setSettings({ anonymize: e.currentTarget.checked })} data-testid="chat-anonymize" />
          Anonymize (mask names, e-mails, phone numbers… before the model sees them)
        </label>
        <div class="messages" data-testid="chat-messages"
          onDragOver={(e) => e.preventDefault()}
          onDrop={(e) => { e.preventDefault(); if (e.dataTransfer?.files) addFiles(e.dataTransfer.files); }}>
          {conversation.messages.length === 0 && <p class="muted">Ask something, or drop a PDF, DOCX, Markdown or code file here.</p>}
          {conversation.messages.map((m, i) => (
            <MessageView message={m} streaming={busy && i === conversation.messages.length - 1} />
          ))}
          <div ref={bottom} />
        </div>
        {attachments.length > 0 && (
          <div class="attachments" data-testid="attachments">
            {attachments.map((d, i) => (
              <details class="attachment" data-testid="attachment">
                <summary>
                  {d.name} · {d.kind} · {int(d.text.length)} chars · {int(d.tokens)} tokens{" "}
                  <button class="link" onClick={() => setAttachments(attachments.filter((_, j) => j !== i))}>remove</button>
                </summary>
                <textarea rows={8} value={d.text} data-testid="attachment-text"
                  onInput={(e) => { const text = e.currentTarget.value; setAttachments(attachments.map((x, j) => (j === i ? { ...x, text } : x))); }} />
              </details>
            ))}
            {tooLong && (
              <p class="error" data-testid="context-warning">
                The documents are {int(docTokens)} tokens; the model's context is {int(contextLength)} tokens: they do not fit.
              </p>
            )}
          </div>
        )}
        {notice && <p class="notice" data-testid="chat-notice">{notice}</p>}
        <div class="composer">
          <textarea rows={3} value={input} placeholder="Message (Enter to send, Shift+Enter for a new line)" data-testid="chat-input"
            onInput={(e) => setInput(e.currentTarget.value)}
            onKeyDown={(e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); send(); } }} />
          <div class="composer-buttons">
            <label class="button">
              Attach
              <input type="file" multiple hidden data-testid="chat-attach"
                accept=".pdf,.docx,.md,.markdown,.txt,.rs,.py,.ts,.tsx,.js,.json,.toml,.yaml,.yml,.c,.h,.cpp,.go,.java,.sh,.html,.css,.csv"
                onChange={(e) => { if (e.currentTarget.files) addFiles(e.currentTarget.files); e.currentTarget.value = ""; }} />
            </label>
            {busy ? (
              <button onClick={stop} data-testid="chat-stop">Stop</button>
            ) : (
              <button class="primary" onClick={send} data-testid="chat-send">Send</button>
            )}
          </div>
        </div>
      </div>
    </section>
  );
}
