//! OpenAI-compatible HTTP API (in progress).
