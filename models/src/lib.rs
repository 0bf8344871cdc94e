//! Model architectures, weight loading and tokenizers for Hearth, on mlx-rs.
//!
//! A model folder (Hugging Face / MLX layout: `config.json`, safetensors,
//! tokenizer files) or a single GGUF file is turned into a [`LoadedModel`]:
//! a [`Model`](model::Model) that runs forward passes over a per-sequence
//! [`KvCache`](cache::KvCache), plus the [`Tokenizer`](tokenizer::Tokenizer)
//! and chat template that go with it.

pub mod chat_template;
pub mod detokenizer;
pub mod gguf;
pub mod tokenizer;
